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
