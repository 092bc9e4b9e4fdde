//! Running kernels: the ranges each touches checked, its effect applied, its duration placed
//! on its stream (and on the shared device, if any).

use crate::clock::{base_ns, now_ns};
use crate::counts;
use crate::state::memory::{device_ptr, Access, RangeFault};
use crate::state::modules::{KernelArgs, Op, Work};
use crate::state::streams::StreamKey;
use crate::state::{check_range, State};
use crate::types::*;

/// Bytes of `n` u32 words (`None` if that does not fit in `usize`).
fn words(n: u32) -> Option<usize> {
    usize::try_from(u64::from(n) * 4).ok()
}

/// The device ranges a kernel touches, with the access each needs.
fn footprint(w: &Work) -> Vec<(CUdeviceptr, usize, Access)> {
    match w.args {
        None => Vec::new(),
        Some(KernelArgs::Elementwise { ptr, n, .. }) => {
            // A range too large for the address space can never be mapped.
            vec![(ptr, words(n).unwrap_or(usize::MAX), Access::Write)]
        }
        Some(KernelArgs::Sum { out, input, n }) => vec![
            (input, words(n).unwrap_or(usize::MAX), Access::Read),
            (out, 4, Access::Write),
        ],
    }
}

/// Checks every range the kernel touches: `Unmapped` if any lies outside the device memory the
/// fake knows, else `Protected` if any lacks the access it needs.
fn check_work(st: &State, w: &Work) -> Result<(), RangeFault> {
    let mut protected = false;
    for (ptr, len, access) in footprint(w) {
        match check_range(st, ptr, len, access) {
            Ok(()) => {}
            Err(RangeFault::Unmapped) => return Err(RangeFault::Unmapped),
            Err(RangeFault::Protected) => protected = true,
        }
    }
    if protected {
        Err(RangeFault::Protected)
    } else {
        Ok(())
    }
}

/// Applies a kernel's effect. Call only after `check_work` passed under the same lock.
fn apply(w: &Work) {
    match w.args {
        None => {}
        Some(KernelArgs::Elementwise { ptr, n, value }) => {
            let base = device_ptr(ptr).cast::<u32>();
            for i in 0..n as usize {
                // SAFETY: `check_work` proved `[ptr, ptr + 4n)` lies in live, writable
                // fake-device memory, and the state lock held by the caller keeps it so.
                unsafe {
                    let p = base.add(i);
                    let v = match w.op {
                        Op::AddU32 => p.read_unaligned().wrapping_add(value),
                        Op::FillU32 => value,
                        Op::Noop | Op::SumU32 => continue,
                    };
                    p.write_unaligned(v);
                }
            }
        }
        Some(KernelArgs::Sum { out, input, n }) => {
            let src = device_ptr(input).cast::<u32>().cast_const();
            let mut sum = 0u32;
            for i in 0..n as usize {
                // SAFETY: `check_work` proved `[input, input + 4n)` lies in live, readable
                // fake-device memory (kept so by the caller's state lock).
                sum = sum.wrapping_add(unsafe { src.add(i).read_unaligned() });
            }
            // SAFETY: `check_work` proved `[out, out + 4)` lies in live, writable fake-device
            // memory (kept so by the caller's state lock).
            unsafe { device_ptr(out).cast::<u32>().write_unaligned(sum) };
        }
    }
}

/// Runs kernels in order on `stream`: effects applied now, durations queued on the stream.
///
/// A kernel with a range outside every allocation and mapped VMM range fails the launch with
/// `CUDA_ERROR_INVALID_VALUE` before anything runs. A kernel writing into memory mapped without
/// write access (or reading memory mapped without read access) behaves as on the real GPU: the
/// launch itself succeeds, the faulting kernel does not run, and the context gets the sticky
/// error `CUDA_ERROR_ILLEGAL_ADDRESS`, which every later context-bound call returns.
pub fn execute(st: &mut State, works: &[Work], stream: StreamKey) -> CuResult<()> {
    let mut faults = Vec::with_capacity(works.len());
    for w in works {
        match check_work(st, w) {
            Err(RangeFault::Unmapped) => return Err(CUDA_ERROR_INVALID_VALUE),
            r => faults.push(r.is_err()),
        }
    }
    let now = now_ns();
    for (w, faulted) in works.iter().zip(faults) {
        if st.sticky_error.is_none() {
            if faulted {
                st.sticky_error = Some(CUDA_ERROR_ILLEGAL_ADDRESS);
            } else {
                apply(w);
            }
        }
        let (start, end) = match crate::shared::device() {
            None => st.streams.enqueue(stream, now, w.duration_ns),
            Some(dev) => st
                .streams
                .enqueue_with(stream, now, w.duration_ns, |earliest, d| {
                    // The device timeline is in CLOCK_MONOTONIC ns; streams count from `base`
                    // (`earliest >= 0` local, so the absolute start is >= base).
                    let base = base_ns();
                    let at = earliest.saturating_add(base);
                    let (s, e) = if crate::shared::sm_mode() {
                        let n = crate::shared::DEVICE_SMS;
                        let allowed = w.sms.map_or(crate::shared::SmSet::first(n), |m| m.sms(n));
                        let (s, e, used) = dev.run_on_sms(at, d, w.blocks, &allowed);
                        counts::last_kernel_sms(used);
                        (s, e)
                    } else {
                        dev.run(at, d)
                    };
                    (s - base, e.saturating_sub(base))
                }),
        };
        counts::last_kernel(start, end);
    }
    counts::kernels_executed_add(works.len() as u64);
    Ok(())
}
