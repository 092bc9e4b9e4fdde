//! The one table of hooked driver functions, as the layers below the entry
//! points see it.
//!
//! [`list`] holds the list. Expanded here (`declare!`), it makes the [`Hook`]
//! enum, [`HOOK_COUNT`] and [`TABLE`], the per-variant metadata ([`HookInfo`],
//! [`Kind`]) that answers `dlsym` (path 2) and `cuGetProcAddress` (path 3) and
//! indexes the real-pointer slots (`crate::driver`) and the counters
//! (`crate::counters`). Expanded in `crate::hooks`, the same list makes the
//! exported C symbols (path 1: programs linked against libcuda).

use core::ffi::CStr;

mod list;

pub(crate) use list::hook_list;

/// Expands the list into what every layer may name: the enum, its count and
/// the metadata. Types and operations are not used here.
macro_rules! declare {
    ($(
        $sym:ident ($gpa:literal, $since:literal, $stream:ident) $kind:ident
            fn($($arg:ident : $ty:ty),* $(,)?) $(=> $custom:path)?;
    )*) => {
        /// One value per hooked driver variant, in table order.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Hook { $($sym,)* }

        impl Hook {
            pub const ALL: [Hook; HOOK_COUNT] = [$(Hook::$sym,)*];
        }

        pub const HOOK_COUNT: usize = [$(stringify!($sym),)*].len();

        pub static TABLE: [HookInfo; HOOK_COUNT] = [$(
            HookInfo {
                symbol: match CStr::from_bytes_with_nul(
                    concat!(stringify!($sym), "\0").as_bytes(),
                ) {
                    Ok(s) => s,
                    Err(_) => panic!("symbol names are NUL-free"),
                },
                gpa_name: $gpa,
                since: $since,
                per_thread: declare!(@per_thread $stream),
                kind: Kind::$kind,
            },
        )*];
    };
    (@per_thread legacy) => { false };
    (@per_thread per_thread) => { true };
}

hook_list!(declare);

/// What a hooked call does, for the scheduler, the accounting and the stats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    Init,
    Launch,
    GraphLaunch,
    Graph,
    Capture,
    Alloc,
    Free,
    Vmm,
    MemInfo,
    CopyToDevice,
    /// Device-to-device, unified-address and peer copies (`cuMemcpyDtoD`,
    /// `cuMemcpy`, `cuMemcpyPeer`).
    CopyOnDevice,
    /// 2D and 3D copies (`cuMemcpy2D`, `cuMemcpy3D`), in any direction: their
    /// descriptor says which side is host, device, array or unified memory.
    CopyPitched,
    /// Memsets, one range or pitched (`cuMemsetD32`, `cuMemsetD2D32`).
    Memset,
    /// Device-to-host copies, synchronous or not (`cuMemcpyDtoH`,
    /// `cuMemcpyDtoHAsync`); only the synchronous form is reported as a sync,
    /// by its operation.
    CopyToHost,
    Sync,
    Query,
    ProcAddress,
}

impl Kind {
    pub const ALL: [Kind; 17] = [
        Kind::Init,
        Kind::Launch,
        Kind::GraphLaunch,
        Kind::Graph,
        Kind::Capture,
        Kind::Alloc,
        Kind::Free,
        Kind::Vmm,
        Kind::MemInfo,
        Kind::CopyToDevice,
        Kind::CopyOnDevice,
        Kind::CopyPitched,
        Kind::Memset,
        Kind::CopyToHost,
        Kind::Sync,
        Kind::Query,
        Kind::ProcAddress,
    ];

    /// Whether calls of this kind hand device work to the driver (and so must
    /// not run while dedup remaps memory: `crate::dedup::quiesce`).
    pub const fn submits(self) -> bool {
        matches!(
            self,
            Kind::Launch
                | Kind::GraphLaunch
                | Kind::CopyToDevice
                | Kind::CopyOnDevice
                | Kind::CopyPitched
                | Kind::Memset
                | Kind::CopyToHost
        )
    }

    /// Whether a `CUDA_ERROR_ILLEGAL_ADDRESS` from this kind may be a kernel's
    /// fault reported late (launches, syncs, copies that wait, and the
    /// device-to-host copies, async ones included: reading a kernel's result
    /// back is often the first call after it).
    pub const fn reports_faults(self) -> bool {
        matches!(
            self,
            Kind::Launch
                | Kind::GraphLaunch
                | Kind::Sync
                | Kind::CopyToHost
                | Kind::CopyPitched
                | Kind::Query
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Init => "init",
            Kind::Launch => "launch",
            Kind::GraphLaunch => "graph_launch",
            Kind::Graph => "graph",
            Kind::Capture => "capture",
            Kind::Alloc => "alloc",
            Kind::Free => "free",
            Kind::Vmm => "vmm",
            Kind::MemInfo => "mem_info",
            Kind::CopyToDevice => "copy_to_device",
            Kind::CopyOnDevice => "copy_on_device",
            Kind::CopyPitched => "copy_pitched",
            Kind::Memset => "memset",
            Kind::CopyToHost => "copy_to_host",
            Kind::Sync => "sync",
            Kind::Query => "query",
            Kind::ProcAddress => "proc_address",
        }
    }
}

/// Everything known about one hooked driver variant (one exported symbol).
pub struct HookInfo {
    /// The exact exported symbol, e.g. `cuMemcpyHtoDAsync_v2_ptsz`.
    pub symbol: &'static CStr,
    /// The name `cuGetProcAddress` is asked with, e.g. `cuMemcpyHtoDAsync`.
    pub gpa_name: &'static str,
    /// First CUDA version (as `cuGetProcAddress` counts, e.g. 3020) that returns this variant.
    pub since: i32,
    /// Whether this is the per-thread-default-stream form (`_ptsz` / `_ptds`).
    pub per_thread: bool,
    pub kind: Kind,
}

impl Hook {
    pub fn info(self) -> &'static HookInfo {
        &TABLE[self as usize]
    }

    /// The hooked variant exported under exactly this symbol name.
    pub fn by_symbol(symbol: &[u8]) -> Option<Hook> {
        Hook::ALL
            .iter()
            .copied()
            .find(|h| h.info().symbol.to_bytes() == symbol)
    }

    /// The variant the driver's `cuGetProcAddress` returns for this request, by the
    /// rules of `cuda.h`/`cudaTypedefs.h`: the newest variant not newer than
    /// `version`, in its per-thread form when `flags` ask for per-thread default
    /// stream semantics and such a form exists by then.
    pub fn select(gpa_name: &[u8], version: i32, flags: u64) -> Option<Hook> {
        let want_per_thread = flags & crate::types::GPA_PER_THREAD_DEFAULT_STREAM != 0;
        let newest = |per_thread: bool| {
            Hook::ALL
                .iter()
                .copied()
                .filter(|h| {
                    let i = h.info();
                    i.gpa_name.as_bytes() == gpa_name
                        && i.since <= version
                        && i.per_thread == per_thread
                })
                .max_by_key(|h| h.info().since)
        };
        let legacy = newest(false);
        if want_per_thread {
            // A per-thread form only replaces a legacy one at least as new.
            if let Some(pt) = newest(true) {
                if legacy.is_none_or(|l| pt.info().since >= l.info().since) {
                    return Some(pt);
                }
            }
        }
        legacy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(h: Option<Hook>) -> Option<&'static str> {
        h.map(|h| h.info().symbol.to_str().unwrap())
    }

    #[test]
    fn every_symbol_is_unique_and_found_by_name() {
        for h in Hook::ALL {
            assert_eq!(Hook::by_symbol(h.info().symbol.to_bytes()), Some(h));
        }
        assert_eq!(Hook::by_symbol(b"cuLaunchKernelX"), None);
        assert_eq!(Hook::by_symbol(b"cuMemAlloc"), None, "v1 is not hooked");
    }

    #[test]
    fn the_table_hooks_every_symbol_the_tests_require() {
        // tests/hosts/hooked_symbols.h: the list the C hosts and e2e tests check.
        let required = tandem_e2e::hooked();
        assert!(required.len() >= 50, "parsed {} names", required.len());
        for &s in required {
            assert!(Hook::by_symbol(s.as_bytes()).is_some(), "{s} is not hooked");
        }
    }

    #[test]
    fn selection_honours_version() {
        assert_eq!(
            name(Hook::select(b"cuMemAlloc", 3020, 0)),
            Some("cuMemAlloc_v2")
        );
        assert_eq!(
            name(Hook::select(b"cuMemAlloc", 13000, 0)),
            Some("cuMemAlloc_v2")
        );
        assert_eq!(
            name(Hook::select(b"cuMemAlloc", 3010, 0)),
            None,
            "v1 is not ours"
        );
        assert_eq!(name(Hook::select(b"cuLaunchKernelEx", 11050, 0)), None);
        assert_eq!(
            name(Hook::select(b"cuLaunchKernelEx", 11060, 0)),
            Some("cuLaunchKernelEx")
        );
        assert_eq!(
            name(Hook::select(b"cuGetProcAddress", 11030, 0)),
            Some("cuGetProcAddress")
        );
        assert_eq!(
            name(Hook::select(b"cuGetProcAddress", 12000, 0)),
            Some("cuGetProcAddress_v2")
        );
        assert_eq!(name(Hook::select(b"cuMemcpyPeer", 3020, 0)), None);
        assert_eq!(
            name(Hook::select(b"cuMemcpyPeer", 4000, 0)),
            Some("cuMemcpyPeer")
        );
        assert_eq!(
            name(Hook::select(b"cuMemcpy3D", 3020, 0)),
            Some("cuMemcpy3D_v2")
        );
        assert_eq!(name(Hook::select(b"cuNotAFunction", 13000, 0)), None);
    }

    #[test]
    fn selection_honours_the_per_thread_flag() {
        let ptds = crate::types::GPA_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(
            name(Hook::select(b"cuLaunchKernel", 12000, ptds)),
            Some("cuLaunchKernel_ptsz")
        );
        assert_eq!(
            name(Hook::select(b"cuLaunchKernel", 12000, 0)),
            Some("cuLaunchKernel")
        );
        assert_eq!(
            name(Hook::select(b"cuLaunchKernel", 12000, 1)),
            Some("cuLaunchKernel")
        );
        // Per-thread forms of the copy functions arrived in 7000.
        assert_eq!(
            name(Hook::select(b"cuMemcpyHtoD", 6050, ptds)),
            Some("cuMemcpyHtoD_v2")
        );
        assert_eq!(
            name(Hook::select(b"cuMemcpyHtoD", 7000, ptds)),
            Some("cuMemcpyHtoD_v2_ptds")
        );
        assert_eq!(
            name(Hook::select(b"cuMemsetD32Async", 12000, ptds)),
            Some("cuMemsetD32Async_ptsz")
        );
        assert_eq!(
            name(Hook::select(b"cuMemcpyDtoHAsync", 12000, ptds)),
            Some("cuMemcpyDtoHAsync_v2_ptsz")
        );
        assert_eq!(
            name(Hook::select(b"cuMemcpy2D", 12000, ptds)),
            Some("cuMemcpy2D_v2_ptds")
        );
        assert_eq!(
            name(Hook::select(b"cuMemcpy2DAsync", 6050, ptds)),
            Some("cuMemcpy2DAsync_v2")
        );
        assert_eq!(
            name(Hook::select(b"cuMemsetD2D16Async", 12000, ptds)),
            Some("cuMemsetD2D16Async_ptsz")
        );
        assert_eq!(
            name(Hook::select(b"cuMemcpyPeerAsync", 12000, ptds)),
            Some("cuMemcpyPeerAsync_ptsz")
        );
        // A function with no per-thread form answers its legacy form.
        assert_eq!(
            name(Hook::select(b"cuMemAlloc", 12000, ptds)),
            Some("cuMemAlloc_v2")
        );
        assert_eq!(
            name(Hook::select(b"cuCtxSynchronize", 12000, ptds)),
            Some("cuCtxSynchronize")
        );
    }

    #[test]
    fn every_per_thread_variant_has_a_legacy_twin_with_the_same_gpa_name() {
        for h in Hook::ALL.iter().filter(|h| h.info().per_thread) {
            let i = h.info();
            let twin = Hook::ALL
                .iter()
                .find(|l| !l.info().per_thread && l.info().gpa_name == i.gpa_name);
            assert!(twin.is_some(), "{:?} has no legacy twin", i.symbol);
            let sym = i.symbol.to_str().unwrap();
            assert!(sym.ends_with("_ptsz") || sym.ends_with("_ptds"), "{sym}");
        }
    }
}
