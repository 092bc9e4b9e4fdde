//! Path 2: programs that `dlopen("libcuda.so.1")` and `dlsym` its functions.
//!
//! The exported `dlsym` asks [`answer`] first. If it has an answer (a hooked driver
//! symbol looked up in the driver's handle), that is returned. Otherwise the call
//! is handed to glibc's `dlsym` by a *tail jump*, with the stack and argument
//! registers exactly as the caller left them: glibc finds the calling object from
//! the return address, so `dlsym(RTLD_NEXT, …)` keeps resolving relative to the
//! real caller rather than to libtandem.so.

use crate::table::Hook;
use core::ffi::{c_char, c_void, CStr};

/// Decides a `dlsym` call: a non-null result is the answer; null means "let
/// glibc's dlsym answer, as if we were not here".
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string, as `dlsym` requires.
unsafe extern "C" fn answer(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // Resolve glibc's dlsym before anything else: the tail jump reads it.
    crate::driver::real_dlsym();
    if symbol.is_null() || handle.is_null() || handle == libc::RTLD_NEXT {
        // RTLD_DEFAULT / RTLD_NEXT reach our exports by ordinary symbol order.
        return core::ptr::null_mut();
    }
    // SAFETY: non-null, NUL-terminated per dlsym's contract.
    let name = unsafe { CStr::from_ptr(symbol) };
    let Some(hook) = Hook::by_symbol(name.to_bytes()) else {
        return core::ptr::null_mut();
    };
    // An explicit handle: the caller's identity plays no part in this lookup.
    let found = crate::driver::lookup(handle, name);
    if found.is_null() || found.cast_const() == hook.export() {
        return found;
    }
    if !crate::driver::ensure_loaded() {
        return found;
    }
    if crate::driver::slot(hook) == found as usize {
        crate::log!(Trace, "dlsym({:?}) answered with the hook", name);
        hook.export().cast_mut()
    } else {
        // The symbol came from some other library than the driver we forward to.
        crate::log!(
            Debug,
            "dlsym({:?}) resolved outside the real driver; not hooked",
            name
        );
        found
    }
}

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
/// Interposes glibc's `dlsym`.
///
/// # Safety
/// As `dlsym(3)`.
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        // Keep the arguments; 16-byte stack alignment at the call.
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {answer}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        // Nothing to say: become glibc's dlsym, same stack, same return address.
        "2:",
        "jmp qword ptr [rip + {real}]",
        answer = sym answer,
        real = sym crate::driver::TANDEM_REAL_DLSYM,
    )
}

#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
/// Interposes glibc's `dlsym`.
///
/// # Safety
/// As `dlsym(3)`.
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "stp x29, x30, [sp, #-32]!",
        "mov x29, sp",
        "stp x0, x1, [sp, #16]",
        "bl {answer}",
        "mov x9, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x9, 2f",
        "mov x0, x9",
        "ret",
        "2:",
        "adrp x9, {real}",
        "ldr x9, [x9, #:lo12:{real}]",
        "br x9",
        answer = sym answer,
        real = sym crate::driver::TANDEM_REAL_DLSYM,
    )
}
