use super::*;
use crate::gpu::Sharing;
use crate::job::{percentile, JobSpec};
use crate::tally;
use crate::tandem::Off;
use crate::world::{run, Placement, RunCfg};

fn cfg(p: &Params, seed: u64, window_ns: u64) -> RunCfg {
    RunCfg {
        gpu: p.gpu.clone(),
        sharing: Sharing::Mps,
        seed,
        warmup_ns: 0,
        window_ns,
        drain_max_ns: 30_000_000_000,
        explicit_requests: false,
    }
}

/// Runs `trace` alone as the artifact's server does: Poisson arrivals at
/// half load (0.5 / the shortest service time seen, as
/// `get_possion_arrival_trace` with the warm-up's minimum) and
/// `Params::cpu_cv`; returns the service times (ms).
fn serve_alone(p: &Params, trace: &Trace, window_ns: u64, seed: u64) -> Vec<f64> {
    // Warm-up: 10 requests back to back, the shortest one.
    let one = alone_step_ns(&trace.ops, p);
    let warm = JobSpec {
        trace: trace.clone(),
        rate_per_s: 2e9 / one as f64,
        cpu_cv: p.cpu_cv,
        sm_pct: 100,
    };
    let ten = one * 10;
    let (w, _) = run(
        &cfg(p, seed + 1000, ten),
        &[warm],
        &[Placement { priority: 0 }],
        &mut Off,
    );
    let q_min = w[0]
        .service_ms
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let spec = JobSpec {
        trace: trace.clone(),
        rate_per_s: 0.5 / (q_min / 1e3),
        cpu_cv: p.cpu_cv,
        sm_pct: 100,
    };
    let (out, _) = run(
        &cfg(p, seed, window_ns),
        &[spec],
        &[Placement { priority: 0 }],
        &mut Off,
    );
    out[0].service_ms.clone()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

#[test]
fn every_job_is_a_valid_trace_with_launch_resources() {
    let p = Params::a100();
    for name in INFERENCE_JOBS.iter().chain(&TRAINING_JOBS) {
        let t = job(&p, name).unwrap();
        t.check().unwrap();
        assert_eq!(Trace::from_json(&t.to_json()).unwrap(), t, "{name}");
        for k in t.kernels() {
            assert!(
                k.regs_per_thread > 0 && k.dram_bytes > 0,
                "{name} {}",
                k.name
            );
            let threads = k.block[0] * k.blocks_per_sm;
            assert!(threads <= p.gpu.sm.threads, "{name} {}", k.name);
            assert!(
                k.regs_per_thread * threads <= p.gpu.sm.regs + 32 * 256,
                "{name} {}",
                k.name
            );
            assert!(
                (k.smem_per_block + 1024) * k.blocks_per_sm <= p.gpu.sm.smem,
                "{name} {}",
                k.name
            );
        }
    }
    assert!(job(&p, "nope").is_none());
}

#[test]
fn occupancy_follows_the_tightest_resource() {
    let sm = SmResources::AMPERE;
    // 256 threads x 255 registers: one block's warps hold 8 x 8192.
    assert_eq!(occupancy(HGEMM, sm), 1);
    // 256 x 128 registers: 32 K a block, two fit.
    assert_eq!(occupancy(SGEMM, sm), 2);
    // 128 threads, 32 registers, no shared memory: threads limit (16).
    assert_eq!(occupancy(ELT, sm), 16);
    // 1024 threads: two.
    assert_eq!(occupancy(IM2COL, sm), 2);
    // Shared memory decides: 100 KB blocks, one per 163 KB.
    let big = Family {
        threads: 64,
        regs: 32,
        smem: 100 * 1024,
    };
    assert_eq!(occupancy(big, sm), 1);
}

/// Alone at half load, each inference trace reproduces the artifact's
/// alone service-time p99 within 15%, and its mean, p90 and p95 within
/// 5% (BERT 4.05 / 4.066 / 4.076 / 4.098 ms; Llama-2-7B 1963.9 / 1970.4
/// / 1975.8 / 1982.7 ms).
#[test]
fn inference_alone_reproduces_the_artifacts_latencies() {
    let p = Params::a100();
    // BERT: ~2,000 requests; Llama: ~26 whole generations (30,000
    // kernels each).
    for (name, window) in [
        ("bert_ort", 16_000_000_000u64),
        ("llama2_7b_ort", 100_000_000_000),
    ] {
        let t = job(&p, name).unwrap();
        let s = serve_alone(&p, &t, window, 1);
        let want = tally::PAIRS
            .iter()
            .find(|x| x.inference == name)
            .unwrap()
            .alone;
        let got = [
            mean(&s),
            percentile(&s, 90.0).unwrap(),
            percentile(&s, 95.0).unwrap(),
            percentile(&s, 99.0).unwrap(),
        ];
        let csv = [want.avg_ms, want.p90_ms, want.p95_ms, want.p99_ms];
        println!(
            "{name}: {} requests, mean/p90/p95/p99 {got:.3?} ms, artifact {csv:?}",
            s.len()
        );
        assert!(s.len() >= 20, "{name}: {} requests", s.len());
        let r99 = got[3] / csv[3];
        assert!(
            (1.0 / 1.15..=1.15).contains(&r99),
            "{name}: p99 {:.3} ms vs {}",
            got[3],
            csv[3]
        );
        for (g, c) in got.iter().zip(csv).take(3) {
            assert!((g / c - 1.0).abs() < 0.05, "{name}: {g:.3} ms vs {c}");
        }
    }
}

/// Alone, each training step's kernels are busy for the job's measured
/// GPU utilisation (within 0.03), and the engine runs the step in the
/// time [`alone_step_ns`] gives it (within 1%).
#[test]
fn training_alone_matches_the_artifacts_gpu_utilisation() {
    let p = Params::a100();
    for name in TRAINING_JOBS {
        let t = job(&p, name).unwrap();
        let step = alone_step_ns(&t.ops, &p);
        let spec = JobSpec {
            trace: t.clone(),
            rate_per_s: 0.0,
            cpu_cv: 0.0,
            sm_pct: 100,
        };
        let window = step * 4 + step / 3;
        let (out, _) = run(
            &cfg(&p, 1, window),
            &[spec],
            &[Placement { priority: 0 }],
            &mut Off,
        );
        let simulated = 1e9 / out[0].steps_per_s.unwrap();
        let busy = t.kernel_ns() as f64 / step as f64;
        let want = tally::GPU_UTIL_ALONE
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
            / 100.0;
        println!(
            "{name}: step {:.1} ms ({:.1} ms simulated), {} kernels, GPU {:.1} ms, busy {busy:.3} (artifact {want:.3})",
            step as f64 / 1e6,
            simulated / 1e6,
            t.kernels().count(),
            t.kernel_ns() as f64 / 1e6,
        );
        assert!(
            (busy - want).abs() < 0.03,
            "{name}: busy {busy:.3} vs {want:.3}"
        );
        let ratio = simulated / step as f64;
        assert!(
            (ratio - 1.0).abs() < 0.01,
            "{name}: simulated step / estimate {ratio:.4}"
        );
    }
}

/// A GPU's time slice, switch and launch floor reach the A100, which
/// carries the H100's; its own SMs, DRAM, interference and saturating
/// share do not move.
#[test]
fn the_a100_carries_the_h100s_measured_slice_switch_and_floor_only() {
    assert_eq!(Params::a100(), Params::a100_over(&Params::calibrated()));
    let mut h100 = Params::calibrated();
    crate::measured::apply_json(
        &mut h100,
        r#"{"skipped": null, "timeslice": {"median_ns": 1024000}, "switch": {"median_ns": 60000}}"#,
    )
    .unwrap();
    crate::measured::apply_engine_rules_json(
        &mut h100,
        r#"{"bandwidth": {"findings": {"share_of_sms_for_90pct": 0.4}},
            "launch_floor": {"findings": {"empty_back_to_back_ns": 1800}},
            "neighbours": {"findings": {"burn_beside_copy": 1.1, "disjoint": true,
                "victim_sms": 16, "aggressor_sms": 112}}}"#,
    )
    .unwrap();
    let a = Params::a100_over(&h100);
    let own = Params::a100();
    assert_eq!(
        (a.timeslice_ns, a.switch_ns, a.kernel_floor_ns),
        (1_024_000, 60_000, 1_800)
    );
    assert_eq!(a.gpu.interference, own.gpu.interference);
    assert_eq!(a.gpu.dram_saturating_share, own.gpu.dram_saturating_share);
    assert_eq!(
        (a.gpu.sms, a.gpu.dram_bytes_per_ns),
        (108, own.gpu.dram_bytes_per_ns)
    );
    let mut back = a.clone();
    back.timeslice_ns = own.timeslice_ns;
    back.switch_ns = own.switch_ns;
    back.kernel_floor_ns = own.kernel_floor_ns;
    assert_eq!(back, own, "nothing else moved");
}
