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

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::Criterion;
use tandem_e2e::coord::{poll, Tandemd, TestDir};

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
type CounterFn = unsafe extern "C" fn() -> u64;
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
    let c = CString::new(path.to_str().expect("utf-8 path")).expect("no NUL in path");
    // SAFETY: dlopen with a valid NUL-terminated path; loading the shim or the
    // fake driver runs only their (trivial) constructors.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen {} failed", path.display());
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

struct Setup {
    dir: TestDir,
    daemon: Option<Tandemd>,
    func: Ptr,
    stream: Ptr,
    sync: StreamSyncFn,
    launch: LaunchFn,
    client_id: CounterFn,
    dropped: CounterFn,
    params: [*mut c_void; 3],
}

impl Setup {
    fn new() -> Box<Self> {
        let a = tandem_e2e::artifacts();
        let dir = TestDir::new("bench");
        let daemon = Tandemd::start(&dir);
        std::env::set_var("TANDEM_REAL_LIBCUDA", &a.fake);
        std::env::set_var("TANDEM_SOCKET", dir.socket());
        std::env::remove_var("TANDEM_CLASS");
        let fake = dlopen(&a.fake);
        let shim = dlopen(&a.shim);
        // SAFETY: each type below is the cuda.h (or tandem.h) signature of
        // the symbol named.
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
            let launch: LaunchFn = sym(shim, "cuLaunchKernel");
            let client_id: CounterFn = sym(shim, "tandem_client_id");
            let dropped: CounterFn = sym(shim, "tandem_records_dropped");
            ok(init(0), "cuInit");
            // The shim's first hooked call connects to the coordinator.
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
            static ARGS: (u64, u32, u32) = (0, 0, 0);
            let mut s = Box::new(Setup {
                dir,
                daemon: Some(daemon),
                func,
                stream,
                sync,
                launch,
                client_id,
                dropped,
                params: [
                    std::ptr::addr_of!(ARGS.0) as *mut c_void,
                    std::ptr::addr_of!(ARGS.1) as *mut c_void,
                    std::ptr::addr_of!(ARGS.2) as *mut c_void,
                ],
            });
            s.wait_id(true);
            s
        }
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
        // SAFETY: the shim's cuLaunchKernel; func/stream are live handles and
        // params points at three valid arguments that outlive the call.
        let rc = unsafe {
            (self.launch)(
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
