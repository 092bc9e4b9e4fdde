//! ns per cuLaunchKernel of a 0 ns noop kernel through the shim, with a
//! coordinator attached (the shim pushes a ring record and checks the gate on
//! every launch) and detached (no session: the fail-open path), in one process.
//! The job runs as `TANDEM_CLASS=training` on a GPU with no inference job (its
//! gate stays open, its allowance unlimited), attached twice: with completion
//! marks off (`mark_every_ns = 0`) and on (the default, 500 us: an event
//! recorded after a launch at most that often, polled by the watcher).
//!
//! The fake driver and the shim are dlopen'ed as in `benches/launch.rs`. A
//! tandemd runs on a private socket; "detached" is reached by killing it (the
//! shim's watcher unpublishes the session) and "attached" by starting a new
//! one (the shim rejoins within ~1 s), each confirmed through the shim's
//! `tandem_client_id()`. After the criterion groups, interleaved rounds print
//! the added ns per launch, attached minus detached (marks off and on), and
//! the records the shim dropped while attached (report only; nothing is
//! asserted).

use std::time::{Duration, Instant};

use criterion::Criterion;
use tandem_e2e::coord::{default_config, poll, without_marks, Tandemd, TestDir};
use tandem_e2e::inproc::{CounterFn, InProcess, LaunchFn};

/// Where the shim stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Detached,
    /// Attached, with completion marks on or off.
    Attached {
        marks: bool,
    },
}

/// The default configuration, with completion marks on or off.
fn config(marks: bool) -> String {
    let d = default_config();
    if marks {
        d.to_string()
    } else {
        without_marks(d)
    }
}

struct Setup {
    dir: TestDir,
    daemon: Option<(Tandemd, bool)>,
    p: InProcess,
    launch: LaunchFn,
    client_id: CounterFn,
    dropped: CounterFn,
}

impl Setup {
    fn new() -> Self {
        let dir = TestDir::new("bench");
        let daemon = Tandemd::start_with_config(&dir, &config(false));
        // The shim's first hooked call (in load) connects to the coordinator.
        let p = InProcess::load_as(&dir.socket(), Some("training"));
        // SAFETY: the cuda.h / tandem.h signatures of the symbols named.
        let (launch, client_id, dropped) = unsafe {
            (
                p.shim_sym("cuLaunchKernel"),
                p.shim_sym("tandem_client_id"),
                p.shim_sym("tandem_records_dropped"),
            )
        };
        let mut s = Setup {
            dir,
            daemon: Some((daemon, false)),
            p,
            launch,
            client_id,
            dropped,
        };
        s.wait_id(true);
        s
    }

    fn id(&self) -> u64 {
        // SAFETY: tandem_client_id takes no arguments and only loads an atomic.
        unsafe { (self.client_id)() }
    }

    fn dropped(&self) -> u64 {
        // SAFETY: as above.
        unsafe { (self.dropped)() }
    }

    /// Waits until the shim is (attached) or is not (detached) registered.
    fn wait_id(&mut self, attached: bool) {
        // One launch now and then: the shim may rejoin lazily.
        poll(Duration::from_secs(30), "the shim's session state", || {
            self.launch_one();
            if (self.id() != 0) == attached {
                Ok(())
            } else {
                Err(format!("tandem_client_id() = {}", self.id()))
            }
        });
    }

    fn to(&mut self, state: State) {
        let want = match state {
            State::Detached => None,
            State::Attached { marks } => Some(marks),
        };
        if self.daemon.as_ref().map(|(_, m)| *m) == want {
            return;
        }
        if let Some((mut d, _)) = self.daemon.take() {
            d.kill9();
            self.wait_id(false);
        }
        if let Some(marks) = want {
            self.daemon = Some((Tandemd::start_with_config(&self.dir, &config(marks)), marks));
            self.wait_id(true);
        }
    }

    #[inline(always)]
    fn launch_one(&mut self) {
        let launch = self.launch;
        self.p.launch(launch);
    }

    fn sync(&self) {
        self.p.sync();
    }
}

fn bench(c: &mut Criterion, s: &mut Setup) {
    let mut g = c.benchmark_group("coordinator");
    for (name, state) in [
        ("attached", State::Attached { marks: false }),
        ("attached_marks", State::Attached { marks: true }),
        ("detached", State::Detached),
    ] {
        s.to(state);
        g.bench_function(format!("cuLaunchKernel/{name}"), |b| {
            b.iter(|| s.launch_one())
        });
        s.sync();
    }
    g.finish();
}

/// Median ns per launch over interleaved rounds: detached, attached with
/// marks off, attached with marks on.
fn report(s: &mut Setup) {
    const N: u32 = 1_000_000;
    const ROUNDS: usize = 7;
    let states = [
        State::Detached,
        State::Attached { marks: false },
        State::Attached { marks: true },
    ];
    let mut ns: [Vec<f64>; 3] = Default::default();
    let mut dropped = [0u64; 3];
    for _ in 0..ROUNDS {
        for (i, &state) in states.iter().enumerate() {
            s.to(state);
            let d0 = s.dropped();
            let t = Instant::now();
            for _ in 0..N {
                s.launch_one();
            }
            ns[i].push(t.elapsed().as_nanos() as f64 / f64::from(N));
            dropped[i] += s.dropped() - d0;
            s.sync();
        }
    }
    for v in &mut ns {
        v.sort_by(f64::total_cmp);
    }
    let med = |i: usize| ns[i][ROUNDS / 2];
    let total = u64::from(N) * ROUNDS as u64;
    println!(
        "\ncuLaunchKernel through the shim as a training job, median of {ROUNDS} interleaved \
         rounds of {N}:"
    );
    for (i, name) in ["detached", "attached, marks off", "attached, marks on"]
        .iter()
        .enumerate()
    {
        println!(
            "  {name:20} {:7.1} ns ({:.1}-{:.1}), {:+.1} ns over detached; records dropped {} of \
             {total} ({:.2}%)",
            med(i),
            ns[i][0],
            ns[i][ROUNDS - 1],
            med(i) - med(0),
            dropped[i],
            dropped[i] as f64 * 100.0 / total as f64
        );
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let mut setup = Setup::new();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &mut setup);
    // Only when benchmarking for real (`cargo bench`), not under `cargo test --benches`.
    if benching {
        report(&mut setup);
    }
    c.final_summary();
    if let Some((mut d, _)) = setup.daemon.take() {
        d.kill9();
    }
}
