//! Per-hook call counts: one relaxed atomic add per hooked call.
//!
//! Counts are per process: a child after `fork` starts again from zero. With
//! `TANDEM_LOG=debug` they are printed at exit; `tandem_hook_count` reads them.

use crate::driver::Support;
use crate::table::{Hook, Kind, HOOK_COUNT};
use core::ffi::{c_char, CStr};
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};

/// One counter per cache line, so threads hitting different hooks do not contend.
#[repr(align(128))]
struct Counter(AtomicU64);

static COUNTS: [Counter; HOOK_COUNT] = [const { Counter(AtomicU64::new(0)) }; HOOK_COUNT];

/// Calls the shim itself made to a hooked variant of the real driver (not on the
/// program's behalf): the driver sees `COUNTS + OWN` calls.
static OWN: [AtomicU64; HOOK_COUNT] = [const { AtomicU64::new(0) }; HOOK_COUNT];

#[cold]
pub fn own_call(hook: Hook) {
    OWN[hook as usize].fetch_add(1, Ordering::Relaxed);
}

/// Calls the shim made to the driver functions it uses for its own work and
/// does not hook (`driver::Support`: completion marks' `cuEventCreate`,
/// `cuEventRecord`, the watcher's `cuCtxSetCurrent`, dedup's VMM calls). The
/// program may call the same functions directly, and the driver then sees
/// both: `tandem_driver_calls` answers for these too, so a program comparing
/// its own count with the driver's can subtract ours.
static SUPPORT_OWN: [AtomicU64; Support::COUNT] = [const { AtomicU64::new(0) }; Support::COUNT];

#[cold]
pub fn support_call(which: Support) {
    SUPPORT_OWN[which as usize].fetch_add(1, Ordering::Relaxed);
}

/// Launch calls that failed, and launches recorded into a graph by stream capture.
static LAUNCH_FAILED: AtomicU64 = AtomicU64::new(0);
static LAUNCH_CAPTURED: AtomicU64 = AtomicU64::new(0);

/// Kernels run by graph launches, and graph launches of executable graphs
/// `crate::graphs` does not know.
static GRAPH_KERNELS: AtomicU64 = AtomicU64::new(0);
static UNKNOWN_GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// A graph launch ran (not captured): `kernels` in it, or `None` when the
/// executable graph is unknown.
pub fn graph_launched(kernels: Option<u32>) {
    match kernels {
        Some(k) => GRAPH_KERNELS.fetch_add(u64::from(k), Ordering::Relaxed),
        None => UNKNOWN_GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed),
    };
}

#[cold]
pub fn launch_failed() {
    LAUNCH_FAILED.fetch_add(1, Ordering::Relaxed);
}

#[cold]
pub fn launch_captured() {
    LAUNCH_CAPTURED.fetch_add(1, Ordering::Relaxed);
}

/// Kernels this process sent to the GPU: successful launches that were not
/// captured, plus the kernel nodes of every graph launch.
pub fn kernels_launched() -> u64 {
    let calls: u64 = Hook::ALL
        .iter()
        .filter(|h| h.info().kind == Kind::Launch)
        .map(|&h| get(h))
        .sum();
    calls
        .saturating_sub(LAUNCH_FAILED.load(Ordering::Relaxed))
        .saturating_sub(LAUNCH_CAPTURED.load(Ordering::Relaxed))
        + GRAPH_KERNELS.load(Ordering::Relaxed)
}

#[inline(always)]
pub fn hit(hook: Hook) {
    COUNTS[hook as usize].0.fetch_add(1, Ordering::Relaxed);
}

pub fn get(hook: Hook) -> u64 {
    COUNTS[hook as usize].0.load(Ordering::Relaxed)
}

/// In a child after fork: its calls are its own.
pub fn reset() {
    for c in &COUNTS {
        c.0.store(0, Ordering::Relaxed);
    }
    for c in OWN.iter().chain(&SUPPORT_OWN) {
        c.store(0, Ordering::Relaxed);
    }
    LAUNCH_FAILED.store(0, Ordering::Relaxed);
    LAUNCH_CAPTURED.store(0, Ordering::Relaxed);
    GRAPH_KERNELS.store(0, Ordering::Relaxed);
    UNKNOWN_GRAPH_LAUNCHES.store(0, Ordering::Relaxed);
}

/// `tandem[<pid>]: counts sym=n sym=n ...` (nonzero only), if debug logging is on
/// (the crate root's exit handler adds dedup's and follow mode's summaries).
pub fn dump() {
    if !crate::log::enabled(crate::log::Level::Debug) {
        return;
    }
    struct Counts;
    impl core::fmt::Display for Counts {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("counts")?;
            for hook in Hook::ALL {
                let n = get(hook);
                if n != 0 {
                    f.write_char(' ')?;
                    f.write_str(hook.info().symbol.to_str().unwrap_or("?"))?;
                    write!(f, "={n}")?;
                }
            }
            Ok(())
        }
    }
    struct Totals;
    impl core::fmt::Display for Totals {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("totals")?;
            for kind in Kind::ALL {
                let n: u64 = Hook::ALL
                    .iter()
                    .filter(|h| h.info().kind == kind)
                    .map(|&h| get(h))
                    .sum();
                write!(f, " {}={n}", kind.name())?;
            }
            write!(
                f,
                " kernels={} captured={} failed_launches={} unknown_graph_launches={}",
                kernels_launched(),
                LAUNCH_CAPTURED.load(Ordering::Relaxed),
                LAUNCH_FAILED.load(Ordering::Relaxed),
                UNKNOWN_GRAPH_LAUNCHES.load(Ordering::Relaxed)
            )
        }
    }
    crate::log!(Debug, "{}", Counts);
    crate::log!(Debug, "{}", Totals);
}

/// How many calls this process made through the hooked driver variant `symbol`
/// (exact exported name, e.g. `cuLaunchKernel_ptsz`); `UINT64_MAX` if `symbol` is
/// not hooked. Declared in `include/tandem.h`.
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tandem_hook_count(symbol: *const c_char) -> u64 {
    if symbol.is_null() {
        return u64::MAX;
    }
    // SAFETY: non-null and NUL-terminated per this function's contract.
    let name = unsafe { CStr::from_ptr(symbol) };
    Hook::by_symbol(name.to_bytes()).map_or(u64::MAX, get)
}

/// Calls libtandem.so itself made to the real driver's function `symbol` (not
/// on the program's behalf): a hooked variant, or one of the unhooked functions
/// the shim uses for its own work; `UINT64_MAX` if the shim neither hooks nor
/// calls `symbol`. The driver saw `tandem_hook_count(symbol) +
/// tandem_driver_calls(symbol)` calls of a hooked variant, and the program's
/// own calls plus `tandem_driver_calls(symbol)` of any other.
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tandem_driver_calls(symbol: *const c_char) -> u64 {
    if symbol.is_null() {
        return u64::MAX;
    }
    // SAFETY: non-null and NUL-terminated per this function's contract.
    let name = unsafe { CStr::from_ptr(symbol) };
    let name = name.to_bytes();
    if let Some(h) = Hook::by_symbol(name) {
        return OWN[h as usize].load(Ordering::Relaxed);
    }
    Support::ALL
        .iter()
        .find(|s| s.symbol().to_bytes() == name)
        .map_or(u64::MAX, |&s| {
            SUPPORT_OWN[s as usize].load(Ordering::Relaxed)
        })
}

/// Kernels this process sent to the GPU: successful, not stream-captured
/// launches plus every kernel node of every graph launch. Declared in
/// `include/tandem.h`; compare with an independent count (CUPTI).
#[no_mangle]
pub extern "C" fn tandem_kernels_launched() -> u64 {
    kernels_launched()
}
