//! The driver's launch callbacks, as the real driver offers them to its own tools and as
//! libsmctrl (Bakita and Anderson, RTAS 2023) and LithOS use them to keep a launch off some
//! SMs (issue 23): undocumented, so the fake follows what those projects rely on, and tandem's
//! capability probe must treat anything else as absent.
//!
//! * `cuGetExportTable` with [`TABLE_ID`] gives a table of function pointers; entry 3 is
//!   `subscribe(uint32_t *handle, callback, void *user)`, entry 6 is `enable(uint32_t on,
//!   uint32_t handle, int domain, int cbid)`; the other entries answer
//!   `CUDA_ERROR_NOT_SUPPORTED` here.
//! * An enabled subscription of domain [`QMD_DOMAIN`], id [`QMD_PRE_UPLOAD`] is called before
//!   each direct launch (`cuLaunchKernel` and its siblings, captured ones too; a graph's nodes
//!   are not: the fake builds no descriptor for them) as `callback(user, domain, cbid, params)`.
//!   `params` is a block of 8-byte words whose first 4 bytes are its size (48), and whose word 4
//!   points at the launch's descriptor (its QMD/TMD), 512 bytes here, zero but for its version
//!   byte at offset 72 ([`descriptor_version`]: `FAKECUDA_QMD_VERSION`, default `0x40`, the
//!   Hopper layout) and the launch's grid and block where NVIDIA's QMD headers keep them
//!   (open-gpu-doc `clcbc0qmd.h`): from version `0x40` (V04) the grid's width, height and depth
//!   at offsets 128 (32 bits), 132 and 136 (16 bits), the block's at 144, 146 and 148, and
//!   `QMD_TYPE` `GRID_CTA` (2) in bits 23-25 of the first word; before it (V03) the grid at 48,
//!   52 and 56 and the block at 74, 76 and 78.
//! * After the callbacks, the descriptor's TPC disable mask decides the SMs the kernel may use
//!   ([`disabled_tpcs`]): from version `0x40`, bits of TPCs 0-63 at offsets 304 and 308 and of TPCs
//!   64-127 at 312 and 316, honoured only with bit 31 of the descriptor's first word set; from
//!   `0x16`, TPCs 0-63 at 84 and 88. TPC `k` is SMs `2k` and `2k + 1`. A launch whose mask
//!   leaves no SM fails with `CUDA_ERROR_INVALID_VALUE`.
//!
//! `FAKECUDA_LAUNCH_CALLBACKS=0` takes the table away (`cuGetExportTable` answers
//! `CUDA_ERROR_NOT_SUPPORTED`, as for every other table id): the probe's "missing callback".

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

#[cfg(test)]
use crate::shared::SmSet;
use crate::shared::{TpcMask, DEVICE_SMS};
use crate::types::*;

/// The callback table's id (libsmctrl's `callback_funcs_id`).
pub const TABLE_ID: [u8; 16] = [
    0x2c, 0x8e, 0x0a, 0xd8, 0x07, 0x10, 0xab, 0x4e, 0x90, 0xdd, 0x54, 0x71, 0x9f, 0xe5, 0xf7, 0x4b,
];
/// The domain and id of the callback before a launch's descriptor is uploaded.
pub const QMD_DOMAIN: c_int = 0xb;
/// See [`QMD_DOMAIN`].
pub const QMD_PRE_UPLOAD: c_int = 0x1;
/// Bytes of the descriptor the fake builds.
pub const DESCRIPTOR_BYTES: usize = 512;

/// A launch callback.
pub type Callback = unsafe extern "C" fn(*mut c_void, c_int, c_int, *const c_void);

#[derive(Clone, Copy)]
struct Subscription {
    callback: Callback,
    user: usize,
    enabled: bool,
}

static SUBSCRIPTIONS: Mutex<Vec<Subscription>> = Mutex::new(Vec::new());
/// Subscriptions enabled, kept with [`SUBSCRIPTIONS`] (under its lock): a launch with none
/// enabled, every launch of every other test, pays one load, not the lock.
static ENABLED: AtomicUsize = AtomicUsize::new(0);

/// Whether the table is offered (`FAKECUDA_LAUNCH_CALLBACKS` is not `0`; read once).
fn offered() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("FAKECUDA_LAUNCH_CALLBACKS").is_none_or(|v| v != "0"))
}

/// The version byte of the descriptors the fake builds (`FAKECUDA_QMD_VERSION`, decimal or
/// `0x` hex; default `0x40`; read once).
pub fn descriptor_version() -> u8 {
    static V: OnceLock<u8> = OnceLock::new();
    *V.get_or_init(|| {
        let v = std::env::var("FAKECUDA_QMD_VERSION").unwrap_or_default();
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => u8::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        };
        parsed.unwrap_or(0x40)
    })
}

fn subscriptions() -> std::sync::MutexGuard<'static, Vec<Subscription>> {
    SUBSCRIPTIONS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Entry 3.
unsafe extern "C" fn subscribe(
    handle: *mut u32,
    callback: Option<Callback>,
    user: *mut c_void,
) -> CUresult {
    let Some(callback) = callback else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if handle.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut subs = subscriptions();
    subs.push(Subscription {
        callback,
        user: user as usize,
        enabled: false,
    });
    let id = u32::try_from(subs.len()).unwrap_or(u32::MAX);
    // SAFETY: non-NULL, the caller's out-pointer.
    unsafe { handle.write_unaligned(id) };
    CUDA_SUCCESS
}

/// Entry 6.
extern "C" fn enable(on: u32, handle: u32, domain: c_int, cbid: c_int) -> CUresult {
    let mut subs = subscriptions();
    let Some(s) = (handle as usize)
        .checked_sub(1)
        .and_then(|i| subs.get_mut(i))
    else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if (domain, cbid) != (QMD_DOMAIN, QMD_PRE_UPLOAD) {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if s.enabled != (on != 0) {
        s.enabled = on != 0;
        if s.enabled {
            ENABLED.fetch_add(1, Ordering::Relaxed);
        } else {
            ENABLED.fetch_sub(1, Ordering::Relaxed);
        }
    }
    CUDA_SUCCESS
}

/// Every other entry.
extern "C" fn not_supported() -> CUresult {
    CUDA_ERROR_NOT_SUPPORTED
}

/// The table `cuGetExportTable` gives for [`TABLE_ID`], or `None` when it is not offered.
pub fn table() -> Option<*const c_void> {
    static TABLE: OnceLock<[usize; 8]> = OnceLock::new();
    if !offered() {
        return None;
    }
    let t = TABLE.get_or_init(|| {
        let mut t = [not_supported as *const () as usize; 8];
        t[3] = subscribe as *const () as usize;
        t[6] = enable as *const () as usize;
        t
    });
    Some(t.as_ptr().cast())
}

fn word(d: &[u8; DESCRIPTOR_BYTES], off: usize) -> u128 {
    u128::from(u32::from_ne_bytes([
        d[off],
        d[off + 1],
        d[off + 2],
        d[off + 3],
    ]))
}

/// A descriptor's TPC disable mask (see the module docs); `None`: no mask (none set, not
/// enabled, or a version without one).
pub fn disabled_tpcs(d: &[u8; DESCRIPTOR_BYTES]) -> Option<TpcMask> {
    let ver = d[72];
    let disabled = if ver >= 0x40 {
        if word(d, 0) >> 31 == 0 {
            return None;
        }
        word(d, 304) | word(d, 308) << 32 | word(d, 312) << 64 | word(d, 316) << 96
    } else if ver >= 0x16 {
        word(d, 84) | word(d, 88) << 32
    } else {
        return None;
    };
    (disabled != 0).then_some(TpcMask(disabled))
}

/// The SMs of a device of `sms` SMs a descriptor's mask leaves; `None`: no mask.
#[cfg(test)]
fn allowed_sms(d: &[u8; DESCRIPTOR_BYTES], sms: u32) -> Option<SmSet> {
    disabled_tpcs(d).map(|m| m.sms(sms))
}

/// Runs the enabled launch callbacks on a fresh descriptor; the TPCs the launch may not use
/// (`None`: it may use all). Call without the state lock held: a callback may call the driver.
pub fn before_launch(grid: [u32; 3], block: [u32; 3]) -> CuResult<Option<TpcMask>> {
    if ENABLED.load(Ordering::Relaxed) == 0 {
        return Ok(None);
    }
    let subs: Vec<Subscription> = subscriptions()
        .iter()
        .filter(|s| s.enabled)
        .copied()
        .collect();
    if subs.is_empty() {
        return Ok(None);
    }
    let mut desc = Box::new([0u8; DESCRIPTOR_BYTES]);
    describe(&mut desc, descriptor_version(), grid, block);
    let params: [u64; 6] = [48, 0, 0, 0, desc.as_mut_ptr() as u64, 0];
    for s in subs {
        // SAFETY: the subscriber gave this function for this call shape; `params` and the
        // descriptor it points at live across the call.
        unsafe {
            (s.callback)(
                s.user as *mut c_void,
                QMD_DOMAIN,
                QMD_PRE_UPLOAD,
                params.as_ptr().cast(),
            );
        }
    }
    match disabled_tpcs(&desc) {
        Some(m) if m.leaves_none(DEVICE_SMS) => {
            eprintln!("fake libcuda: a launch's TPC mask leaves it no SM");
            Err(CUDA_ERROR_INVALID_VALUE)
        }
        other => Ok(other),
    }
}

/// Writes a descriptor's version and the launch's grid and block where that version keeps them
/// (the module's docs).
fn describe(d: &mut [u8; DESCRIPTOR_BYTES], version: u8, grid: [u32; 3], block: [u32; 3]) {
    let (at_grid, at_block) = if version >= 0x40 {
        d[0..4].copy_from_slice(&(2u32 << 23).to_ne_bytes());
        ([128, 132, 136], [144, 146, 148])
    } else {
        ([48, 52, 56], [74, 76, 78])
    };
    d[at_grid[0]..at_grid[0] + 4].copy_from_slice(&grid[0].to_ne_bytes());
    let halves = [(at_grid[1], grid[1]), (at_grid[2], grid[2])];
    for (at, v) in halves.into_iter().chain(at_block.into_iter().zip(block)) {
        d[at..at + 2].copy_from_slice(&(v as u16).to_ne_bytes());
    }
    d[72] = version;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// TPCs the test callback disables on this thread's launches (0: leaves them alone).
        static OFF_TPCS: Cell<u32> = const { Cell::new(0) };
        static SEEN_VERSION: Cell<u8> = const { Cell::new(0) };
    }

    /// Disables TPCs `0..OFF_TPCS` on a Hopper descriptor, as a shim would: only on the
    /// thread that asked, so the other tests' launches are untouched.
    unsafe extern "C" fn mask_tpcs(_: *mut c_void, domain: c_int, cbid: c_int, p: *const c_void) {
        assert_eq!((domain, cbid), (QMD_DOMAIN, QMD_PRE_UPLOAD));
        let off = OFF_TPCS.with(Cell::get);
        // SAFETY: the fake's parameter block: 6 words, word 4 its 512-byte descriptor.
        unsafe {
            let words = p.cast::<u64>();
            assert_eq!(words.cast::<u32>().read(), 48);
            let d = words.add(4).read() as *mut u8;
            SEEN_VERSION.with(|v| v.set(d.add(72).read()));
            if off == 0 {
                return;
            }
            let mask = (1u128 << off) - 1;
            for (i, o) in [304usize, 308, 312, 316].into_iter().enumerate() {
                d.add(o)
                    .cast::<u32>()
                    .write_unaligned((mask >> (32 * i)) as u32);
            }
            let w0 = d.cast::<u32>();
            w0.write_unaligned(w0.read_unaligned() | 0x8000_0000);
        }
    }

    #[test]
    fn a_subscribed_callback_masks_the_launches_it_sees() {
        let t = table().expect("offered by default").cast::<usize>();
        // SAFETY: the table has 8 entries; entries 3 and 6 have these types.
        let (sub, en) = unsafe {
            (
                std::mem::transmute::<
                    usize,
                    unsafe extern "C" fn(*mut u32, Option<Callback>, *mut c_void) -> CUresult,
                >(t.add(3).read()),
                std::mem::transmute::<usize, extern "C" fn(u32, u32, c_int, c_int) -> CUresult>(
                    t.add(6).read(),
                ),
            )
        };
        let mut h = 0u32;
        // SAFETY: a valid out-pointer and callback.
        let rc = unsafe { sub(&mut h, Some(mask_tpcs), std::ptr::null_mut()) };
        assert_eq!(rc, CUDA_SUCCESS);
        assert_eq!(
            en(1, h, 3, 0x36),
            CUDA_ERROR_NOT_SUPPORTED,
            "only the descriptor callback"
        );
        assert_eq!(
            en(1, h + 100, QMD_DOMAIN, QMD_PRE_UPLOAD),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(en(1, h, QMD_DOMAIN, QMD_PRE_UPLOAD), CUDA_SUCCESS);
        OFF_TPCS.with(|c| c.set(4));
        let allowed = before_launch([4, 1, 1], [32, 1, 1])
            .unwrap()
            .expect("a mask")
            .sms(DEVICE_SMS);
        assert_eq!(SEEN_VERSION.with(Cell::get), 0x40);
        assert_eq!(allowed.len(), DEVICE_SMS - 8);
        assert!((0..8).all(|sm| !allowed.contains(sm)) && allowed.contains(8));
        OFF_TPCS.with(|c| c.set(0));
        assert_eq!(
            before_launch([4, 1, 1], [32, 1, 1]).unwrap(),
            None,
            "no mask written: every SM"
        );
        OFF_TPCS.with(|c| c.set(66));
        assert_eq!(
            before_launch([4, 1, 1], [32, 1, 1]),
            Err(CUDA_ERROR_INVALID_VALUE),
            "no SM left"
        );
        OFF_TPCS.with(|c| c.set(0));
        assert_eq!(en(0, h, QMD_DOMAIN, QMD_PRE_UPLOAD), CUDA_SUCCESS);
    }

    #[test]
    fn descriptors_carry_the_launch_where_the_qmd_headers_put_it() {
        let u16_at = |d: &[u8; DESCRIPTOR_BYTES], at: usize| u16::from_ne_bytes([d[at], d[at + 1]]);
        let u32_at = |d: &[u8; DESCRIPTOR_BYTES], at: usize| word(d, at) as u32;
        let mut d = [0u8; DESCRIPTOR_BYTES];
        describe(&mut d, 0x40, [70_000, 3, 2], [128, 2, 1]);
        assert_eq!(
            (u32_at(&d, 128), u16_at(&d, 132), u16_at(&d, 136)),
            (70_000, 3, 2)
        );
        assert_eq!(
            (u16_at(&d, 144), u16_at(&d, 146), u16_at(&d, 148)),
            (128, 2, 1)
        );
        assert_eq!((u32_at(&d, 0) >> 23) & 7, 2, "QMD_TYPE_GRID_CTA");
        assert_eq!(d[72], 0x40);
        let mut a = [0u8; DESCRIPTOR_BYTES];
        describe(&mut a, 0x30, [70_000, 3, 2], [128, 2, 1]);
        assert_eq!(
            (u32_at(&a, 48), u16_at(&a, 52), u16_at(&a, 56)),
            (70_000, 3, 2)
        );
        assert_eq!(
            (u16_at(&a, 74), u16_at(&a, 76), u16_at(&a, 78)),
            (128, 2, 1)
        );
        assert_eq!(u32_at(&a, 0), 0);
    }

    #[test]
    fn masks_are_read_where_each_descriptor_version_keeps_them() {
        let mut d = [0u8; DESCRIPTOR_BYTES];
        d[72] = 0x40;
        d[304] = 0b11; // TPCs 0 and 1
        assert_eq!(allowed_sms(&d, 132), None, "Hopper's needs its enable bit");
        d[3] = 0x80;
        assert_eq!(allowed_sms(&d, 132).unwrap().len(), 128);
        d[312] = 1; // TPC 64: SMs 128 and 129
        let s = allowed_sms(&d, 132).unwrap();
        assert!(!s.contains(128) && !s.contains(129) && s.contains(130));
        assert!(!TpcMask(u128::MAX >> 63).leaves_none(132), "TPC 65 left");
        assert!(TpcMask(u128::MAX >> 62).leaves_none(132));
        let mut a = [0u8; DESCRIPTOR_BYTES];
        a[72] = 0x20;
        a[84] = 0b100; // TPC 2: SMs 4 and 5
        let s = allowed_sms(&a, 108).unwrap();
        assert_eq!(s.len(), 106);
        assert!(!s.contains(4) && !s.contains(5));
        a[72] = 0x06;
        assert_eq!(allowed_sms(&a, 108), None, "a version without a mask");
    }
}
