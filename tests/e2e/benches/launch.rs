//! ns per kernel launch of a 0 ns noop kernel on the fake driver, called
//! (a) directly and (b) through the shim's exported hook, in one process.
//!
//! The fake is dlopen'ed first by absolute path (RTLD_LOCAL), so the shim's
//! own dlopen("libcuda.so.1") finds that object by its SONAME; the shim is then
//! dlopen'ed RTLD_LOCAL and its cuLaunchKernel / cuLaunchKernel_ptsz /
//! cuLaunchKernelEx are looked up with dlsym on its handle. After the
//! criterion groups, a short interleaved measurement prints the added ns per
//! launch for each entry point (report only; nothing is asserted).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use criterion::Criterion;

type CUresult = c_int;
type Ptr = *mut c_void;

type InitFn = unsafe extern "C" fn(c_uint) -> CUresult;
type DeviceGetFn = unsafe extern "C" fn(*mut c_int, c_int) -> CUresult;
type RetainFn = unsafe extern "C" fn(*mut Ptr, c_int) -> CUresult;
type SetCurrentFn = unsafe extern "C" fn(Ptr) -> CUresult;
type ModuleLoadDataFn = unsafe extern "C" fn(*mut Ptr, *const c_void) -> CUresult;
type GetFunctionFn = unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> CUresult;
type StreamCreateFn = unsafe extern "C" fn(*mut Ptr, c_uint) -> CUresult;
type StreamSyncFn = unsafe extern "C" fn(Ptr) -> CUresult;
type LaunchFn = unsafe extern "C" fn(
    Ptr,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    Ptr,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;
type LaunchExFn =
    unsafe extern "C" fn(*const LaunchConfig, Ptr, *mut *mut c_void, *mut *mut c_void) -> CUresult;

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

const MODULE: &CStr = c"tandem-fake-module v1\nkernel noop 0 noop\n";

fn dlopen(path: &Path) -> Ptr {
    let c = CString::new(path.to_str().expect("utf-8 path")).expect("no NUL in path");
    // SAFETY: dlopen with a valid NUL-terminated path; loading the shim or the
    // fake driver runs only their (trivial) constructors.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a valid C string owned by libc.
        let err = unsafe { libc::dlerror() };
        let msg = if err.is_null() {
            "?".into()
        } else {
            // SAFETY: non-NULL dlerror result is a NUL-terminated string.
            unsafe { CStr::from_ptr(err) }.to_string_lossy()
        };
        panic!("dlopen {}: {msg}", path.display());
    }
    h
}

/// Looks `name` up in `h` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the C function pointer type of the symbol `name`.
unsafe fn sym<F: Copy>(h: Ptr, name: &str) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<Ptr>());
    let c = CString::new(name).expect("no NUL in name");
    // SAFETY: h is a live handle from dlopen, c a valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "symbol {name} not found");
    // SAFETY: p is a non-NULL function address and the caller guarantees F is
    // its function pointer type (same size checked above).
    unsafe { std::mem::transmute_copy::<Ptr, F>(&p) }
}

#[track_caller]
fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, 0, "{what} returned {rc}");
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
    func: Ptr,
    stream: Ptr,
    sync: StreamSyncFn,
    params: [*mut c_void; 3],
    entries: Vec<Entry>,
}

impl Setup {
    fn new() -> Box<Self> {
        let a = tandem_e2e::artifacts();
        // The shim looks for the real driver by SONAME; name the already
        // loaded file explicitly too, in case the lookup by SONAME misses.
        std::env::set_var("TANDEM_REAL_LIBCUDA", &a.fake);
        std::env::set_var("TANDEM_SOCKET", "/nonexistent/tandem-bench/tandemd.sock");
        let fake = dlopen(&a.fake);
        let shim = dlopen(&a.shim);
        // SAFETY: each type below is the cuda.h signature of the symbol named.
        unsafe {
            let init: InitFn = sym(fake, "cuInit");
            let dev_get: DeviceGetFn = sym(fake, "cuDeviceGet");
            let retain: RetainFn = sym(fake, "cuDevicePrimaryCtxRetain");
            let set_current: SetCurrentFn = sym(fake, "cuCtxSetCurrent");
            let load: ModuleLoadDataFn = sym(fake, "cuModuleLoadData");
            let get_fn: GetFunctionFn = sym(fake, "cuModuleGetFunction");
            let stream_create: StreamCreateFn = sym(fake, "cuStreamCreate");
            let sync: StreamSyncFn = sym(fake, "cuStreamSynchronize");
            let shim_init: InitFn = sym(shim, "cuInit");
            ok(init(0), "cuInit");
            ok(shim_init(0), "shim cuInit");
            let mut dev = 0;
            ok(dev_get(&mut dev, 0), "cuDeviceGet");
            let mut ctx: Ptr = std::ptr::null_mut();
            ok(retain(&mut ctx, dev), "cuDevicePrimaryCtxRetain");
            ok(set_current(ctx), "cuCtxSetCurrent");
            let mut module: Ptr = std::ptr::null_mut();
            ok(
                load(&mut module, MODULE.as_ptr().cast()),
                "cuModuleLoadData",
            );
            let mut func: Ptr = std::ptr::null_mut();
            ok(
                get_fn(&mut func, module, c"noop".as_ptr()),
                "cuModuleGetFunction",
            );
            let mut stream: Ptr = std::ptr::null_mut();
            ok(stream_create(&mut stream, 0), "cuStreamCreate");
            let mut entries = Vec::new();
            for name in ["cuLaunchKernel", "cuLaunchKernel_ptsz"] {
                let f: LaunchFn = sym(fake, name);
                let s: LaunchFn = sym(shim, name);
                assert_ne!(f as usize, s as usize, "{name}: shim handed back the fake");
                entries.push(Entry {
                    name,
                    fake: Launcher::Launch(f),
                    shim: Launcher::Launch(s),
                });
            }
            let f: LaunchExFn = sym(fake, "cuLaunchKernelEx");
            let s: LaunchExFn = sym(shim, "cuLaunchKernelEx");
            assert_ne!(
                f as usize, s as usize,
                "cuLaunchKernelEx: shim handed back the fake"
            );
            entries.push(Entry {
                name: "cuLaunchKernelEx",
                fake: Launcher::Ex(f),
                shim: Launcher::Ex(s),
            });
            let mut setup = Box::new(Setup {
                func,
                stream,
                sync,
                params: [std::ptr::null_mut(); 3],
                entries,
            });
            setup.params_init();
            setup
        }
    }

    fn params_init(&mut self) {
        static ARGS: (u64, u32, u32) = (0, 0, 0);
        self.params = [
            std::ptr::addr_of!(ARGS.0) as *mut c_void,
            std::ptr::addr_of!(ARGS.1) as *mut c_void,
            std::ptr::addr_of!(ARGS.2) as *mut c_void,
        ];
    }

    #[inline(always)]
    fn launch(&mut self, l: Launcher) {
        let rc = match l {
            // SAFETY: f is the driver's (or the shim's) cuLaunchKernel[_ptsz];
            // func/stream are live handles and params points at three valid
            // arguments that outlive the call.
            Launcher::Launch(f) => unsafe {
                f(
                    self.func,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    self.stream,
                    self.params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            Launcher::Ex(f) => {
                let cfg = LaunchConfig {
                    grid: [1, 1, 1],
                    block: [1, 1, 1],
                    shared_mem_bytes: 0,
                    stream: self.stream,
                    attrs: std::ptr::null_mut(),
                    num_attrs: 0,
                };
                // SAFETY: as above, with a valid CUlaunchConfig and no attributes.
                unsafe {
                    f(
                        &cfg,
                        self.func,
                        self.params.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                }
            }
        };
        if rc != 0 {
            panic!("launch returned {rc}");
        }
        black_box(rc);
    }

    fn sync(&self) {
        // SAFETY: cuStreamSynchronize of the fake on a live stream.
        ok(unsafe { (self.sync)(self.stream) }, "cuStreamSynchronize");
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
