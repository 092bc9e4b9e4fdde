//! The symbol table and `cuGetProcAddress`.
//!
//! One table of `{symbol, cuGetProcAddress name, first CUDA version, per-thread}` drives both the
//! exported entry points and `cuGetProcAddress`/`cuGetProcAddress_v2`. The table itself is
//! written once, in `exports.rs`, through the `driver_api!` macro defined here, which generates
//! for every row: the exported `extern "C"` function, a private (non-exported) trampoline twin
//! that counts as the exported symbol, a call counter, and the table entry.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::state;
use crate::types::*;

/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`.
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1 << 0;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// `CUdriverProcAddressQueryResult`.
pub const CU_GET_PROC_ADDRESS_SUCCESS: c_int = 0;
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: c_int = 1;
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: c_int = 2;

/// One row of the symbol table.
pub struct Entry {
    /// The exact exported symbol (`cuMemAlloc_v2`, `cuLaunchKernel_ptsz`).
    pub symbol: &'static str,
    /// The name `cuGetProcAddress` is asked for (`cuMemAlloc`, `cuLaunchKernel`).
    pub gpa_name: &'static str,
    /// First CUDA version (1000 * major + 10 * minor) with this variant.
    pub version: c_int,
    /// A `_ptsz`/`_ptds` (per-thread default stream) variant.
    pub per_thread: bool,
    /// The exported function.
    pub export: *const c_void,
    /// Its private twin (`FAKECUDA_GPA_TRAMPOLINES=1`).
    pub trampoline: *const c_void,
    /// Times this symbol (or its trampoline) was entered.
    pub calls: &'static AtomicU64,
}

// SAFETY: `export`/`trampoline` are addresses of functions in this library: immutable code,
// never written through, valid from any thread.
unsafe impl Sync for Entry {}

/// Calls that came in through a trampoline (all symbols together). Not exported; it keeps each
/// trampoline's body different from its exported twin so the two are never merged into one
/// address.
static TRAMPOLINE_CALLS: AtomicU64 = AtomicU64::new(0);

/// The common prologue of every entry point: count, check `cuInit`, run, map to `CUresult`.
#[inline(always)]
pub fn dispatch(
    calls: &AtomicU64,
    needs_init: bool,
    via_trampoline: bool,
    body: impl FnOnce() -> CuResult<()>,
) -> CUresult {
    calls.fetch_add(1, Ordering::Relaxed);
    if via_trampoline {
        TRAMPOLINE_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    if needs_init && !state::initialized() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    match body() {
        Ok(()) => CUDA_SUCCESS,
        Err(e) => e,
    }
}

/// The outcome of looking a name up the way the real `cuGetProcAddress` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Index of the chosen row.
    Found(usize),
    /// No row has that `cuGetProcAddress` name.
    SymbolNotFound,
    /// Rows exist, but every one of them is newer than the asked version.
    VersionNotSufficient,
}

/// Among the variants of `name` whose first version is `<= version`, picks the highest version;
/// with `per_thread` a qualifying per-thread variant wins, otherwise the legacy one is taken.
pub fn select(table: &[Entry], name: &str, version: c_int, per_thread: bool) -> Selection {
    let mut known = false;
    let mut legacy: Option<(c_int, usize)> = None;
    let mut ptsz: Option<(c_int, usize)> = None;
    for (i, e) in table.iter().enumerate() {
        if e.gpa_name != name {
            continue;
        }
        known = true;
        if e.version > version {
            continue;
        }
        let slot = if e.per_thread { &mut ptsz } else { &mut legacy };
        if slot.is_none_or(|(v, _)| e.version > v) {
            *slot = Some((e.version, i));
        }
    }
    if !known {
        return Selection::SymbolNotFound;
    }
    let pick = if per_thread { ptsz.or(legacy) } else { legacy };
    match pick {
        Some((_, i)) => Selection::Found(i),
        None => Selection::VersionNotSufficient,
    }
}

fn trampolines_enabled() -> bool {
    std::env::var_os("FAKECUDA_GPA_TRAMPOLINES").is_some_and(|v| v == "1")
}

/// `cuGetProcAddress` (`status` NULL) and `cuGetProcAddress_v2`.
///
/// # Safety
/// `symbol` NULL or NUL-terminated; `pfn` NULL or valid for a write; `status` NULL or valid
/// for a write of `int`.
pub unsafe fn get_proc_address(
    table: &[Entry],
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult<()> {
    if pfn.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, caller contract.
    unsafe { pfn.write_unaligned(std::ptr::null_mut()) };
    let valid_flags =
        CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if symbol.is_null() || flags & !valid_flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL and NUL-terminated (caller contract).
    let name = unsafe { CStr::from_ptr(symbol) };
    let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
    let selection = match name.to_str() {
        Ok(name) => select(table, name, version, per_thread),
        Err(_) => Selection::SymbolNotFound,
    };
    let (result, code) = match selection {
        Selection::Found(i) => {
            let e = &table[i];
            let f = if trampolines_enabled() {
                e.trampoline
            } else {
                e.export
            };
            // SAFETY: non-NULL, caller contract.
            unsafe { pfn.write_unaligned(f.cast_mut()) };
            (Ok(()), CU_GET_PROC_ADDRESS_SUCCESS)
        }
        Selection::SymbolNotFound => (
            Err(CUDA_ERROR_NOT_FOUND),
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
        ),
        Selection::VersionNotSufficient => (
            Err(CUDA_ERROR_NOT_FOUND),
            CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
        ),
    };
    if !status.is_null() {
        // SAFETY: non-NULL, caller contract.
        unsafe { status.write_unaligned(code) };
    }
    result
}

/// Maps the per-thread/init markers of a `driver_api!` row to booleans.
macro_rules! flag {
    (legacy) => {
        false
    };
    (per_thread) => {
        true
    };
    (init) => {
        true
    };
    (noinit) => {
        false
    };
}

/// Generates, for every row `symbol[gpa_name, version, legacy|per_thread, init|noinit](args) =>
/// body;`, the exported function, its private trampoline, its counter and its `TABLE` entry.
/// `init` rows return `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
macro_rules! driver_api {
    ($(
        $sym:ident [$gpa:literal, $ver:literal, $pt:ident, $init:ident]
            ($($arg:ident : $ty:ty),* $(,)?) => $body:expr;
    )*) => {
        /// One call counter per exported symbol.
        mod counters {
            $(
                #[allow(non_upper_case_globals)]
                pub(crate) static $sym: ::std::sync::atomic::AtomicU64 =
                    ::std::sync::atomic::AtomicU64::new(0);
            )*
        }

        $(
            #[doc = concat!("`", stringify!($sym), "`, with the signature of cuda.h.")]
            #[doc = ""]
            #[doc = "# Safety"]
            #[doc = "Every pointer argument must satisfy the cuda.h contract of this function."]
            #[no_mangle]
            #[allow(non_snake_case, unused_unsafe, clippy::too_many_arguments)]
            pub unsafe extern "C" fn $sym($($arg: $ty),*) -> $crate::types::CUresult {
                $crate::table::dispatch(&counters::$sym, flag!($init), false, || {
                    // SAFETY: the arguments come straight from the C caller, who upholds the
                    // cuda.h contract of this function; the implementation checks what it can.
                    unsafe { $body }
                })
            }
        )*

        /// Private twins of the exported entry points, handed out by `cuGetProcAddress` when
        /// `FAKECUDA_GPA_TRAMPOLINES=1`. Each counts as its exported symbol.
        mod trampolines {
            use super::*;
            $(
                #[allow(non_snake_case, unused_unsafe, clippy::too_many_arguments)]
                pub(super) unsafe extern "C" fn $sym($($arg: $ty),*) -> $crate::types::CUresult {
                    $crate::table::dispatch(&counters::$sym, flag!($init), true, || {
                        // SAFETY: as for the exported twin: a C caller upholding cuda.h.
                        unsafe { $body }
                    })
                }
            )*
        }

        /// The symbol table: every exported driver entry point, in one place.
        pub(crate) static TABLE: &[$crate::table::Entry] = &[
            $(
                $crate::table::Entry {
                    symbol: stringify!($sym),
                    gpa_name: $gpa,
                    version: $ver,
                    per_thread: flag!($pt),
                    export: $sym as *const ::std::ffi::c_void,
                    trampoline: trampolines::$sym as *const ::std::ffi::c_void,
                    calls: &counters::$sym,
                },
            )*
        ];
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::TABLE;

    fn pick(name: &str, version: c_int, per_thread: bool) -> Result<&'static str, Selection> {
        match select(TABLE, name, version, per_thread) {
            Selection::Found(i) => Ok(TABLE[i].symbol),
            other => Err(other),
        }
    }

    #[test]
    fn symbols_are_unique() {
        for (i, a) in TABLE.iter().enumerate() {
            for b in &TABLE[i + 1..] {
                assert_ne!(a.symbol, b.symbol);
                assert!(
                    !(a.gpa_name == b.gpa_name
                        && a.version == b.version
                        && a.per_thread == b.per_thread),
                    "{} and {} are indistinguishable to cuGetProcAddress",
                    a.symbol,
                    b.symbol
                );
            }
        }
    }

    #[test]
    fn picks_highest_qualifying_version() {
        assert_eq!(pick("cuMemAlloc", 3020, false), Ok("cuMemAlloc_v2"));
        assert_eq!(pick("cuMemAlloc", 13000, false), Ok("cuMemAlloc_v2"));
        assert_eq!(
            pick("cuGetProcAddress", 11030, false),
            Ok("cuGetProcAddress")
        );
        assert_eq!(
            pick("cuGetProcAddress", 12000, false),
            Ok("cuGetProcAddress_v2")
        );
        assert_eq!(pick("cuDeviceGetUuid", 9020, false), Ok("cuDeviceGetUuid"));
        assert_eq!(
            pick("cuDeviceGetUuid", 11040, false),
            Ok("cuDeviceGetUuid_v2")
        );
        assert_eq!(pick("cuCtxCreate", 3020, false), Ok("cuCtxCreate_v2"));
        assert_eq!(
            pick("cuStreamDestroy", 4000, false),
            Ok("cuStreamDestroy_v2")
        );
        assert_eq!(
            pick("cuDevicePrimaryCtxRelease", 11000, false),
            Ok("cuDevicePrimaryCtxRelease_v2")
        );
        assert_eq!(
            pick("cuGraphAddKernelNode", 12000, false),
            Ok("cuGraphAddKernelNode_v2")
        );
        assert_eq!(pick("cuMemcpyDtoD", 3020, false), Ok("cuMemcpyDtoD_v2"));
        assert_eq!(
            pick("cuMemcpyDtoDAsync", 12000, false),
            Ok("cuMemcpyDtoDAsync_v2")
        );
        assert_eq!(pick("cuMemcpy", 4000, false), Ok("cuMemcpy"));
        assert_eq!(pick("cuMemcpyAsync", 13000, false), Ok("cuMemcpyAsync"));
        assert_eq!(
            pick("cuStreamCreateWithPriority", 5050, false),
            Ok("cuStreamCreateWithPriority")
        );
        assert_eq!(
            pick("cuCtxGetStreamPriorityRange", 12000, false),
            Ok("cuCtxGetStreamPriorityRange")
        );
    }

    #[test]
    fn version_not_sufficient() {
        assert_eq!(
            pick("cuMemAlloc", 3010, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuLaunchKernelEx", 11050, true),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuMemCreate", 10010, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuGraphAddKernelNode", 11080, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuFuncGetName", 12020, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuInit", -1, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuMemcpyDtoD", 3010, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuMemcpy", 3020, true),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuStreamCreateWithPriority", 5000, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuMemcpyPeer", 3020, false),
            Err(Selection::VersionNotSufficient)
        );
        assert_eq!(
            pick("cuMemcpy3D", 3010, true),
            Err(Selection::VersionNotSufficient)
        );
    }

    #[test]
    fn unknown_symbols() {
        assert_eq!(
            pick("cuNoSuchThing", 13000, false),
            Err(Selection::SymbolNotFound)
        );
        // Exported names are not cuGetProcAddress names.
        assert_eq!(
            pick("cuMemAlloc_v2", 13000, false),
            Err(Selection::SymbolNotFound)
        );
        assert_eq!(
            pick("cuLaunchKernel_ptsz", 13000, true),
            Err(Selection::SymbolNotFound)
        );
    }

    #[test]
    fn per_thread_selection() {
        assert_eq!(
            pick("cuLaunchKernel", 12000, true),
            Ok("cuLaunchKernel_ptsz")
        );
        assert_eq!(pick("cuLaunchKernel", 12000, false), Ok("cuLaunchKernel"));
        // The per-thread form is newer than the asked version: legacy it is.
        assert_eq!(pick("cuLaunchKernel", 6050, true), Ok("cuLaunchKernel"));
        assert_eq!(pick("cuMemcpyHtoD", 7000, true), Ok("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(pick("cuMemcpyHtoD", 6000, true), Ok("cuMemcpyHtoD_v2"));
        assert_eq!(
            pick("cuMemsetD32Async", 12000, true),
            Ok("cuMemsetD32Async_ptsz")
        );
        assert_eq!(pick("cuEventRecord", 7000, true), Ok("cuEventRecord_ptsz"));
        assert_eq!(pick("cuGraphLaunch", 10000, true), Ok("cuGraphLaunch_ptsz"));
        assert_eq!(pick("cuMemcpyDtoD", 7000, true), Ok("cuMemcpyDtoD_v2_ptds"));
        assert_eq!(pick("cuMemcpyDtoD", 6050, true), Ok("cuMemcpyDtoD_v2"));
        assert_eq!(
            pick("cuMemcpyDtoDAsync", 12000, true),
            Ok("cuMemcpyDtoDAsync_v2_ptsz")
        );
        assert_eq!(pick("cuMemcpy", 7000, true), Ok("cuMemcpy_ptds"));
        assert_eq!(pick("cuMemcpy", 6000, true), Ok("cuMemcpy"));
        assert_eq!(pick("cuMemcpyAsync", 7000, true), Ok("cuMemcpyAsync_ptsz"));
        assert_eq!(pick("cuMemcpyAsync", 7000, false), Ok("cuMemcpyAsync"));
        assert_eq!(
            pick("cuStreamGetPriority", 12000, true),
            Ok("cuStreamGetPriority_ptsz")
        );
        assert_eq!(
            pick("cuStreamCreateWithPriority", 12000, true),
            Ok("cuStreamCreateWithPriority")
        );
        assert_eq!(
            pick("cuMemcpyDtoHAsync", 12000, true),
            Ok("cuMemcpyDtoHAsync_v2_ptsz")
        );
        assert_eq!(pick("cuMemcpy2D", 7000, true), Ok("cuMemcpy2D_v2_ptds"));
        assert_eq!(pick("cuMemcpy2D", 6050, true), Ok("cuMemcpy2D_v2"));
        assert_eq!(
            pick("cuMemcpy2DUnaligned", 12000, true),
            Ok("cuMemcpy2DUnaligned_v2_ptds")
        );
        assert_eq!(
            pick("cuMemcpy3DAsync", 12000, true),
            Ok("cuMemcpy3DAsync_v2_ptsz")
        );
        assert_eq!(pick("cuMemcpyPeer", 7000, true), Ok("cuMemcpyPeer_ptds"));
        assert_eq!(
            pick("cuMemcpyPeerAsync", 7000, false),
            Ok("cuMemcpyPeerAsync")
        );
        assert_eq!(
            pick("cuMemsetD2D32Async", 12000, true),
            Ok("cuMemsetD2D32Async_ptsz")
        );
        assert_eq!(pick("cuMemsetD2D8", 12000, false), Ok("cuMemsetD2D8_v2"));
        // A function with no per-thread form gives its legacy form under either flag.
        assert_eq!(pick("cuMemAlloc", 12000, true), Ok("cuMemAlloc_v2"));
        assert_eq!(
            pick("cuCtxSynchronize", 12000, true),
            Ok("cuCtxSynchronize")
        );
    }

    #[test]
    fn every_contract_symbol_is_in_the_table() {
        // The one shared list (tests/hosts/hooked_symbols.h).
        let hooked = tandem_e2e::hooked();
        assert!(hooked.len() >= 50, "parsed {} names", hooked.len());
        for &s in hooked {
            assert!(TABLE.iter().any(|e| e.symbol == s), "{s} missing");
        }
        for e in TABLE {
            assert_ne!(e.export, e.trampoline, "{} trampoline merged", e.symbol);
        }
    }
}
