//! ns per cuLaunchKernel of a 0 ns noop kernel on the fake driver, called
//! directly and through libtandem.so's hook, (a) with an in-process coordinator
//! attached (every launch: gate load + one ring record) and (b) after that
//! coordinator is gone (no session: the shim's fail-open path).
//!
//! Setup as tests/e2e/benches/launch.rs: the fake is dlopen'ed first, then the
//! shim (RTLD_LOCAL); TANDEM_SOCKET points at the in-process coordinator of
//! `tests/support` (64 Ki-record ring, drained every millisecond, records
//! counted, not kept). After the criterion groups, an interleaved measurement
//! prints the added ns per launch in both states (report only), and with the
//! coordinator attached, the ns a launch adds while the client is asked for
//! completion marks every millisecond: what tandemd's capture (`tandemctl
//! trace`, `[trace] mark_every_ns`) asks of an inference client, the only
//! launch-path cost capture has (tandemd keeps its window on its own side).
//! Last, the SM reservation's cost (issue 23: at most 50 ns over today's
//! attached training launch): the coordinator makes the client a training
//! client under tandem over MPS on a GPU board it holds a request open on,
//! and switches the reservation and inference's activity between rounds;
//! each round times the fake's own launch beside the shim's, so the fake's
//! work for a launch callback (once the shim subscribed, every launch of the
//! process runs it) is on both sides.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::Criterion;
use support::{Coordinator, Mode, Training};
use tandem_e2e::inproc::{CounterFn, InProcess, LaunchFn};
use tandem_proto::inflight::Budgets;
use tandem_proto::spatial::{Spatial, SpatialState};

struct Setup {
    p: InProcess,
    fake: LaunchFn,
    shim: LaunchFn,
    client_id: CounterFn,
    pushed: CounterFn,
    dropped: CounterFn,
}

impl Setup {
    fn new(socket: &Path) -> Setup {
        // The shim's first hooked call (in load) registers with the coordinator.
        let p = InProcess::load(socket);
        // SAFETY: the cuda.h / tandem.h signatures of the symbols named.
        unsafe {
            Setup {
                fake: p.fake_sym("cuLaunchKernel"),
                shim: p.shim_sym("cuLaunchKernel"),
                client_id: p.shim_sym("tandem_client_id"),
                pushed: p.shim_sym("tandem_records_pushed"),
                dropped: p.shim_sym("tandem_records_dropped"),
                p,
            }
        }
    }

    #[inline(always)]
    fn launch(&mut self, f: LaunchFn) {
        self.p.launch(f);
    }

    fn sync(&self) {
        self.p.sync();
    }

    fn client_id(&self) -> u64 {
        // SAFETY: tandem_client_id(void).
        unsafe { (self.client_id)() }
    }
}

/// Median ns per launch over interleaved rounds: (fake, shim).
fn interleaved(s: &mut Setup) -> (f64, f64, f64, f64, f64, f64) {
    const N: u32 = 200_000;
    const ROUNDS: usize = 7;
    let (fake, shim) = (s.fake, s.shim);
    let mut f_ns = Vec::with_capacity(ROUNDS);
    let mut s_ns = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        for (l, out) in [(fake, &mut f_ns), (shim, &mut s_ns)] {
            let t = Instant::now();
            for _ in 0..N {
                s.launch(l);
            }
            out.push(t.elapsed().as_nanos() as f64 / f64::from(N));
            s.sync();
            // Let the coordinator drain (no drops from a full ring).
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    f_ns.sort_by(f64::total_cmp);
    s_ns.sort_by(f64::total_cmp);
    (
        f_ns[ROUNDS / 2],
        s_ns[ROUNDS / 2],
        f_ns[0],
        f_ns[ROUNDS - 1],
        s_ns[0],
        s_ns[ROUNDS - 1],
    )
}

fn print(label: &str, r: (f64, f64, f64, f64, f64, f64)) {
    println!(
        "  {label:<26} fake {:8.1} ns  shim {:8.1} ns  added {:+8.1} ns  \
         (fake spread {:.1}-{:.1}, shim spread {:.1}-{:.1})",
        r.0,
        r.1,
        r.1 - r.0,
        r.2,
        r.3,
        r.4,
        r.5
    );
}

/// Median ns per launch through the shim over interleaved rounds with marks
/// off and every `every_ns`: (off, on, off's spread, on's spread).
fn marks_on_off(
    s: &mut Setup,
    coord: &Coordinator,
    every_ns: u64,
) -> (f64, f64, (f64, f64), (f64, f64)) {
    const N: u32 = 200_000;
    const ROUNDS: usize = 7;
    let shim = s.shim;
    let (mut off, mut on) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for _ in 0..ROUNDS {
        for (ns, out) in [(0, &mut off), (every_ns, &mut on)] {
            coord.set_live_mark_every_ns(ns);
            // The coordinator stores it at its next pass (every millisecond).
            std::thread::sleep(Duration::from_millis(20));
            let t = Instant::now();
            for _ in 0..N {
                s.launch(shim);
            }
            out.push(t.elapsed().as_nanos() as f64 / f64::from(N));
            s.sync();
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    coord.set_live_mark_every_ns(0);
    off.sort_by(f64::total_cmp);
    on.sort_by(f64::total_cmp);
    (
        off[ROUNDS / 2],
        on[ROUNDS / 2],
        (off[0], off[ROUNDS - 1]),
        (on[0], on[ROUNDS - 1]),
    )
}

/// The local bound tandemd gives a training client that joined MPS below
/// normal priority (`[mps] training_inflight_ns`, 2 ms, idle and active;
/// `[scheduler] request_hold_ns`), with a 1 ns default charge so that the
/// bench's 0 ns kernels never wait at it.
const MPS_TRAINING: Budgets = Budgets {
    idle_ns: 2_000_000,
    active_ns: 2_000_000,
    default_est_ns: 1,
    hold_ns: 1_000_000,
};

/// A training client under tandem over MPS as tandemd makes it, asked for
/// `reserve_permille` of the SM reservation, inference active or not.
const fn training(reserve_permille: u64, inference_active: bool) -> Training {
    Training {
        budgets: MPS_TRAINING,
        // 1 ns: every launch (the default estimate is 1 ns) takes the block
        // time's check, as one under the default 100 us would.
        spatial: Spatial {
            reserve_permille,
            min_ns: 1,
            standing_ns: 0,
        },
        inference_active,
    }
}

/// The SM reservation's states, measured as training clients under tandem
/// over MPS (with completion marks every 500 us, as the scheduler asks):
/// today's attached training launch (no reservation asked), one carrying
/// the mask (asked, inference active: every launch masked, the driver's
/// callback writing it), one asked while inference is idle.
const SPATIAL_STATES: [(&str, Training); 3] = [
    ("training, no reservation", training(0, true)),
    ("training, masked (active)", training(250, true)),
    ("training, armed, idle", training(250, false)),
];

/// Median added ns per launch (shim - fake, launched side by side) in each
/// of [`SPATIAL_STATES`], over interleaved rounds; and the launches the
/// client says it masked.
fn spatial_states(s: &mut Setup, coord: &Coordinator) -> ([(f64, f64, f64); 3], u64) {
    const N: u32 = 200_000;
    const ROUNDS: usize = 7;
    let (fake, shim) = (s.fake, s.shim);
    let mut added: [Vec<f64>; 3] = Default::default();
    coord.set_live_mark_every_ns(500_000);
    for _ in 0..ROUNDS {
        for (i, (_, t)) in SPATIAL_STATES.iter().enumerate() {
            coord.set_live_training(*t);
            // Stored at the coordinator's next pass; the board's slot seen
            // by the shim at its next launch.
            std::thread::sleep(Duration::from_millis(20));
            s.launch(shim);
            let mut ns = [0.0; 2];
            for (l, out) in [fake, shim].into_iter().zip(ns.iter_mut()) {
                let t = Instant::now();
                for _ in 0..N {
                    s.launch(l);
                }
                *out = t.elapsed().as_nanos() as f64 / f64::from(N);
                s.sync();
                std::thread::sleep(Duration::from_millis(5));
            }
            added[i].push(ns[1] - ns[0]);
        }
    }
    // (median, lowest, highest)
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[ROUNDS / 2], v[0], v[ROUNDS - 1])
    };
    let c = coord.clients();
    let view = c.last().expect("the bench's client");
    assert_eq!(
        SpatialState::decode(view.spatial_state),
        SpatialState::Armed,
        "the shim armed the reservation on the fake driver"
    );
    (
        [
            median(&mut added[0]),
            median(&mut added[1]),
            median(&mut added[2]),
        ],
        view.masked_launches,
    )
}

fn main() {
    let path = support::socket_path("bench");
    let coord = Coordinator::start_with(&path, Mode::Welcome, 1 << 16, false);
    let mut s = Setup::new(&path);
    assert_ne!(
        s.client_id(),
        0,
        "the shim registered with the bench coordinator"
    );
    let real_run = std::env::args().any(|a| a == "--bench");
    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group("launch_client");
        let (fake, shim) = (s.fake, s.shim);
        g.bench_function("cuLaunchKernel/fake", |b| b.iter(|| s.launch(fake)));
        s.sync();
        g.bench_function("cuLaunchKernel/shim+coordinator", |b| {
            b.iter(|| s.launch(shim))
        });
        s.sync();
        g.finish();
    }
    let with = real_run.then(|| interleaved(&mut s));
    let marks = real_run.then(|| marks_on_off(&mut s, &coord, 1_000_000));
    // Last with the coordinator: it makes the client training for good.
    let spatial = real_run.then(|| spatial_states(&mut s, &coord));
    // SAFETY: tandem_records_pushed/dropped(void).
    let (pushed, dropped) = unsafe { ((s.pushed)(), (s.dropped)()) };
    // The coordinator goes away: the watcher unpublishes the session.
    drop(coord);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.client_id() != 0 {
        assert!(
            Instant::now() < deadline,
            "the shim did not notice the hang-up"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    {
        let mut g = c.benchmark_group("launch_client");
        let shim = s.shim;
        g.bench_function("cuLaunchKernel/shim-no-coordinator", |b| {
            b.iter(|| s.launch(shim))
        });
        s.sync();
        g.finish();
    }
    if let Some(with) = with {
        let without = interleaved(&mut s);
        println!(
            "\nadded ns per cuLaunchKernel (shim - fake), median of 7 interleaved rounds of 200000:"
        );
        print("with a coordinator", with);
        print("coordinator gone (no session)", without);
        println!("  records pushed {pushed}, dropped {dropped}");
    }
    if let Some((off, on, off_spread, on_spread)) = marks {
        println!(
            "\nshim with a coordinator, marks off vs every 1 ms (capture on for an inference client), median of 7 interleaved rounds of 200000:\n  marks off {off:8.1} ns  marks every 1 ms {on:8.1} ns  added {:+8.1} ns  (off spread {:.1}-{:.1}, on spread {:.1}-{:.1})",
            on - off,
            off_spread.0,
            off_spread.1,
            on_spread.0,
            on_spread.1
        );
    }
    if let Some((added, masked)) = spatial {
        println!(
            "\nthe SM reservation: added ns per cuLaunchKernel (shim - fake, side by side), median of 7 interleaved rounds of 200000:"
        );
        for ((label, _), (a, lo, hi)) in SPATIAL_STATES.iter().zip(added) {
            println!(
                "  {label:<26} added {a:+8.1} ns  ({:+.1} ns over no reservation; spread {lo:+.1} to {hi:+.1})",
                a - added[0].0
            );
        }
        println!("  launches the shim masked: {masked}");
    }
    c.final_summary();
}
