//! ns per kernel launch of a 0 ns noop kernel on the fake driver, called
//! (a) directly and (b) through the shim's exported hook, in one process.
//!
//! The fake is dlopen'ed first by absolute path (RTLD_LOCAL), so the shim's
//! own dlopen("libcuda.so.1") finds that object by its SONAME; the shim is then
//! dlopen'ed RTLD_LOCAL and its cuLaunchKernel / cuLaunchKernel_ptsz /
//! cuLaunchKernelEx are looked up with dlsym on its handle. After the
//! criterion groups, a short interleaved measurement prints the added ns per
//! launch for each entry point (report only; nothing is asserted).

use std::ffi::{c_uint, c_void};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::Criterion;
use tandem_e2e::inproc::{InProcess, LaunchFn, Ptr};

type LaunchExFn = unsafe extern "C" fn(
    *const LaunchConfig,
    Ptr,
    *mut *mut c_void,
    *mut *mut c_void,
) -> tandem_e2e::inproc::CUresult;

/// CUlaunchConfig.
#[repr(C)]
struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Ptr,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

struct Entry {
    name: &'static str,
    fake: Launcher,
    shim: Launcher,
}

#[derive(Clone, Copy)]
enum Launcher {
    Launch(LaunchFn),
    Ex(LaunchExFn),
}

struct Setup {
    p: InProcess,
    entries: Vec<Entry>,
}

impl Setup {
    fn new() -> Self {
        // No coordinator: the shim fails open and only counts.
        let p = InProcess::load(Path::new("/nonexistent/tandem-bench/tandemd.sock"));
        let mut entries = Vec::new();
        // SAFETY: each type below is the cuda.h signature of the symbol named.
        unsafe {
            for name in ["cuLaunchKernel", "cuLaunchKernel_ptsz"] {
                let f: LaunchFn = p.fake_sym(name);
                let s: LaunchFn = p.shim_sym(name);
                assert_ne!(f as usize, s as usize, "{name}: shim handed back the fake");
                entries.push(Entry {
                    name,
                    fake: Launcher::Launch(f),
                    shim: Launcher::Launch(s),
                });
            }
            let f: LaunchExFn = p.fake_sym("cuLaunchKernelEx");
            let s: LaunchExFn = p.shim_sym("cuLaunchKernelEx");
            assert_ne!(
                f as usize, s as usize,
                "cuLaunchKernelEx: shim handed back the fake"
            );
            entries.push(Entry {
                name: "cuLaunchKernelEx",
                fake: Launcher::Ex(f),
                shim: Launcher::Ex(s),
            });
        }
        Setup { p, entries }
    }

    #[inline(always)]
    fn launch(&mut self, l: Launcher) {
        match l {
            Launcher::Launch(f) => self.p.launch(f),
            Launcher::Ex(f) => {
                let cfg = LaunchConfig {
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_mem_bytes: 0,
                    stream: self.p.stream,
                    attrs: std::ptr::null_mut(),
                    num_attrs: 0,
                };
                let params = self.p.params();
                // SAFETY: f is the driver's (or the shim's) cuLaunchKernelEx; a
                // valid CUlaunchConfig with no attributes, a live function and
                // parameters that outlive the call.
                let rc = unsafe { f(&cfg, self.p.func, params, std::ptr::null_mut()) };
                tandem_e2e::inproc::ok(rc, "cuLaunchKernelEx");
                black_box(rc);
            }
        }
    }

    fn sync(&self) {
        self.p.sync();
    }
}

fn bench(c: &mut Criterion, s: &mut Setup) {
    let mut g = c.benchmark_group("launch");
    for i in 0..s.entries.len() {
        let (name, fake, shim) = (s.entries[i].name, s.entries[i].fake, s.entries[i].shim);
        g.bench_function(format!("{name}/fake"), |b| b.iter(|| s.launch(fake)));
        s.sync();
        g.bench_function(format!("{name}/shim"), |b| b.iter(|| s.launch(shim)));
        s.sync();
    }
    g.finish();
}

/// Median ns per launch over interleaved rounds, fake vs shim.
fn report(s: &mut Setup) {
    const N: u32 = 200_000;
    const ROUNDS: usize = 7;
    println!("\nadded ns per launch (shim - fake), median of {ROUNDS} interleaved rounds of {N}:");
    for i in 0..s.entries.len() {
        let (name, fake, shim) = (s.entries[i].name, s.entries[i].fake, s.entries[i].shim);
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
            }
        }
        f_ns.sort_by(f64::total_cmp);
        s_ns.sort_by(f64::total_cmp);
        let (fm, sm) = (f_ns[ROUNDS / 2], s_ns[ROUNDS / 2]);
        println!(
            "  {name:<22} fake {fm:8.1} ns  shim {sm:8.1} ns  added {:+8.1} ns  \
             (fake spread {:.1}-{:.1}, shim spread {:.1}-{:.1})",
            sm - fm,
            f_ns[0],
            f_ns[ROUNDS - 1],
            s_ns[0],
            s_ns[ROUNDS - 1]
        );
    }
}

fn main() {
    let mut setup = Setup::new();
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c, &mut setup);
    // Only when benchmarking for real (`cargo bench`), not under `cargo test --benches`.
    if std::env::args().any(|a| a == "--bench") {
        report(&mut setup);
    }
    c.final_summary();
}
