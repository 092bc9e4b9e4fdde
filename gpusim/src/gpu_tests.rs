//! The engine's mechanics, one rule per test.

use super::*;

const US: Ns = 1_000;
const MS: Ns = 1_000_000;

fn params() -> GpuParams {
    GpuParams {
        sms: 132,
        interference: 0.0,
        copy_bytes_per_ns: 25.0,
        copy_latency_ns: 5 * US,
        spread_pieces: 4,
        sm: SmResources::HOPPER,
        dram_bytes_per_ns: 3350.0,
        fifo_dispatch: true,
        dram_contention: true,
        dram_saturating_share: 1.0,
    }
}

fn cfg(priority: u8) -> ClientCfg {
    ClientCfg {
        priority,
        sm_cap: 132,
    }
}

fn ts() -> Sharing {
    Sharing::TimeSlice {
        timeslice_ns: 2 * MS,
        switch_ns: 50 * US,
    }
}

/// A kernel that fills the GPU for `d` (one block per SM, one wave).
fn full(d: Ns) -> Work {
    Work::Kernel {
        blocks: 132,
        blocks_per_sm: 1,
        duration_ns: d,
        sm_share: 1.0,
        mem_frac: 0.0,
        sm_limit: 0,
    }
}

/// Runs the engine until nothing is left; returns every completion.
fn drain(g: &mut Gpu) -> Vec<Done> {
    let mut done = Vec::new();
    while let Some(t) = g.next_time() {
        g.advance(t, &mut done);
    }
    done
}

fn at(done: &[Done], client: usize, token: u64) -> Ns {
    done.iter()
        .find(|d| d.client == client && d.token == token)
        .unwrap_or_else(|| panic!("client {client} token {token} never completed: {done:?}"))
        .at
}

#[test]
fn a_lone_kernel_takes_its_duration_in_any_mode_and_streams_keep_order() {
    for sharing in [ts(), Sharing::Mps] {
        let mut g = Gpu::new(params(), &sharing, &[cfg(0)]);
        // 3 waves of 44 us blocks: 132 us in all.
        g.submit(
            1_000,
            0,
            0,
            Work::Kernel {
                blocks: 3 * 264,
                blocks_per_sm: 2,
                duration_ns: 132 * US,
                sm_share: 1.0,
                mem_frac: 0.0,
                sm_limit: 0,
            },
            1,
        );
        g.submit(1_000, 0, 0, full(10 * US), 2);
        let done = drain(&mut g);
        let first = at(&done, 0, 1) - 1_000;
        let second = at(&done, 0, 2);
        // Under time-slicing the first activation costs one switch.
        let switch = if sharing == Sharing::Mps { 0 } else { 50 * US };
        assert_eq!(first, 132 * US + switch, "{sharing:?}");
        assert_eq!(second, at(&done, 0, 1) + 10 * US, "stream order");
        assert!(g.idle(0));
    }
}

#[test]
fn small_kernels_of_two_streams_overlap_where_sms_allow() {
    let mut g = Gpu::new(params(), &Sharing::Mps, &[cfg(0)]);
    let half = Work::Kernel {
        blocks: 60,
        blocks_per_sm: 1,
        duration_ns: 100 * US,
        sm_share: 1.0,
        mem_frac: 0.0,
        sm_limit: 0,
    };
    g.submit(0, 0, 0, half, 1);
    g.submit(0, 0, 1, half, 2);
    let done = drain(&mut g);
    assert_eq!((at(&done, 0, 1), at(&done, 0, 2)), (100 * US, 100 * US));
}

#[test]
fn two_equal_compute_bound_jobs_under_time_slicing_each_get_about_half() {
    let mut g = Gpu::new(params(), &ts(), &[cfg(0), cfg(0)]);
    // Each job: 200 kernels of 500 us that fill the GPU (100 ms alone).
    for c in 0..2 {
        for i in 0..200 {
            g.submit(0, c, 0, full(500 * US), i);
        }
    }
    let mut done = Vec::new();
    let mut mid = None;
    while let Some(t) = g.next_time() {
        g.advance(t, &mut done);
        if mid.is_none() && t >= 100 * MS {
            mid = Some((g.sm_ns(0), g.sm_ns(1)));
        }
    }
    // Half-way (100 ms), each has had about half of the GPU.
    let (a, b) = mid.expect("ran past 100 ms");
    let share = a / (a + b);
    assert!((share - 0.5).abs() < 0.05, "share {share}");
    // Both finish at about twice their time alone, plus the switches.
    let (ea, eb) = (at(&done, 0, 199), at(&done, 1, 199));
    for e in [ea, eb] {
        assert!(e > 190 * MS && e < 210 * MS, "{ea} {eb}");
    }
    assert!(
        g.switches() >= 90,
        "about one switch per 2 ms slice: {}",
        g.switches()
    );
}

#[test]
fn a_long_kernel_is_preempted_at_the_slice_under_time_slicing_but_not_under_mps() {
    // Client 0 starts a 10 ms kernel; client 1 submits a 100 us kernel at 1 ms.
    let run = |sharing: Sharing| {
        let mut g = Gpu::new(params(), &sharing, &[cfg(0), cfg(0)]);
        g.submit(0, 0, 0, full(10 * MS), 1);
        let mut done = Vec::new();
        while let Some(t) = g.next_time() {
            if t > MS {
                break;
            }
            g.advance(t, &mut done);
        }
        g.submit(MS, 1, 0, full(100 * US), 2);
        done.extend(drain(&mut g));
        (at(&done, 0, 1), at(&done, 1, 2))
    };
    // Time-slicing: the slice (2 ms, from the 50 us switch on) ends, the
    // long kernel is preempted, the short one runs, then the long one
    // resumes where it stopped.
    let (long, short) = run(ts());
    let slice_end = 50 * US + 2 * MS;
    assert_eq!(short, slice_end + 50 * US + 100 * US);
    assert_eq!(long, short + 50 * US + (10 * MS + 50 * US - slice_end));
    // MPS: its blocks run to their end; the short kernel waits for SMs.
    let (long, short) = run(Sharing::Mps);
    assert_eq!(long, 10 * MS, "never preempted");
    assert_eq!(short, 10 * MS + 100 * US);
}

#[test]
fn under_mps_the_high_priority_clients_pending_blocks_dispatch_first() {
    // Both clients have a kernel of many short blocks; the low-priority one
    // was ready first and holds the GPU. As its blocks complete, the freed
    // SMs go to the high-priority kernel until it has all it needs.
    let many = Work::Kernel {
        blocks: 132 * 20,
        blocks_per_sm: 1,
        duration_ns: 20 * 10 * US,
        sm_share: 1.0,
        mem_frac: 0.0,
        sm_limit: 0,
    };
    let run = |hi: u8, lo: u8| {
        let mut g = Gpu::new(params(), &Sharing::Mps, &[cfg(lo), cfg(hi)]);
        g.submit(0, 0, 0, many, 1);
        let mut done = Vec::new();
        g.advance(0, &mut done);
        g.submit(5 * US, 1, 0, many, 2);
        let mut held_at_30us = None;
        while let Some(t) = g.next_time() {
            g.advance(t, &mut done);
            if held_at_30us.is_none() && t >= 30 * US {
                held_at_30us = Some(g.held(1));
            }
        }
        (at(&done, 0, 1), at(&done, 1, 2), held_at_30us.unwrap())
    };
    let (lo_end, hi_end, hi_held) = run(0, 1);
    assert_eq!(
        hi_held, 132,
        "the high-priority client holds every SM once one block time passed"
    );
    assert!(hi_end < lo_end, "{hi_end} {lo_end}");
    assert!(
        hi_end <= 5 * US + 200 * US + 20 * US,
        "nearly its alone time: {hi_end}"
    );
    // At equal priority they share: the second is much later.
    let (_, eq_end, eq_held) = run(0, 0);
    assert!(eq_held < 100, "{eq_held}");
    assert!(eq_end > 300 * US, "{eq_end}");
}

#[test]
fn a_waiting_kernel_gets_sms_as_blocks_complete() {
    // A low-priority kernel of 4 waves of 400 us blocks holds the GPU; a
    // high-priority kernel wanting every SM arrives 10 us into the second
    // wave. Running blocks are not preempted: it gets SMs as they free up,
    // about a quarter per 100 us (spread over one block time), neither all
    // at once nor at once.
    let mut g = Gpu::new(params(), &Sharing::Mps, &[cfg(1), cfg(0)]);
    g.submit(
        0,
        0,
        0,
        Work::Kernel {
            blocks: 4 * 132,
            blocks_per_sm: 1,
            duration_ns: 1_600 * US,
            sm_share: 1.0,
            mem_frac: 0.0,
            sm_limit: 0,
        },
        1,
    );
    let mut done = Vec::new();
    while let Some(t) = g.next_time().filter(|&t| t <= 410 * US) {
        g.advance(t, &mut done);
    }
    let high = Work::Kernel {
        blocks: 132 * 10,
        blocks_per_sm: 1,
        duration_ns: 10 * 50 * US,
        sm_share: 1.0,
        mem_frac: 0.0,
        sm_limit: 0,
    };
    g.submit(410 * US, 1, 0, high, 2);
    let mut seen = Vec::new();
    while let Some(t) = g.next_time() {
        g.advance(t, &mut done);
        seen.push((t, g.held(1)));
    }
    let held_at = |x: Ns| {
        seen.iter()
            .rev()
            .find(|&&(t, _)| t <= x)
            .map_or(0, |&(_, h)| h)
    };
    let (a, b, c) = (held_at(470 * US), held_at(570 * US), held_at(770 * US));
    assert!(a > 0 && a < b && b < c && c == 132, "{a} {b} {c}");
    assert_eq!(
        held_at(450 * US),
        0,
        "nothing before the first blocks complete"
    );
    // The low kernel's blocks dispatched before the wait all ended, and it
    // finished after the high one.
    assert!(at(&done, 1, 2) < at(&done, 0, 1));
}

#[test]
fn the_thread_percentage_caps_a_clients_sms() {
    let mut g = Gpu::new(
        params(),
        &Sharing::Mps,
        &[ClientCfg {
            priority: 0,
            sm_cap: 66,
        }],
    );
    g.submit(0, 0, 0, full(100 * US), 1);
    let done = drain(&mut g);
    assert_eq!(at(&done, 0, 1), 200 * US, "two waves on half the SMs");
}

#[test]
fn copies_run_in_stream_order_on_their_engine() {
    let mut g = Gpu::new(params(), &Sharing::Mps, &[cfg(0), cfg(0)]);
    g.submit(
        0,
        0,
        0,
        Work::Copy {
            bytes: 25_000,
            d2h: false,
        },
        1,
    );
    g.submit(0, 0, 0, full(10 * US), 2);
    g.submit(
        0,
        1,
        0,
        Work::Copy {
            bytes: 25_000,
            d2h: false,
        },
        3,
    );
    let done = drain(&mut g);
    assert_eq!(at(&done, 0, 1), 6 * US, "5 us latency + 1 us at 25 GB/s");
    assert_eq!(
        at(&done, 0, 2),
        16 * US,
        "the kernel waits for the copy before it"
    );
    assert_eq!(
        at(&done, 1, 3),
        12 * US,
        "one engine: the second copy queues"
    );
}

/// A memory-bound kernel: `sms` SMs for one wave of `d`, pulling DRAM at
/// `m` of the peak.
fn mem_bound(sms: u64, d: Ns, m: f64) -> Work {
    Work::Kernel {
        blocks: sms,
        blocks_per_sm: 1,
        duration_ns: d,
        sm_share: 1.0,
        mem_frac: m,
        sm_limit: 0,
    }
}

#[test]
fn kernels_that_together_pull_more_than_the_dram_peak_stretch_their_memory_time() {
    let run = |contention: bool| {
        let p = GpuParams {
            dram_contention: contention,
            ..params()
        };
        let mut g = Gpu::new(p, &Sharing::Mps, &[cfg(0), cfg(0)]);
        // Each on half the GPU, each pulling 80% of the peak on its 66 SMs:
        // 160% together.
        g.submit(0, 0, 0, mem_bound(66, 100 * US, 0.8), 1);
        g.submit(0, 1, 0, mem_bound(66, 100 * US, 0.8), 1);
        let done = drain(&mut g);
        (at(&done, 0, 1), at(&done, 1, 1))
    };
    assert_eq!(run(false), (100 * US, 100 * US));
    let (a, b) = run(true);
    // The first found the DRAM free (80%); the second made it 160%: its
    // memory share (0.8) stretches 1.6x, 0.2 + 0.8 x 1.6 = 1.48.
    assert_eq!(a, 100 * US);
    assert_eq!(b, 148 * US);
    // A compute-bound kernel beside a memory-bound one is not slowed.
    let mut g = Gpu::new(params(), &Sharing::Mps, &[cfg(0), cfg(0)]);
    g.submit(0, 0, 0, mem_bound(66, 100 * US, 1.0), 1);
    g.submit(0, 1, 0, mem_bound(66, 100 * US, 0.0), 1);
    let done = drain(&mut g);
    assert_eq!(at(&done, 1, 1), 100 * US);
}

#[test]
fn a_bandwidth_bound_kernel_squeezed_onto_fewer_sms_keeps_its_speed_where_fewer_saturate_dram() {
    // One wave of 100 us on all 132 SMs alone, masked to 66: two waves.
    let run = |saturating: f64, m: f64| {
        let p = GpuParams {
            dram_saturating_share: saturating,
            ..params()
        };
        let mut g = Gpu::new(p, &Sharing::Mps, &[cfg(0)]);
        g.submit(
            0,
            0,
            0,
            Work::Kernel {
                blocks: 132,
                blocks_per_sm: 1,
                duration_ns: 100 * US,
                sm_share: 1.0,
                mem_frac: m,
                sm_limit: 66,
            },
            1,
        );
        at(&drain(&mut g), 0, 1)
    };
    // gpusim-3's rule (1): every kernel loses speed with its SMs.
    assert_eq!(run(1.0, 1.0), 200 * US);
    assert_eq!(run(1.0, 0.0), 200 * US);
    // Half the SMs saturate DRAM: a wholly memory-bound kernel on half the
    // SMs runs as fast as alone; a compute-bound one still takes twice as
    // long; half and half, 0.5 + 0.5 / 2 of each block.
    assert_eq!(run(0.5, 1.0), 100 * US);
    assert_eq!(run(0.5, 0.0), 200 * US);
    assert_eq!(run(0.5, 0.5), 150 * US);
    // The gain: bounded by the per-SM limit and by the kernel's own SMs.
    assert_eq!(crate::gpu::dram::dram_gain(0.25, 132, 132, 66), 2.0);
    assert_eq!(
        crate::gpu::dram::dram_gain(0.75, 132, 132, 66),
        132.0 / 99.0
    );
    assert_eq!(crate::gpu::dram::dram_gain(0.5, 132, 132, 132), 1.0);
    assert_eq!(crate::gpu::dram::dram_gain(0.5, 132, 20, 10), 1.0);
}

#[test]
fn a_small_kernel_behind_a_long_one_of_equal_priority_waits_for_its_last_wave() {
    // Client 0's kernel: 4 waves of 100 us on every SM. Client 1's small
    // kernel arrives at 50 us. In arrival order it gets SMs only once the
    // big kernel's last wave is dispatched and its blocks end (300 us, then
    // spread over its last wave); with equal shares it gets SMs as the first
    // wave's blocks end.
    let run = |fifo: bool| {
        let p = GpuParams {
            fifo_dispatch: fifo,
            ..params()
        };
        let mut g = Gpu::new(p, &Sharing::Mps, &[cfg(0), cfg(0)]);
        g.submit(
            0,
            0,
            0,
            Work::Kernel {
                blocks: 4 * 132,
                blocks_per_sm: 1,
                duration_ns: 400 * US,
                sm_share: 1.0,
                mem_frac: 0.0,
                sm_limit: 0,
            },
            1,
        );
        let mut done = Vec::new();
        while let Some(t) = g.next_time() {
            if t > 50 * US {
                break;
            }
            g.advance(t, &mut done);
        }
        g.submit(50 * US, 1, 0, mem_bound(8, 10 * US, 0.0), 1);
        done.extend(drain(&mut g));
        at(&done, 1, 1)
    };
    let fair = run(false);
    let fifo = run(true);
    assert!(fair <= 110 * US, "equal shares: {fair}");
    assert!(fifo >= 300 * US, "arrival order: {fifo}");
}

/// A training kernel whose launch carried a mask of 100 SMs leaves 32 free:
/// an inference kernel arriving while its many waves are pending starts at
/// once on them and ends in its own time alone. Without the mask (and at
/// equal priority) it waits until training's last wave has been dispatched.
#[test]
fn a_masked_kernel_leaves_the_rest_of_the_sms_to_other_clients() {
    let run = |limit: u32| {
        let mut g = Gpu::new(params(), &Sharing::Mps, &[cfg(0), cfg(0)]);
        // 20 waves of 100 us blocks on a full GPU.
        let training = Work::Kernel {
            blocks: 20 * 132,
            blocks_per_sm: 1,
            duration_ns: 2 * MS,
            sm_share: 1.0,
            mem_frac: 0.0,
            sm_limit: limit,
        };
        let inference = Work::Kernel {
            blocks: 32,
            blocks_per_sm: 1,
            duration_ns: 50 * US,
            sm_share: 1.0,
            mem_frac: 0.0,
            sm_limit: 0,
        };
        g.submit(0, 1, 0, training, 1);
        g.submit(10 * US, 0, 0, inference, 2);
        let done = drain(&mut g);
        (at(&done, 0, 2) - 10 * US, at(&done, 1, 1))
    };
    let (inf_masked, train_masked) = run(100);
    assert_eq!(inf_masked, 50 * US, "the free SMs take it at once");
    let (inf_open, _) = run(0);
    assert!(
        inf_open > MS,
        "unmasked, it waits for training's waves: {inf_open}"
    );
    // Training on 100 of 132 SMs: 2640 blocks in 27 waves of 100 us.
    assert_eq!(train_masked, 27 * 100 * US);
}

#[test]
fn round_ns_is_f64_round_on_the_engines_range() {
    let mut x = 0.0f64;
    for v in [
        0.0,
        0.25,
        0.5,
        0.49999999999999994,
        1.5,
        2.5,
        1e6 + 0.5,
        4.5e15 + 0.5,
    ] {
        assert_eq!(super::round_ns(v), v.round() as Ns, "{v}");
    }
    let mut r = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..100_000 {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        x = (r >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((r % 13) as i32);
        assert_eq!(super::round_ns(x), x.round() as Ns, "{x}");
    }
    assert!(x >= 0.0);
}
