//! ns per cuLaunchKernel of a 0 ns noop kernel on the fake driver, called
//! directly and through libtandem.so's hook, (a) with an in-process coordinator
//! attached (every launch: gate load + one ring record) and (b) after that
//! coordinator is gone (no session: the shim's fail-open path).
//!
//! Setup as tests/e2e/benches/launch.rs: the fake is dlopen'ed first, then the
//! shim (RTLD_LOCAL); TANDEM_SOCKET points at the in-process coordinator of
//! `tests/support` (64 Ki-record ring, drained every millisecond, records
//! counted, not kept). After the criterion groups, an interleaved measurement
//! prints the added ns per launch in both states (report only).

#[path = "../tests/support/mod.rs"]
mod support;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::Criterion;
use support::{Coordinator, Mode};

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
type U64Fn = unsafe extern "C" fn() -> u64;
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

const MODULE: &CStr = c"tandem-fake-module v1\nkernel noop 0 noop\n";

fn dlopen(path: &Path) -> Ptr {
    let c = CString::new(path.to_str().expect("utf-8 path")).expect("no NUL");
    // SAFETY: dlopen with a valid path; the libraries' constructors are trivial.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {}", path.display());
    h
}

/// # Safety
/// `F` must be the C function pointer type of `name`.
unsafe fn sym<F: Copy>(h: Ptr, name: &str) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<Ptr>());
    let c = CString::new(name).expect("no NUL");
    // SAFETY: live handle, valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "symbol {name} not found");
    // SAFETY: non-null function address of type F (caller).
    unsafe { std::mem::transmute_copy::<Ptr, F>(&p) }
}

#[track_caller]
fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, 0, "{what} returned {rc}");
}

struct Setup {
    func: Ptr,
    stream: Ptr,
    sync: StreamSyncFn,
    params: [*mut c_void; 3],
    fake: LaunchFn,
    shim: LaunchFn,
    client_id: U64Fn,
    pushed: U64Fn,
    dropped: U64Fn,
}

static ARGS: (u64, u32, u32) = (0, 0, 0);

impl Setup {
    fn new(socket: &Path) -> Setup {
        let a = tandem_e2e::artifacts();
        std::env::set_var("TANDEM_REAL_LIBCUDA", &a.fake);
        std::env::set_var("TANDEM_SOCKET", socket);
        std::env::remove_var("TANDEM_CLASS");
        let fake = dlopen(&a.fake);
        let shim = dlopen(&a.shim);
        // SAFETY: each type is the cuda.h (or tandem.h) signature of the symbol.
        unsafe {
            let init: InitFn = sym(fake, "cuInit");
            let dev_get: DeviceGetFn = sym(fake, "cuDeviceGet");
            let retain: RetainFn = sym(fake, "cuDevicePrimaryCtxRetain");
            let set_current: SetCurrentFn = sym(fake, "cuCtxSetCurrent");
            let load: ModuleLoadDataFn = sym(fake, "cuModuleLoadData");
            let get_fn: GetFunctionFn = sym(fake, "cuModuleGetFunction");
            let stream_create: StreamCreateFn = sym(fake, "cuStreamCreate");
            let shim_init: InitFn = sym(shim, "cuInit");
            ok(init(0), "cuInit");
            // The shim's first hooked call: registers with the coordinator.
            ok(shim_init(0), "shim cuInit");
            let mut dev = 0;
            ok(dev_get(&mut dev, 0), "cuDeviceGet");
            let mut ctx: Ptr = std::ptr::null_mut();
            ok(retain(&mut ctx, dev), "retain");
            ok(set_current(ctx), "set current");
            let mut module: Ptr = std::ptr::null_mut();
            ok(load(&mut module, MODULE.as_ptr().cast()), "load");
            let mut func: Ptr = std::ptr::null_mut();
            ok(get_fn(&mut func, module, c"noop".as_ptr()), "get function");
            let mut stream: Ptr = std::ptr::null_mut();
            ok(stream_create(&mut stream, 0), "stream");
            Setup {
                func,
                stream,
                sync: sym(fake, "cuStreamSynchronize"),
                params: [
                    std::ptr::addr_of!(ARGS.0) as *mut c_void,
                    std::ptr::addr_of!(ARGS.1) as *mut c_void,
                    std::ptr::addr_of!(ARGS.2) as *mut c_void,
                ],
                fake: sym(fake, "cuLaunchKernel"),
                shim: sym(shim, "cuLaunchKernel"),
                client_id: sym(shim, "tandem_client_id"),
                pushed: sym(shim, "tandem_records_pushed"),
                dropped: sym(shim, "tandem_records_dropped"),
            }
        }
    }

    #[inline(always)]
    fn launch(&mut self, f: LaunchFn) {
        // SAFETY: the fake's or the shim's cuLaunchKernel; live handles; params
        // point at three valid arguments that outlive the call.
        let rc = unsafe {
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
        };
        assert_eq!(rc, 0, "launch");
        black_box(rc);
    }

    fn sync(&self) {
        // SAFETY: the fake's cuStreamSynchronize on a live stream.
        ok(unsafe { (self.sync)(self.stream) }, "sync");
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
    c.final_summary();
}
