//! Per-hook call counts: one relaxed atomic add per hooked call.
//!
//! Counts are per process: a child after `fork` starts again from zero. With
//! `TANDEM_LOG=debug` they are printed at exit; `tandem_hook_count` reads them.

use crate::table::{Hook, Kind, HOOK_COUNT};
use core::ffi::{c_char, CStr};
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};

/// One counter per cache line, so threads hitting different hooks do not contend.
#[repr(align(128))]
struct Counter(AtomicU64);

static COUNTS: [Counter; HOOK_COUNT] = [const { Counter(AtomicU64::new(0)) }; HOOK_COUNT];

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
}

/// `tandem[<pid>]: counts sym=n sym=n ...` (nonzero only), if debug logging is on.
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
            Ok(())
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
