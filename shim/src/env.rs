//! Environment access for cold paths (constructor, first driver use).
//!
//! Never called on a hook's fast path (contract 3: no `getenv` there).

use core::ffi::CStr;

/// The value of `name`, borrowed from the process environment.
///
/// The slice lives as long as nobody calls `setenv`/`putenv` for that name;
/// callers copy what they keep.
pub fn var(name: &CStr) -> Option<&'static [u8]> {
    // SAFETY: `name` is NUL-terminated; getenv returns NULL or a NUL-terminated string.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: non-NULL getenv results are NUL-terminated strings in the environment block.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes())
    }
}

/// `name` as a number in `min..=max`, else `default` (warned about when set
/// to something else).
pub fn u64_in(name: &CStr, default: u64, min: u64, max: u64) -> u64 {
    let Some(v) = crate::env::var(name) else {
        return default;
    };
    match core::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        Some(n) if (min..=max).contains(&n) => n,
        _ => {
            crate::log!(
                Warn,
                "{:?}={:?} is not a number in {min}..={max}; using {default}",
                name,
                crate::log::String8(v)
            );
            default
        }
    }
}
