//! The steps a share or a map is made of: the caller's arguments checked,
//! the device and its granule found, a handle mapped at a fresh reservation.

use core::ffi::{c_char, c_int, CStr};

use tandem_proto::follow::{api, valid_name, MAX_REGION_LEN};

use crate::types::{CUdeviceptr, CUmemGenericAllocationHandle};
use crate::vmm::{self, Access, DriverError};

/// The smallest granule used (the VMM granularity measured on an H100).
const MIN_GRANULE: usize = 2 << 20;

/// The validated arguments of a share or map.
pub(super) struct Args {
    pub(super) name: Vec<u8>,
    pub(super) bytes: u64,
    pub(super) layout: [u8; 16],
}

/// A region size the API accepts, or INVALID (said).
pub(super) fn check_size(bytes: u64) -> Result<(), c_int> {
    if bytes == 0 || bytes > MAX_REGION_LEN {
        crate::log!(Warn, "follow: region size {bytes} is not in 1..=2^40 bytes");
        return Err(api::INVALID);
    }
    Ok(())
}

/// `bytes` rounded up to whole granules.
pub(super) fn span_of(bytes: u64, granule: usize) -> Result<usize, c_int> {
    let n = usize::try_from(bytes).map_err(|_| api::INVALID)?;
    Ok(n.div_ceil(granule) * granule)
}

/// A valid region name and its layout tag (zero when `layout` is null).
///
/// # Safety
/// `name` is null or a NUL-terminated string; `layout` is null or 16 readable bytes.
pub(super) unsafe fn name_and_layout(
    name: *const c_char,
    layout: *const u8,
) -> Result<(Vec<u8>, [u8; 16]), c_int> {
    if name.is_null() {
        return Err(api::INVALID);
    }
    // SAFETY: the caller passes a NUL-terminated string (the C API's contract).
    let name = unsafe { CStr::from_ptr(name) }.to_bytes();
    if !valid_name(name) {
        crate::log!(
            Warn,
            "follow: region name {:?} is not 1 to 56 printable ASCII characters without spaces",
            crate::log::String8(name)
        );
        return Err(api::INVALID);
    }
    let mut tag = [0u8; 16];
    if !layout.is_null() {
        // SAFETY: the caller passes 16 readable bytes (the C API's contract).
        tag.copy_from_slice(unsafe { core::slice::from_raw_parts(layout, 16) });
    }
    Ok((name.to_vec(), tag))
}

/// The calling thread's current context (as an address), its device, and
/// the device's granule.
pub(super) fn device_and_granule() -> Result<(usize, c_int, usize), c_int> {
    let ctx = match vmm::ctx_current() {
        Ok(c) if !c.is_null() => c as usize,
        Ok(_) => {
            crate::log!(Warn, "follow: no current CUDA context in this thread");
            return Err(api::INVALID);
        }
        Err(e) => return Err(driver_failed(e)),
    };
    let device = vmm::ctx_device().map_err(driver_failed)?;
    let granule = vmm::granularity(device).map_err(driver_failed)?;
    Ok((ctx, device, granule.max(MIN_GRANULE)))
}

pub(super) fn driver_failed(e: DriverError) -> c_int {
    crate::log!(Debug, "follow: {e}");
    api::DRIVER
}

/// Maps `h` (at least `span` bytes) at a fresh reservation with `access`:
/// the handle and the address. On failure nothing is left behind, `h`
/// released included.
pub(super) fn map_new(
    h: CUmemGenericAllocationHandle,
    span: usize,
    granule: usize,
    device: c_int,
    access: Access,
) -> vmm::Result<(CUmemGenericAllocationHandle, CUdeviceptr)> {
    let mapped = vmm::reserve(span, granule).and_then(|va| {
        vmm::map(va, span, h)
            .and_then(|()| vmm::set_access(va, span, device, access))
            .map(|()| va)
            .inspect_err(|_| {
                let _ = vmm::unmap(va, span);
                let _ = vmm::address_free(va, span);
            })
    });
    match mapped {
        Ok(va) => Ok((h, va)),
        Err(e) => {
            let _ = vmm::release(h);
            Err(e)
        }
    }
}
