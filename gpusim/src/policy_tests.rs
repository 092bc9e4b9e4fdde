//! The scheduler's behavioural tests that ran in the retired FIFO simulator
//! (`sched/src/sim.rs`), now against this model: tandem v1 driven by the
//! records its shims would write, on a GPU that time-slices or runs MPS.
//! Directions only (no timing claims): which way each mechanism moves p99
//! and training throughput, in one seeded run each.

use tandem_sched::{Knobs, SchedConfig};

use crate::gpu::Sharing;
use crate::job::{JobSpec, Outcome};
use crate::params::Params;
use crate::synthetic;
use crate::tandem::{Off, TandemSide, TandemV1};
use crate::trace::{JobClass, Kernel, Op, Trace, FORMAT};
use crate::world::{run, Placement, RunCfg};

const MS: u64 = 1_000_000;

fn cfg(sharing: Sharing, seed: u64) -> RunCfg {
    let p = Params::calibrated();
    RunCfg {
        gpu: p.gpu.clone(),
        sharing,
        seed,
        warmup_ns: 500 * MS,
        window_ns: 4_000 * MS,
        drain_max_ns: 2_000 * MS,
        explicit_requests: false,
    }
}

fn pair() -> [JobSpec; 2] {
    let p = Params::calibrated();
    [
        JobSpec {
            trace: synthetic::job(&p, "resnet50_b4").unwrap(),
            rate_per_s: 100.0,
            cpu_cv: p.cpu_cv,
            sm_pct: 100,
        },
        JobSpec {
            trace: synthetic::job(&p, "resnet50_train").unwrap(),
            rate_per_s: 0.0,
            cpu_cv: p.train_cv,
            sm_pct: 100,
        },
    ]
}

const NORMAL: [Placement; 2] = [Placement { priority: 0 }, Placement { priority: 0 }];

fn go(sharing: Sharing, jobs: &[JobSpec], t: &mut dyn TandemSide) -> Vec<Outcome> {
    run(&cfg(sharing, 1), jobs, &NORMAL[..jobs.len()], t).0
}

fn p99(o: &Outcome) -> f64 {
    o.percentile(99.0).unwrap()
}

#[test]
fn the_model_is_deterministic_with_tandem_in_the_loop() {
    let plain = Params::calibrated().plain();
    let a = go(
        plain.clone(),
        &pair(),
        &mut TandemV1::new(SchedConfig::default()),
    );
    let b = go(plain, &pair(), &mut TandemV1::new(SchedConfig::default()));
    assert_eq!(a, b);
    assert!(a[0].latencies_ms.len() > 300, "{}", a[0].latencies_ms.len());
}

#[test]
fn tandem_v1_gates_training_beside_inference_and_never_alone() {
    let plain = Params::calibrated().plain();
    let jobs = pair();
    let off = go(plain.clone(), &jobs, &mut Off);
    let mut v1 = TandemV1::new(SchedConfig::default());
    let on = go(plain.clone(), &jobs, &mut v1);
    // The gate acts: training waited, and gave up throughput for it.
    assert!(v1.waits.0 > 100, "training never waited: {:?}", v1.waits);
    let (f_off, f_on) = (off[1].steps_per_s.unwrap(), on[1].steps_per_s.unwrap());
    assert!(
        f_on < f_off,
        "training {f_on} with tandem vs {f_off} without"
    );
    // Training alone is not slowed by tandem (nothing to protect: gates open).
    let alone = go(plain.clone(), &jobs[1..], &mut Off)[0]
        .steps_per_s
        .unwrap();
    let mut v1 = TandemV1::new(SchedConfig::default());
    let alone_on = go(plain, &jobs[1..], &mut v1)[0].steps_per_s.unwrap();
    assert!(alone_on > 0.98 * alone, "{alone_on} vs {alone}");
    assert_eq!(v1.waits, (0, 0));
}

#[test]
fn under_time_slicing_tandem_v1_lowers_inference_p99_at_batch_4() {
    // Off: batch-4 requests wait for training's 5 ms slices. With v1 the
    // training queue stays within its budget, so the slices it can claim
    // while a request runs are shorter.
    let plain = Params::calibrated().plain();
    let jobs = pair();
    let off = go(plain.clone(), &jobs, &mut Off);
    let on = go(plain, &jobs, &mut TandemV1::new(SchedConfig::default()));
    assert!(
        p99(&on[0]) < p99(&off[0]),
        "p99 on {} vs off {}",
        p99(&on[0]),
        p99(&off[0])
    );
}

#[test]
fn the_kept_rule_blocks_training_while_inference_work_is_queued() {
    // "Budget 0 while inference work is queued" (the kept knob) against the
    // contract's v1 rule: no worse for inference, in the same run.
    let plain = Params::calibrated().plain();
    let jobs = pair();
    let kept = go(
        plain.clone(),
        &jobs,
        &mut TandemV1::new(SchedConfig::default()),
    );
    let v1_rule = Knobs {
        block_while_inference_queued: false,
        ..Knobs::default()
    };
    let rule = go(
        plain,
        &jobs,
        &mut TandemV1::with_knobs(SchedConfig::default(), v1_rule),
    );
    assert!(
        p99(&kept[0]) <= p99(&rule[0]) * 1.05,
        "kept {} vs v1 rule {}",
        p99(&kept[0]),
        p99(&rule[0])
    );
}

/// A trainer whose 1-3 ms kernels sync every `sync_every` launches.
fn long_kernel_trainer(sync_every: usize) -> JobSpec {
    let durations = [2 * MS, 1_500_000, 3 * MS, 2 * MS, MS, 2_500_000];
    let mut ops = Vec::new();
    for i in 0..sync_every {
        ops.push(Op::Kernel(Kernel {
            host_gap_ns: 20_000,
            ..Kernel::new(
                &format!("k{}", i % durations.len()),
                132,
                256,
                1,
                durations[i % durations.len()],
            )
        }));
    }
    ops.push(Op::Sync { host_gap_ns: 0 });
    let trace = Trace {
        format: FORMAT.into(),
        job: "long".into(),
        class: JobClass::Training,
        source: "synthetic".into(),
        device: String::new(),
        notes: String::new(),
        ops,
    };
    JobSpec {
        trace,
        rate_per_s: 0.0,
        cpu_cv: 0.0,
        sm_pct: 100,
    }
}

#[test]
fn completion_marks_keep_a_rarely_syncing_trainer_estimated() {
    // Syncing every 50 launches (~100 ms): without marks, estimates come
    // from syncs alone; with them, from marks every 500 us too. Marks must
    // not make inference worse (beyond noise) nor cost training much.
    let plain = Params::calibrated().plain();
    let jobs = [pair()[0].clone(), long_kernel_trainer(50)];
    let on = go(
        plain.clone(),
        &jobs,
        &mut TandemV1::new(SchedConfig::default()),
    );
    let no_marks = SchedConfig {
        mark_every_ns: 0,
        ..SchedConfig::default()
    };
    let unmarked = go(plain, &jobs, &mut TandemV1::new(no_marks));
    assert!(
        p99(&on[0]) < 2.0 * p99(&unmarked[0]),
        "{} vs {}",
        p99(&on[0]),
        p99(&unmarked[0])
    );
    let (a, b) = (on[1].steps_per_s.unwrap(), unmarked[1].steps_per_s.unwrap());
    assert!(a > 0.9 * b, "training {a} with marks vs {b} without");
}

#[test]
fn under_mps_low_priority_training_protects_inference_at_batch_32() {
    let p = Params::calibrated();
    let mut jobs = pair();
    jobs[0] = JobSpec {
        trace: synthetic::job(&p, "resnet50_b32").unwrap(),
        rate_per_s: 40.0,
        ..jobs[0].clone()
    };
    let even = run(&cfg(Sharing::Mps, 1), &jobs, &NORMAL, &mut Off).0;
    let low = run(
        &cfg(Sharing::Mps, 1),
        &jobs,
        &[Placement { priority: 0 }, Placement { priority: 1 }],
        &mut Off,
    )
    .0;
    assert!(
        p99(&low[0]) < p99(&even[0]),
        "{} vs {}",
        p99(&low[0]),
        p99(&even[0])
    );
}
