//! Events: a record captures the simulated time at which the stream reaches it.

use std::ffi::{c_float, c_uint};

use crate::clock::{now_ns, wait_until};
use crate::state::events::Event;
use crate::state::lock;
use crate::types::*;

/// `CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS`.
const VALID_FLAGS: c_uint = 0x1 | 0x2 | 0x4;
const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;
const CU_EVENT_INTERPROCESS: c_uint = 0x4;

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn event_create(out: *mut Handle, flags: c_uint) -> CuResult<()> {
    let interprocess_without_disable_timing =
        flags & CU_EVENT_INTERPROCESS != 0 && flags & CU_EVENT_DISABLE_TIMING == 0;
    if out.is_null() || flags & !VALID_FLAGS != 0 || interprocess_without_disable_timing {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    st.require_ctx()?;
    let h = st.new_handle();
    st.events.events.insert(
        h,
        Event {
            flags,
            completes_at: None,
        },
    );
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(h)) }
}

pub fn event_destroy(ev: Handle) -> CuResult<()> {
    let mut st = lock();
    st.contexts.require_current()?;
    match st.events.events.remove(&key(ev)) {
        Some(_) => Ok(()),
        None => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

pub fn event_record(ev: Handle, stream: Handle, per_thread_default: bool) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    st.events.get(ev)?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    let (_, at) = st.streams.enqueue(s, now_ns(), 0);
    if let Some(e) = st.events.events.get_mut(&key(ev)) {
        e.completes_at = Some(at);
    }
    Ok(())
}

/// `cuEventQuery`: an event never recorded counts as complete, as in CUDA.
pub fn event_query(ev: Handle) -> CuResult<()> {
    let st = lock();
    st.require_ctx()?;
    match st.events.get(ev)?.completes_at {
        Some(t) if now_ns() < t => Err(CUDA_ERROR_NOT_READY),
        _ => Ok(()),
    }
}

pub fn event_synchronize(ev: Handle) -> CuResult<()> {
    let t = {
        let st = lock();
        st.require_ctx()?;
        st.events.get(ev)?.completes_at.unwrap_or(0)
    };
    wait_until(t);
    lock().check_sticky()
}

/// Milliseconds from `start` to `end`, or why there is no answer yet. Pure.
fn elapsed_ms(start: Option<u64>, end: Option<u64>, now: u64) -> CuResult<f32> {
    let (Some(s), Some(e)) = (start, end) else {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    };
    if now < s || now < e {
        return Err(CUDA_ERROR_NOT_READY);
    }
    let ns = e as f64 - s as f64;
    Ok((ns / 1e6) as f32)
}

/// # Safety
/// `ms` must be NULL or valid for a write.
pub unsafe fn event_elapsed_time(ms: *mut c_float, start: Handle, end: Handle) -> CuResult<()> {
    if ms.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let st = lock();
    st.require_ctx()?;
    let (s, e) = (st.events.get(start)?, st.events.get(end)?);
    if (s.flags | e.flags) & CU_EVENT_DISABLE_TIMING != 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    let v = elapsed_ms(s.completes_at, e.completes_at, now_ns())?;
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(ms, v) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_needs_both_recorded_and_complete() {
        assert_eq!(
            elapsed_ms(None, Some(5), 10),
            Err(CUDA_ERROR_INVALID_HANDLE)
        );
        assert_eq!(elapsed_ms(Some(5), Some(20), 10), Err(CUDA_ERROR_NOT_READY));
        assert_eq!(
            elapsed_ms(Some(1_000_000), Some(3_500_000), 4_000_000),
            Ok(2.5)
        );
    }
}
