//! The fake driver and libtandem.so loaded into this process, for benchmarks.
//!
//! The fake is dlopen'ed first by absolute path (RTLD_LOCAL), so the shim's own
//! dlopen("libcuda.so.1") finds that object by its SONAME (and
//! `TANDEM_REAL_LIBCUDA` names it too); the shim is then dlopen'ed RTLD_LOCAL
//! and its hooks are looked up with dlsym on its handle. [`InProcess::load`]
//! initialises through the fake, makes the shim's first hooked call (which
//! registers with a coordinator if one answers on the given socket), and
//! prepares a 0 ns noop kernel on a stream.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::path::Path;

pub type CUresult = c_int;
pub type Ptr = *mut c_void;
pub type InitFn = unsafe extern "C" fn(c_uint) -> CUresult;
pub type StreamSyncFn = unsafe extern "C" fn(Ptr) -> CUresult;
/// `uint64_t f(void)`: the shim's counters (`tandem_client_id`, …).
pub type CounterFn = unsafe extern "C" fn() -> u64;
/// `cuLaunchKernel` and its `_ptsz` form.
pub type LaunchFn = unsafe extern "C" fn(
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

type DeviceGetFn = unsafe extern "C" fn(*mut c_int, c_int) -> CUresult;
type RetainFn = unsafe extern "C" fn(*mut Ptr, c_int) -> CUresult;
type SetCurrentFn = unsafe extern "C" fn(Ptr) -> CUresult;
type ModuleLoadDataFn = unsafe extern "C" fn(*mut Ptr, *const c_void) -> CUresult;
type GetFunctionFn = unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> CUresult;
type StreamCreateFn = unsafe extern "C" fn(*mut Ptr, c_uint) -> CUresult;

/// The fake module with one 0 ns kernel, `noop`.
pub const NOOP_MODULE: &CStr = c"tandem-fake-module v1\nkernel noop 0 noop\n";

/// dlopen(path, RTLD_NOW | RTLD_LOCAL); panics with dlerror's message.
pub fn dlopen(path: &Path) -> Ptr {
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
            // SAFETY: a non-NULL dlerror result is a NUL-terminated string.
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
pub unsafe fn sym<F: Copy>(h: Ptr, name: &str) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<Ptr>());
    let c = CString::new(name).expect("no NUL in name");
    // SAFETY: h is a live handle from dlopen, c a valid C string.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "symbol {name} not found");
    // SAFETY: p is a non-NULL function address and the caller guarantees F is
    // its function pointer type (same size checked above).
    unsafe { std::mem::transmute_copy::<Ptr, F>(&p) }
}

/// Asserts a CUDA call returned CUDA_SUCCESS.
#[track_caller]
pub fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, 0, "{what} returned {rc}");
}

/// The three kernel arguments of `noop` (ignored by it, but valid pointers).
static ARGS: (u64, u32, u32) = (0, 0, 0);

/// The fake driver and the shim in this process, with a noop kernel ready.
pub struct InProcess {
    /// dlopen handle of the fake driver.
    pub fake: Ptr,
    /// dlopen handle of libtandem.so.
    pub shim: Ptr,
    pub func: Ptr,
    pub stream: Ptr,
    /// The fake's cuStreamSynchronize (no shim in the way).
    pub sync: StreamSyncFn,
    params: [*mut c_void; 3],
}

impl InProcess {
    /// Loads both libraries with the shim pointed at `socket` (a path with no
    /// coordinator for "detached"), `TANDEM_CLASS` unset, and prepares the
    /// noop kernel. The shim's `cuInit` is its first hooked call.
    pub fn load(socket: &Path) -> InProcess {
        Self::load_as(socket, None)
    }

    /// [`load`](Self::load) with `TANDEM_CLASS` = `class` (unset for `None`).
    pub fn load_as(socket: &Path, class: Option<&str>) -> InProcess {
        let a = crate::artifacts();
        std::env::set_var("TANDEM_REAL_LIBCUDA", &a.fake);
        std::env::set_var("TANDEM_SOCKET", socket);
        match class {
            Some(c) => std::env::set_var("TANDEM_CLASS", c),
            None => std::env::remove_var("TANDEM_CLASS"),
        }
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
            let shim_init: InitFn = sym(shim, "cuInit");
            ok(init(0), "cuInit");
            ok(shim_init(0), "the shim's cuInit");
            let mut dev = 0;
            ok(dev_get(&mut dev, 0), "cuDeviceGet");
            let mut ctx: Ptr = std::ptr::null_mut();
            ok(retain(&mut ctx, dev), "cuDevicePrimaryCtxRetain");
            ok(set_current(ctx), "cuCtxSetCurrent");
            let mut module: Ptr = std::ptr::null_mut();
            ok(
                load(&mut module, NOOP_MODULE.as_ptr().cast()),
                "cuModuleLoadData",
            );
            let mut func: Ptr = std::ptr::null_mut();
            ok(
                get_fn(&mut func, module, c"noop".as_ptr()),
                "cuModuleGetFunction",
            );
            let mut stream: Ptr = std::ptr::null_mut();
            ok(stream_create(&mut stream, 0), "cuStreamCreate");
            InProcess {
                fake,
                shim,
                func,
                stream,
                sync: sym(fake, "cuStreamSynchronize"),
                params: [
                    std::ptr::addr_of!(ARGS.0) as *mut c_void,
                    std::ptr::addr_of!(ARGS.1) as *mut c_void,
                    std::ptr::addr_of!(ARGS.2) as *mut c_void,
                ],
            }
        }
    }

    /// The fake's `name` (the real driver, as far as the shim knows).
    ///
    /// # Safety
    /// `F` must be the C function pointer type of `name`.
    pub unsafe fn fake_sym<F: Copy>(&self, name: &str) -> F {
        // SAFETY: forwarded caller contract.
        unsafe { sym(self.fake, name) }
    }

    /// The shim's `name` (its hook, or one of its own exports).
    ///
    /// # Safety
    /// `F` must be the C function pointer type of `name`.
    pub unsafe fn shim_sym<F: Copy>(&self, name: &str) -> F {
        // SAFETY: forwarded caller contract.
        unsafe { sym(self.shim, name) }
    }

    /// Kernel parameters for `noop` (valid for the life of the process).
    pub fn params(&mut self) -> *mut *mut c_void {
        self.params.as_mut_ptr()
    }

    /// Launches `noop` once (1 block of 1 thread) through `f`, the fake's or
    /// the shim's `cuLaunchKernel` (or `_ptsz`).
    #[inline(always)]
    pub fn launch(&mut self, f: LaunchFn) {
        // SAFETY: f is a cuLaunchKernel of the fake or the shim; func and
        // stream are live handles; params point at three valid arguments.
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
        ok(rc, "cuLaunchKernel");
    }

    /// Waits for the stream (through the fake).
    pub fn sync(&self) {
        // SAFETY: the fake's cuStreamSynchronize on a live stream.
        ok(unsafe { (self.sync)(self.stream) }, "cuStreamSynchronize");
    }
}
