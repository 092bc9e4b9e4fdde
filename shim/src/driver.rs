//! The real driver: where it is, and the real function behind every hook.
//!
//! Resolution is lazy (first CUDA call, first `dlsym`/`cuGetProcAddress` answer)
//! and lock-free: racing threads do the same idempotent work and publish the same
//! pointers, so no thread ever waits on another — not even a child forked while
//! its parent was half-way through (a lock held at `fork` would never be released).

use crate::table::{Hook, HOOK_COUNT};
use crate::types::CuResult;
use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// `dlsym` as glibc defines it. Ours is the exported override in `crate::dlsym`.
type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's `dlsym`; read by the override's tail jump, so it must be a plain word.
pub(crate) static TANDEM_REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

/// Declares the driver functions the shim itself calls, once: the
/// [`Support`] enum, [`Support::ALL`] and each one's driver symbol come from
/// this one list, so they cannot drift apart (the enum's discriminants are
/// the indices of `ALL` and of the slots; checked at compile time below).
macro_rules! support_table {
    ($($(#[$attr:meta])* $variant:ident = $symbol:literal;)*) => {
        /// Driver functions the shim itself calls to do its work. They are not
        /// hooked and never handed to the program; they are resolved with the hooks.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Support {
            $($(#[$attr])* $variant,)*
        }

        impl Support {
            /// How many there are.
            pub const COUNT: usize = [$(stringify!($variant),)*].len();
            /// Every one, in declaration (= discriminant) order.
            pub const ALL: [Support; Support::COUNT] = [$(Support::$variant,)*];
            /// The driver's symbols, indexed by discriminant.
            const SYMBOLS: [&'static CStr; Support::COUNT] = [$($symbol,)*];
        }
    };
}

support_table! {
    StreamIsCapturing = c"cuStreamIsCapturing";
    StreamIsCapturingPtsz = c"cuStreamIsCapturing_ptsz";
    GraphGetNodes = c"cuGraphGetNodes";
    GraphNodeGetType = c"cuGraphNodeGetType";
    GraphChildGraphNodeGetGraph = c"cuGraphChildGraphNodeGetGraph";
    FuncGetName = c"cuFuncGetName";
    FuncGetAttribute = c"cuFuncGetAttribute";
    CtxGetDevice = c"cuCtxGetDevice";
    DeviceGetUuidV2 = c"cuDeviceGetUuid_v2";
    DeviceGetUuid = c"cuDeviceGetUuid";
    DeviceGetName = c"cuDeviceGetName";
    // weight dedup and follow mode (crate::vmm)
    CtxGetCurrent = c"cuCtxGetCurrent";
    CtxSetCurrent = c"cuCtxSetCurrent";
    CtxGetStreamPriorityRange = c"cuCtxGetStreamPriorityRange";
    StreamCreateWithPriority = c"cuStreamCreateWithPriority";
    MemGetAllocationGranularity = c"cuMemGetAllocationGranularity";
    MemAddressReserve = c"cuMemAddressReserve";
    MemAddressFree = c"cuMemAddressFree";
    MemSetAccess = c"cuMemSetAccess";
    MemExportToShareableHandle = c"cuMemExportToShareableHandle";
    MemImportFromShareableHandle = c"cuMemImportFromShareableHandle";
    // completion marks (crate::client::marks) and the watcher thread
    EventCreate = c"cuEventCreate";
    EventRecord = c"cuEventRecord";
    EventRecordPtsz = c"cuEventRecord_ptsz";
    EventElapsedTime = c"cuEventElapsedTime";
    ThreadExchangeStreamCaptureMode = c"cuThreadExchangeStreamCaptureMode";
    // the SM reservation (crate::client::spatial)
    GetExportTable = c"cuGetExportTable";
    DeviceGetAttribute = c"cuDeviceGetAttribute";
}

// Each variant's discriminant is its index in `ALL` (and so in `SYMBOLS` and
// the slots): a build that breaks this does not compile.
const _: () = {
    let mut i = 0;
    while i < Support::COUNT {
        assert!(Support::ALL[i] as usize == i);
        i += 1;
    }
};

impl Support {
    /// The driver's symbol for it, e.g. `cuMemSetAccess`.
    pub fn symbol(self) -> &'static CStr {
        Self::SYMBOLS[self as usize]
    }

    /// The driver's name for it, e.g. `cuMemSetAccess`.
    pub fn name(self) -> &'static str {
        self.symbol().to_str().unwrap_or("?")
    }
}

static SUPPORT: [AtomicUsize; Support::COUNT] = [const { AtomicUsize::new(0) }; Support::COUNT];

/// The real driver function `which`, if the driver has it.
pub fn support(which: Support) -> Option<usize> {
    if !ensure_loaded() {
        return None;
    }
    match SUPPORT[which as usize].load(Ordering::Acquire) {
        0 => None,
        p => Some(p),
    }
}

/// Real driver function per hook, or 0 while unknown.
static SLOTS: [AtomicUsize; HOOK_COUNT] = [const { AtomicUsize::new(0) }; HOOK_COUNT];

const UNRESOLVED: u8 = 0;
const LOADED: u8 = 1;
const FAILED: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);

/// The glibc symbol versions of `dlsym`, newest first: glibc 2.34 moved it into
/// libc proper; older glibc (and binaries built against it) use the libdl one.
#[cfg(target_arch = "x86_64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];
#[cfg(target_arch = "aarch64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.17"];

/// glibc's own `dlsym`. Never `libc::dlsym` inside the shim: that name binds to
/// our own override.
pub fn real_dlsym() -> DlsymFn {
    let p = TANDEM_REAL_DLSYM.load(Ordering::Acquire);
    if p != 0 {
        // SAFETY: only ever set to glibc's dlsym, whose signature is DlsymFn.
        return unsafe { core::mem::transmute::<usize, DlsymFn>(p) };
    }
    for version in DLSYM_VERSIONS {
        // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated names has no other preconditions.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            TANDEM_REAL_DLSYM.store(p as usize, Ordering::Release);
            // SAFETY: glibc's dlsym has exactly this signature.
            return unsafe { core::mem::transmute::<*mut c_void, DlsymFn>(p) };
        }
    }
    crate::log::raw_line(format_args!(
        "tandem: glibc's dlsym was not found (neither GLIBC_2.34 nor the older version); \
         libtandem.so needs glibc. Remove it from LD_PRELOAD."
    ));
    // SAFETY: abort has no preconditions; continuing would jump to address 0.
    unsafe { libc::abort() }
}

/// Looks `symbol` up in `handle` with glibc's dlsym.
pub fn lookup(handle: *mut c_void, symbol: &CStr) -> *mut c_void {
    // SAFETY: real_dlsym is glibc's dlsym; `symbol` is NUL-terminated.
    unsafe { real_dlsym()(handle, symbol.as_ptr()) }
}

/// Loads the real driver and fills every slot it exports. `false` if it cannot
/// be loaded (said once, on stderr).
pub fn ensure_loaded() -> bool {
    match STATE.load(Ordering::Acquire) {
        LOADED => true,
        FAILED => false,
        _ => load(),
    }
}

fn load() -> bool {
    let configured = crate::env::var(c"TANDEM_REAL_LIBCUDA");
    let mut path_buf = [0u8; 4096];
    let path: &CStr = match configured {
        Some(p) if !p.is_empty() && p.len() < path_buf.len() => {
            path_buf[..p.len()].copy_from_slice(p);
            match CStr::from_bytes_until_nul(&path_buf) {
                Ok(c) => c,
                Err(_) => c"libcuda.so.1",
            }
        }
        _ => c"libcuda.so.1",
    };
    // RTLD_LOCAL: never promote the driver into the global scope. When the
    // program already loaded it, this returns that same object (matched by SONAME).
    // SAFETY: `path` is NUL-terminated.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        if STATE
            .compare_exchange(UNRESOLVED, FAILED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: dlerror returns NULL or a NUL-terminated message.
            let err = unsafe { libc::dlerror() };
            let err = if err.is_null() {
                b"unknown error".as_slice()
            } else {
                // SAFETY: non-NULL dlerror results are NUL-terminated.
                unsafe { CStr::from_ptr(err) }.to_bytes()
            };
            crate::log::raw_line(format_args!(
                "tandem: cannot load the real CUDA driver {:?}: {:?}. CUDA calls will fail with \
                 CUDA_ERROR_SHARED_OBJECT_INIT_FAILED; set TANDEM_REAL_LIBCUDA to the driver's path \
                 or remove libtandem.so from LD_PRELOAD.",
                crate::log::String8(path.to_bytes()),
                crate::log::String8(err),
            ));
        }
        return STATE.load(Ordering::Acquire) == LOADED;
    }
    for hook in Hook::ALL {
        let p = lookup(handle, hook.info().symbol);
        if !p.is_null() {
            // Keep a pointer published by a racing thread (it is the same one).
            let _ = SLOTS[hook as usize].compare_exchange(
                0,
                p as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }
    for which in Support::ALL {
        let p = lookup(handle, which.symbol());
        SUPPORT[which as usize].store(p as usize, Ordering::Release);
    }
    STATE.store(LOADED, Ordering::Release);
    // Say which file answered, and whether it is tandem's fake driver (it
    // exports `fakecuda_*` introspection symbols; no NVIDIA driver does).
    let cu_init = lookup(handle, c"cuInit");
    // SAFETY: an all-zero Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads the address and writes `info`.
    let file = if !cu_init.is_null() && unsafe { libc::dladdr(cu_init, &mut info) } != 0 {
        if info.dli_fname.is_null() {
            path
        } else {
            // SAFETY: a non-NULL dli_fname is NUL-terminated and lives as
            // long as the object stays loaded (we never unload it).
            unsafe { CStr::from_ptr(info.dli_fname) }
        }
    } else {
        path
    };
    let fake = !lookup(handle, c"fakecuda_kernels_executed").is_null();
    crate::log!(
        Debug,
        "CUDA driver {:?} loaded from {:?}{}",
        crate::log::String8(path.to_bytes()),
        crate::log::String8(file.to_bytes()),
        if fake {
            " (tandem's fake driver: host memory, simulated kernels; no GPU)"
        } else {
            ""
        }
    );
    true
}

/// The real function behind `hook`. One relaxed load on the fast path.
#[inline(always)]
pub fn real(hook: Hook) -> Option<usize> {
    let p = SLOTS[hook as usize].load(Ordering::Relaxed);
    if p != 0 {
        Some(p)
    } else {
        real_slow(hook)
    }
}

#[cold]
#[inline(never)]
fn real_slow(hook: Hook) -> Option<usize> {
    if !ensure_loaded() {
        return None;
    }
    match SLOTS[hook as usize].load(Ordering::Acquire) {
        0 => None,
        p => Some(p),
    }
}

/// The real function behind `hook`, without loading anything.
pub fn slot(hook: Hook) -> usize {
    SLOTS[hook as usize].load(Ordering::Acquire)
}

/// Records `p` as the real function for `hook` if none is known yet (a variant
/// the driver answers through `cuGetProcAddress` but does not export by name).
pub fn adopt(hook: Hook, p: usize) {
    let _ = SLOTS[hook as usize].compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire);
}

/// The hook whose real driver function is `p`, if any.
pub fn hook_for_real(p: usize) -> Option<Hook> {
    if p == 0 {
        return None;
    }
    Hook::ALL.iter().copied().find(|&h| slot(h) == p)
}

/// What a hook returns when its real function is not there.
#[cold]
pub fn unavailable(hook: Hook) -> CuResult {
    if !ensure_loaded() {
        return CuResult::SHARED_OBJECT_INIT_FAILED;
    }
    static SAID: [AtomicBool; HOOK_COUNT] = [const { AtomicBool::new(false) }; HOOK_COUNT];
    if !SAID[hook as usize].swap(true, Ordering::Relaxed) {
        crate::log!(
            Warn,
            "the loaded CUDA driver does not export {:?}; returning CUDA_ERROR_NOT_SUPPORTED",
            hook.info().symbol
        );
    }
    CuResult::NOT_SUPPORTED
}

/// For tests: makes `p` the real function behind `hook`; returns the one it
/// replaces (0: none), to be put back.
#[cfg(test)]
pub(crate) fn replace(hook: Hook, p: usize) -> usize {
    SLOTS[hook as usize].swap(p, Ordering::AcqRel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_support_function_has_its_own_driver_symbol() {
        let mut seen = std::collections::HashSet::new();
        for (i, which) in Support::ALL.into_iter().enumerate() {
            assert_eq!(which as usize, i);
            let name = which.name();
            assert!(name.starts_with("cu"), "{which:?} -> {name}");
            assert!(seen.insert(name), "{name} is listed twice");
        }
        assert_eq!(seen.len(), Support::COUNT);
        assert_eq!(Support::MemSetAccess.name(), "cuMemSetAccess");
        assert_eq!(
            Support::ThreadExchangeStreamCaptureMode.symbol(),
            c"cuThreadExchangeStreamCaptureMode"
        );
    }
}
