//! The one fake device, contexts (primary and created), error names, and the odds and ends of
//! the driver API (`cuInit`, `cuDriverGetVersion`, `cuGetExportTable`).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use crate::counts;
use crate::state::contexts::{current, set_current, PRIMARY_CTX};
use crate::state::memory::total_mem;
use crate::state::{self, lock};
use crate::types::*;

/// What `cuDriverGetVersion` reports (CUDA 13.0).
pub const DRIVER_VERSION: c_int = 13000;
const DEVICE_NAME: &CStr = c"Fake CUDA Device (tandem)";
const DEVICE_UUID: [u8; 16] = *b"tandem-fakecuda\0";
fn check_device(dev: CUdevice) -> CuResult<()> {
    if dev == 0 {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_DEVICE)
    }
}

pub fn init(flags: c_uint) -> CuResult<()> {
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !state::initialized() {
        // The real driver reads its environment (MPS included) here, once.
        counts::record_init_env();
    }
    state::set_initialized();
    Ok(())
}

/// # Safety
/// `version` must be NULL or valid for a write.
pub unsafe fn driver_get_version(version: *mut c_int) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    unsafe { write_out(version, DRIVER_VERSION) }
}

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn device_get(out: *mut CUdevice, ordinal: c_int) -> CuResult<()> {
    check_device(ordinal)?;
    // SAFETY: forwarded caller contract.
    unsafe { write_out(out, 0) }
}

/// # Safety
/// `count` must be NULL or valid for a write.
pub unsafe fn device_get_count(count: *mut c_int) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    unsafe { write_out(count, 1) }
}

/// # Safety
/// `name` must be NULL or valid for `len` bytes of writes.
pub unsafe fn device_get_name(name: *mut c_char, len: c_int, dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    let len = usize::try_from(len).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    if name.is_null() || len == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // As the real driver: copy at most len-1 bytes and always NUL-terminate.
    let bytes = DEVICE_NAME.to_bytes();
    let n = bytes.len().min(len - 1);
    // SAFETY: `name` is valid for `len` bytes (caller contract) and `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), name, n);
        name.add(n).write(0);
    }
    Ok(())
}

/// Attribute values of the fake device (an H100-like part). Unlisted attributes in range read 0.
fn attribute_value(attrib: c_int) -> Option<c_int> {
    let v = match attrib {
        1 => 1024,                                // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                            // MAX_BLOCK_DIM_X / Y
        4 => 64,                                  // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                            // MAX_GRID_DIM_X
        6 | 7 => 65535,                           // MAX_GRID_DIM_Y / Z
        8 => 49152,                               // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65536,                               // TOTAL_CONSTANT_MEMORY
        10 => 32,                                 // WARP_SIZE
        12 => 65536,                              // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,                          // CLOCK_RATE (kHz)
        15 => 1,                                  // GPU_OVERLAP
        16 => crate::shared::DEVICE_SMS as c_int, // MULTIPROCESSOR_COUNT
        19 => 1,                                  // CAN_MAP_HOST_MEMORY
        31 => 1,                                  // CONCURRENT_KERNELS
        33 => 0,                                  // PCI_BUS_ID
        39 => 2048,                               // MAX_THREADS_PER_MULTIPROCESSOR
        41 => 1,                                  // UNIFIED_ADDRESSING
        75 => 9,                                  // COMPUTE_CAPABILITY_MAJOR
        76 => 0,                                  // COMPUTE_CAPABILITY_MINOR
        81 => 233_472,                            // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65536,                              // MAX_REGISTERS_PER_MULTIPROCESSOR
        95 => 1,                                  // COOPERATIVE_LAUNCH
        97 => 232_448,                            // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        102 => 1,                                 // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
        103 => 1,                                 // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
        106 => 32,                                // MAX_BLOCKS_PER_MULTIPROCESSOR
        115 => 1,                                 // MEMORY_POOLS_SUPPORTED
        a if (1..=200).contains(&a) => 0,
        _ => return None,
    };
    Some(v)
}

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn device_get_attribute(out: *mut c_int, attrib: c_int, dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    let v = attribute_value(attrib).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    // SAFETY: forwarded caller contract.
    unsafe { write_out(out, v) }
}

/// # Safety
/// `bytes` must be NULL or valid for a write.
pub unsafe fn device_total_mem(bytes: *mut usize, dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    let total = usize::try_from(total_mem()).unwrap_or(usize::MAX);
    // SAFETY: forwarded caller contract.
    unsafe { write_out(bytes, total) }
}

/// `cuDeviceGetUuid` and `cuDeviceGetUuid_v2` (identical for a device that is no MIG instance).
///
/// # Safety
/// `uuid` must be NULL or valid for a write.
pub unsafe fn device_get_uuid(uuid: *mut CUuuid, dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    let bytes = DEVICE_UUID.map(|b| b as c_char);
    // SAFETY: forwarded caller contract.
    unsafe { write_out(uuid, CUuuid { bytes }) }
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
pub unsafe fn primary_ctx_retain(pctx: *mut Handle, dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    if pctx.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    st.contexts.primary_refs = st.contexts.primary_refs.saturating_add(1);
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(pctx, handle(PRIMARY_CTX)) }
}

pub fn primary_ctx_release(dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    let mut st = lock();
    if st.contexts.primary_refs == 0 {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    st.contexts.primary_refs -= 1;
    Ok(())
}

/// `cuCtxCreate_v2`: creates a context and makes it current on the calling thread.
///
/// # Safety
/// `pctx` must be NULL or valid for a write.
pub unsafe fn ctx_create(pctx: *mut Handle, flags: c_uint, dev: CUdevice) -> CuResult<()> {
    check_device(dev)?;
    // CU_CTX_SCHED_* (one of 0, 1, 2, 4 in the low 3 bits), MAP_HOST (0x8),
    // LMEM_RESIZE_TO_MAX (0x10), COREDUMP_ENABLE (0x20), USER_COREDUMP_ENABLE (0x40),
    // SYNC_MEMOPS (0x80).
    if pctx.is_null() || flags & !0xff != 0 || !matches!(flags & 0x7, 0 | 1 | 2 | 4) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    let ctx = st.new_handle();
    st.contexts.created.insert(ctx);
    set_current(ctx);
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(pctx, handle(ctx)) }
}

pub fn ctx_destroy(ctx: Handle) -> CuResult<()> {
    let ctx = key(ctx);
    let mut st = lock();
    if !st.contexts.created.remove(&ctx) {
        // Unknown, already destroyed, or the primary context (which only
        // cuDevicePrimaryCtxRelease may end).
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    if current() == ctx {
        set_current(0);
    }
    Ok(())
}

pub fn ctx_set_current(ctx: Handle) -> CuResult<()> {
    let ctx = key(ctx);
    if ctx != 0 {
        lock().contexts.check(ctx)?;
    }
    set_current(ctx);
    Ok(())
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
pub unsafe fn ctx_get_current(pctx: *mut Handle) -> CuResult<()> {
    let st = lock();
    let ctx = current();
    let ctx = if st.contexts.is_valid(ctx) { ctx } else { 0 };
    // SAFETY: forwarded caller contract.
    unsafe { write_out(pctx, handle(ctx)) }
}

/// # Safety
/// `dev` must be NULL or valid for a write.
pub unsafe fn ctx_get_device(dev: *mut CUdevice) -> CuResult<()> {
    lock().contexts.require_current()?;
    // SAFETY: forwarded caller contract.
    unsafe { write_out(dev, 0) }
}

/// `cuGetExportTable`: the fake has no private export tables.
///
/// # Safety
/// `pp` must be NULL or valid for a write.
pub unsafe fn get_export_table(pp: *mut *const c_void, id: *const CUuuid) -> CuResult<()> {
    if pp.is_null() || id.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, caller contract (16 bytes).
    let wanted = unsafe { id.read_unaligned() }.bytes.map(|b| b as u8);
    let table = if wanted == crate::callbacks::TABLE_ID {
        crate::callbacks::table()
    } else {
        None
    };
    // SAFETY: non-NULL, caller contract.
    unsafe { pp.write_unaligned(table.unwrap_or(std::ptr::null())) };
    table.map(|_| ()).ok_or(CUDA_ERROR_NOT_SUPPORTED)
}

/// (code, name, description) of every `CUresult` the fake knows by name.
const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        100,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        200,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid",
    ),
    (
        201,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        303,
        c"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
        c"shared object initialization failed",
    ),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        700,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// `cuGetErrorName` (`want_name`) and `cuGetErrorString`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn error_text(code: CUresult, out: *mut *const c_char, want_name: bool) -> CuResult<()> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let found = ERRORS.iter().find(|(c, _, _)| *c == code);
    let text = found.map_or(std::ptr::null(), |(_, name, desc)| {
        if want_name {
            name.as_ptr()
        } else {
            desc.as_ptr()
        }
    });
    // SAFETY: non-NULL, caller contract; the strings are 'static.
    unsafe { out.write_unaligned(text) };
    if found.is_some() {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}
