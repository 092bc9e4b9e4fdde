//! ns per cuLaunchKernel of a 0 ns noop kernel through the shim, with a
//! coordinator attached (the shim pushes a ring record and checks the gate on
//! every launch) and detached (no session: the fail-open path), in one process.
//!
//! The fake driver and the shim are dlopen'ed as in `benches/launch.rs`. A
//! tandemd runs on a private socket; "detached" is reached by killing it (the
//! shim's watcher unpublishes the session) and "attached" by starting a new
//! one (the shim rejoins within ~1 s), each confirmed through the shim's
//! `tandem_client_id()`. After the criterion groups, interleaved rounds print
//! the added ns per launch, attached minus detached, and the records the shim
//! dropped while attached (report only; nothing is asserted).

use std::time::{Duration, Instant};

use criterion::Criterion;
use tandem_e2e::coord::{poll, Tandemd, TestDir};
use tandem_e2e::inproc::{CounterFn, InProcess, LaunchFn};

struct Setup {
    dir: TestDir,
    daemon: Option<Tandemd>,
    p: InProcess,
    launch: LaunchFn,
    client_id: CounterFn,
    dropped: CounterFn,
}

impl Setup {
    fn new() -> Self {
        let dir = TestDir::new("bench");
        let daemon = Tandemd::start(&dir);
        // The shim's first hooked call (in load) connects to the coordinator.
        let p = InProcess::load(&dir.socket());
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
            daemon: Some(daemon),
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

    fn attach(&mut self) {
        if self.daemon.is_none() {
            self.daemon = Some(Tandemd::start(&self.dir));
        }
        self.wait_id(true);
    }

    fn detach(&mut self) {
        if let Some(mut d) = self.daemon.take() {
            d.kill9();
        }
        self.wait_id(false);
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
    s.attach();
    g.bench_function("cuLaunchKernel/attached", |b| b.iter(|| s.launch_one()));
    s.sync();
    s.detach();
    g.bench_function("cuLaunchKernel/detached", |b| b.iter(|| s.launch_one()));
    s.sync();
    g.finish();
}

/// Median ns per launch over interleaved rounds, attached vs detached.
fn report(s: &mut Setup) {
    const N: u32 = 1_000_000;
    const ROUNDS: usize = 7;
    let mut att = Vec::with_capacity(ROUNDS);
    let mut det = Vec::with_capacity(ROUNDS);
    let mut dropped = 0;
    for _ in 0..ROUNDS {
        for attached in [true, false] {
            if attached {
                s.attach();
            } else {
                s.detach();
            }
            let d0 = s.dropped();
            let t = Instant::now();
            for _ in 0..N {
                s.launch_one();
            }
            let ns = t.elapsed().as_nanos() as f64 / f64::from(N);
            if attached {
                dropped += s.dropped() - d0;
                att.push(ns);
            } else {
                det.push(ns);
            }
            s.sync();
        }
    }
    att.sort_by(f64::total_cmp);
    det.sort_by(f64::total_cmp);
    let (am, dm) = (att[ROUNDS / 2], det[ROUNDS / 2]);
    println!(
        "\ncuLaunchKernel through the shim, median of {ROUNDS} interleaved rounds of {N}:\n  \
         detached {dm:7.1} ns ({:.1}-{:.1})\n  attached {am:7.1} ns ({:.1}-{:.1})\n  \
         added by the coordinator session {:+.1} ns per launch; records dropped while \
         attached: {dropped} of {} ({:.2}%)",
        det[0],
        det[ROUNDS - 1],
        att[0],
        att[ROUNDS - 1],
        am - dm,
        u64::from(N) * ROUNDS as u64,
        dropped as f64 * 100.0 / (f64::from(N) * ROUNDS as f64)
    );
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
    if let Some(mut d) = setup.daemon.take() {
        d.kill9();
    }
}
