//! What a launch passes: its dimensions checked against the device's limits, and the kernel's
//! argument values copied out of `kernelParams` or `extra`.

use std::ffi::{c_uint, c_void};

use crate::state::modules::{Dims, KernelArgs, Op};
use crate::types::*;

/// Dynamic shared memory a function may use without opting in (48 KiB).
pub(crate) const MAX_DYNAMIC_SHARED: c_uint = 48 * 1024;
/// Shared memory a block may use once its function opted in
/// (`MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, the fake device's attribute 97).
pub(crate) const MAX_SHARED_OPTIN: c_uint = 232_448;

/// Validates launch dimensions against the fake device's limits (H100-like),
/// and its dynamic shared memory against what the function may use
/// (`max_dynamic`: 48 KiB unless it opted in with `cuFuncSetAttribute`).
pub fn check_dims(d: &Dims, max_dynamic: c_uint) -> CuResult<()> {
    let [gx, gy, gz] = d.grid;
    let [bx, by, bz] = d.block;
    let grid_ok = (1..=i32::MAX as u32).contains(&gx)
        && (1..=65535).contains(&gy)
        && (1..=65535).contains(&gz);
    let block_ok = (1..=1024).contains(&bx)
        && (1..=1024).contains(&by)
        && (1..=64).contains(&bz)
        && u64::from(bx) * u64::from(by) * u64::from(bz) <= 1024;
    if grid_ok && block_ok && d.shared <= max_dynamic {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

const CU_LAUNCH_PARAM_END: usize = 0x0;
pub(crate) const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x1;
pub(crate) const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x2;
/// How many (key, value) pairs of `extra` the fake reads before giving up on a missing END.
const MAX_EXTRA_PAIRS: usize = 64;
/// Packed argument buffer of `(CUdeviceptr, unsigned, unsigned)` with natural alignment.
const PACKED_ELEMENTWISE_SIZE: usize = 16;
/// Packed argument buffer of `(CUdeviceptr, CUdeviceptr, unsigned)` with natural alignment
/// (20 bytes of values, padded to the struct's 8-byte alignment).
const PACKED_SUM_SIZE: usize = 24;

/// Copies the argument values of a kernel out of `kernelParams` or `extra`.
///
/// # Safety
/// `params`, if non-NULL, must hold one valid pointer per kernel argument; `extra`, if
/// non-NULL, must be a `CU_LAUNCH_PARAM_END`-terminated array as in cuda.h.
pub unsafe fn decode_args(
    op: Op,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<Option<KernelArgs>> {
    if !params.is_null() && !extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if op == Op::Noop {
        return Ok(None);
    }
    if !params.is_null() {
        // SAFETY: `params` holds one pointer per argument (3 for these ops; caller contract);
        // each pointed-to value is read only after its NULL check.
        unsafe {
            let arg = |i: usize| params.add(i).read();
            return Ok(Some(if op == Op::SumU32 {
                KernelArgs::Sum {
                    out: read_in(arg(0).cast::<CUdeviceptr>())?,
                    input: read_in(arg(1).cast::<CUdeviceptr>())?,
                    n: read_in(arg(2).cast::<u32>())?,
                }
            } else {
                KernelArgs::Elementwise {
                    ptr: read_in(arg(0).cast::<CUdeviceptr>())?,
                    n: read_in(arg(1).cast::<u32>())?,
                    value: read_in(arg(2).cast::<u32>())?,
                }
            }));
        }
    }
    if extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut buffer: *const u8 = std::ptr::null();
    let mut size: Option<usize> = None;
    for i in 0..MAX_EXTRA_PAIRS {
        // SAFETY: `extra` is an END-terminated array of (key, value) pointers (caller
        // contract); we stop at END, so every index read is inside it.
        let k = unsafe { extra.add(2 * i).read() }.addr();
        if k == CU_LAUNCH_PARAM_END {
            break;
        }
        // SAFETY: as above: a non-END key is followed by its value.
        let v = unsafe { extra.add(2 * i + 1).read() };
        match k {
            CU_LAUNCH_PARAM_BUFFER_POINTER => buffer = v.cast_const().cast(),
            // SAFETY: the value of BUFFER_SIZE points at a size_t (cuda.h).
            CU_LAUNCH_PARAM_BUFFER_SIZE => size = Some(unsafe { read_in(v.cast::<usize>()) }?),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    let need = if op == Op::SumU32 {
        PACKED_SUM_SIZE
    } else {
        PACKED_ELEMENTWISE_SIZE
    };
    match size {
        Some(s) if !buffer.is_null() && s >= need => {}
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    // SAFETY: `buffer` is non-NULL and the caller declared it at least `need` bytes long; every
    // read below ends at or before `need`.
    unsafe {
        Ok(Some(if op == Op::SumU32 {
            KernelArgs::Sum {
                out: buffer.cast::<u64>().read_unaligned(),
                input: buffer.add(8).cast::<u64>().read_unaligned(),
                n: buffer.add(16).cast::<u32>().read_unaligned(),
            }
        } else {
            KernelArgs::Elementwise {
                ptr: buffer.cast::<u64>().read_unaligned(),
                n: buffer.add(8).cast::<u32>().read_unaligned(),
                value: buffer.add(12).cast::<u32>().read_unaligned(),
            }
        }))
    }
}
