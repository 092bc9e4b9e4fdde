//! The exported driver entry points: the top of the shim.
//!
//! The one list of hooked functions (`crate::table::list`) expands here into
//! one exported C function per variant (path 1: programs linked against
//! libcuda) and [`EXPORTS`], their addresses, which `dlsym` (path 2) and
//! `cuGetProcAddress` (path 3) answer with. Each export counts the call
//! (`crate::counters`), loads the session (`crate::client`), stays out of
//! dedup's remaps (`crate::dedup::quiesce`) and forwards to the real driver
//! (`crate::driver`) or to the interposed operation its entry names, called as
//! `operation(hook, client, real, args...)` where `client` is the coordinator
//! session ([`crate::client::Client`]: `None` without one).

use core::ffi::c_void;

use crate::table::{hook_list, Hook, HOOK_COUNT};

// The modules the list's `=> module::function` entries name, resolved here.
use crate::{capture, client, graphs, launch, memops, proc_address};

/// The address of one of our exported hook functions.
#[derive(Clone, Copy)]
pub struct HookFn(pub *const c_void);

// SAFETY: a code address is immutable and valid from every thread.
unsafe impl Sync for HookFn {}

/// Expands the list into the exports and their addresses, in table order.
macro_rules! exports {
    ($(
        $sym:ident ($gpa:literal, $since:literal, $stream:ident) $kind:ident
            fn($($arg:ident : $ty:ty),* $(,)?) $(=> $custom:path)?;
    )*) => {
        /// The exported function of each hooked variant, in table order.
        pub static EXPORTS: [HookFn; HOOK_COUNT] = [$(
            HookFn(exports::$sym as *const c_void),
        )*];

        /// The exported driver entry points.
        pub mod exports {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use crate::types::*;
            #[allow(unused_imports)]
            use core::ffi::{c_char, c_int, c_uint, c_ushort, c_void};
            $(
                #[doc = concat!("Interposes `", stringify!($sym), "`.")]
                ///
                /// # Safety
                /// Called by the host with the argument contract of the CUDA driver
                /// function of the same name; the arguments are passed on unchanged.
                #[no_mangle]
                pub unsafe extern "C" fn $sym($($arg: $ty),*) -> crate::types::CuResult {
                    const ID: Hook = Hook::$sym;
                    let Some(real) = crate::driver::real(ID) else {
                        return crate::driver::unavailable(ID);
                    };
                    type Real = unsafe extern "C" fn($($ty),*) -> crate::types::CuResult;
                    // SAFETY: the slot for ID only ever holds the real driver's own
                    // `$sym` (or what its cuGetProcAddress returned for that variant),
                    // whose C signature is the one declared in this table.
                    let real = unsafe { ::core::mem::transmute::<usize, Real>(real) };
                    crate::counters::hit(ID);
                    // One load: the coordinator session, or None (fail-open). The
                    // first hooked call of a process connects (cold, bounded).
                    let client = crate::client::current();
                    const KIND: crate::table::Kind = crate::table::Kind::$kind;
                    // Submissions stay out of dedup's remaps (a relaxed load when
                    // this process has no dedup-backed memory; nothing for other kinds).
                    let bracket = if KIND.submits() {
                        crate::dedup::quiesce::Bracket::enter()
                    } else {
                        None
                    };
                    let rc = exports!(@call ID client real ($($arg),*) $($custom)?);
                    drop(bracket);
                    if KIND.reports_faults() && rc == crate::types::CuResult::ILLEGAL_ADDRESS {
                        crate::dedup::illegal_address();
                        crate::follow::illegal_address();
                    }
                    rc
                }
            )*
        }
    };
    (@call $id:ident $client:ident $real:ident ($($arg:ident),*)) => {{
        let _ = $client;
        // SAFETY: forwarding the caller's arguments, unchanged, to the same variant.
        unsafe { $real($($arg),*) }
    }};
    (@call $id:ident $client:ident $real:ident ($($arg:ident),*) $custom:path) => {
        // SAFETY: the custom body receives the session, the real function and the
        // caller's arguments.
        unsafe { $custom($id, $client, $real, $($arg),*) }
    };
}

hook_list!(exports);

impl Hook {
    /// The address of this variant's exported function: what `dlsym` and
    /// `cuGetProcAddress` answer with.
    pub fn export(self) -> *const c_void {
        EXPORTS[self as usize].0
    }

    /// The hook whose exported function lives at `addr`, if any.
    pub fn by_export_address(addr: *const c_void) -> Option<Hook> {
        Hook::ALL.iter().copied().find(|h| h.export() == addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_export_is_found_by_its_address() {
        for h in Hook::ALL {
            assert_eq!(Hook::by_export_address(h.export()), Some(h));
        }
        assert_eq!(Hook::by_export_address(core::ptr::null()), None);
    }

    /// Copies the CUDA runtime issues from any thread run in the submission
    /// bracket: one issued while a remap holds the process reaches the driver
    /// only once the remap is over. A device-to-host async copy (PyTorch's
    /// `.cpu()`, `.item()`) let through would read memory the remap had
    /// unmapped, and a 2D copy write into it.
    #[test]
    fn copies_issued_during_a_remap_reach_the_driver_after_it() {
        use crate::dedup::quiesce;
        use crate::types::{CUdeviceptr, CUstream, CuResult, Memcpy2D, MEMORYTYPE_DEVICE};
        use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
        use std::time::Duration;

        static IN_REMAP: AtomicBool = AtomicBool::new(false);
        static CALLS: AtomicU32 = AtomicU32::new(0);
        static OVERLAPS: AtomicU32 = AtomicU32::new(0);
        fn called() -> CuResult {
            CALLS.fetch_add(1, Ordering::SeqCst);
            if IN_REMAP.load(Ordering::SeqCst) {
                OVERLAPS.fetch_add(1, Ordering::SeqCst);
            }
            CuResult::SUCCESS
        }
        type D2hAsync = unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize, CUstream) -> CuResult;
        type Copy2d = unsafe extern "C" fn(*const Memcpy2D) -> CuResult;
        unsafe extern "C" fn driver_d2h_async(
            _: *mut c_void,
            _: CUdeviceptr,
            _: usize,
            _: CUstream,
        ) -> CuResult {
            called()
        }
        unsafe extern "C" fn driver_2d(_: *const Memcpy2D) -> CuResult {
            called()
        }

        let _serial = quiesce::TEST_SERIAL
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        crate::client::never_connect();
        quiesce::activate();
        let hooked = |sym: &str| {
            Hook::by_symbol(sym.as_bytes()).unwrap_or_else(|| panic!("{sym} is not hooked"))
        };
        let (d2h, c2d) = (hooked("cuMemcpyDtoHAsync_v2"), hooked("cuMemcpy2D_v2"));
        let before = [
            crate::driver::replace(d2h, driver_d2h_async as *const () as usize),
            crate::driver::replace(c2d, driver_2d as *const () as usize),
        ];
        // SAFETY: each export has its driver function's C signature.
        let (d2h_export, c2d_export) = unsafe {
            (
                core::mem::transmute::<*const c_void, D2hAsync>(d2h.export()),
                core::mem::transmute::<*const c_void, Copy2d>(c2d.export()),
            )
        };
        // SAFETY: all integers and raw pointers: zero is a valid value of each.
        let mut desc: Memcpy2D = unsafe { core::mem::zeroed() };
        (desc.dst_memory_type, desc.dst_device) = (MEMORYTYPE_DEVICE, 0x7e00_0000_0000);
        (desc.dst_pitch, desc.width_in_bytes, desc.height) = (4096, 256, 4);
        let mut host = [0u8; 64];
        let host = host.as_mut_ptr();

        let calls: [&dyn Fn() -> CuResult; 2] = [
            // SAFETY: the export forwards to `driver_d2h_async`, which reads nothing.
            &|| unsafe { d2h_export(host.cast(), 0x7e00_0000_0000, 64, core::ptr::null_mut()) },
            // SAFETY: a live descriptor; the export forwards to `driver_2d`.
            &|| unsafe { c2d_export(&desc) },
        ];
        for call in calls {
            let (inside_tx, inside_rx) = std::sync::mpsc::channel();
            let remap = std::thread::spawn(move || {
                quiesce::exclusive::<_, ()>(
                    false,
                    || Ok(()),
                    || {
                        IN_REMAP.store(true, Ordering::SeqCst);
                        inside_tx.send(()).unwrap();
                        std::thread::sleep(Duration::from_millis(50));
                        IN_REMAP.store(false, Ordering::SeqCst);
                    },
                )
                .unwrap();
            });
            inside_rx.recv().unwrap();
            assert_eq!(call(), CuResult::SUCCESS);
            remap.join().unwrap();
        }
        crate::driver::replace(d2h, before[0]);
        crate::driver::replace(c2d, before[1]);
        assert_eq!(CALLS.load(Ordering::SeqCst), 2, "both reached the driver");
        assert_eq!(
            OVERLAPS.load(Ordering::SeqCst),
            0,
            "a copy reached the driver while the remap held the process"
        );
    }
}
