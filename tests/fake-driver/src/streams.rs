//! Simulated device time: every stream keeps `ready_at`, the monotonic time (ns) at which all the
//! work queued on it so far is done. Work starts at `max(now, ready_at, implicit waits)` and ends
//! its duration later; waiting (synchronize) sleeps on the real monotonic clock until then.
//!
//! Default streams follow CUDA: stream 0 in a legacy function is the legacy default stream,
//! stream 0 in a `_ptsz`/`_ptds` function is the calling thread's per-thread default stream, and
//! `CU_STREAM_LEGACY` / `CU_STREAM_PER_THREAD` name those explicitly. The legacy stream
//! implicitly synchronises with every blocking stream (user streams created without
//! `CU_STREAM_NON_BLOCKING`, and the per-thread default streams): work on it waits for all of
//! them, and their later work waits for it.
//!
//! Stream priorities (`cuStreamCreateWithPriority`) are recorded and reported, with the range of
//! an H100 (least 0, greatest -5); the simulated device does not schedule by them.

use std::ffi::{c_int, c_uint};

use crate::clock::{now_ns, wait_until};
use crate::state::lock;
use crate::state::streams::{UserStream, GREATEST_PRIORITY, LEAST_PRIORITY};
use crate::types::*;

/// `CU_STREAM_NON_BLOCKING`.
const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `cuStreamCreate`.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn stream_create(out: *mut Handle, flags: c_uint) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    unsafe { stream_create_with_priority(out, flags, LEAST_PRIORITY) }
}

/// `cuStreamCreateWithPriority`: as the real driver, a priority outside the device's range is
/// clamped into it.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn stream_create_with_priority(
    out: *mut Handle,
    flags: c_uint,
    priority: c_int,
) -> CuResult<()> {
    if out.is_null() || flags & !CU_STREAM_NON_BLOCKING != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    st.require_ctx()?;
    let h = st.new_handle();
    let blocking = flags & CU_STREAM_NON_BLOCKING == 0;
    st.streams.user.insert(
        h,
        UserStream {
            ready_at: 0,
            blocking,
            priority: priority.clamp(GREATEST_PRIORITY, LEAST_PRIORITY),
        },
    );
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(h)) }
}

/// `cuStreamGetPriority` (and its `_ptsz` form).
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn stream_get_priority(
    stream: Handle,
    out: *mut c_int,
    per_thread_default: bool,
) -> CuResult<()> {
    let st = lock();
    st.require_ctx()?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    // SAFETY: forwarded caller contract.
    unsafe { write_out(out, st.streams.priority(s)) }
}

/// `cuCtxGetStreamPriorityRange`: least 0, greatest -5 (an H100). Either pointer may be NULL
/// (that value is then not returned).
///
/// # Safety
/// `least` and `greatest` must each be NULL or valid for a write.
pub unsafe fn ctx_get_stream_priority_range(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CuResult<()> {
    lock().require_ctx()?;
    if !least.is_null() {
        // SAFETY: non-NULL, caller contract.
        unsafe { least.write_unaligned(LEAST_PRIORITY) };
    }
    if !greatest.is_null() {
        // SAFETY: non-NULL, caller contract.
        unsafe { greatest.write_unaligned(GREATEST_PRIORITY) };
    }
    Ok(())
}

/// `cuStreamDestroy_v2`: returns at once; queued work still "completes" (effects were applied at
/// launch).
pub fn stream_destroy(stream: Handle) -> CuResult<()> {
    let mut st = lock();
    st.contexts.require_current()?;
    match st.streams.user.remove(&key(stream)) {
        Some(_) => Ok(()),
        None => Err(CUDA_ERROR_INVALID_HANDLE),
    }
}

pub fn stream_synchronize(stream: Handle, per_thread_default: bool) -> CuResult<()> {
    let t = {
        let st = lock();
        st.require_ctx()?;
        let s = st.streams.resolve(stream, per_thread_default)?;
        st.streams.ready_at(s)
    };
    wait_until(t);
    lock().check_sticky()
}

pub fn stream_query(stream: Handle, per_thread_default: bool) -> CuResult<()> {
    let st = lock();
    st.require_ctx()?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    if now_ns() < st.streams.ready_at(s) {
        Err(CUDA_ERROR_NOT_READY)
    } else {
        Ok(())
    }
}

pub fn ctx_synchronize() -> CuResult<()> {
    let t = {
        let st = lock();
        st.require_ctx()?;
        st.streams.all_ready_at()
    };
    wait_until(t);
    lock().check_sticky()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::schedule;
    use crate::exports::*;
    use crate::state::streams::{this_thread, StreamKey, Streams};
    use crate::testing::{ok, Driver};

    #[test]
    fn stream_priorities() {
        let _d = Driver::new();
        let (mut least, mut greatest) = (99, 99);
        // SAFETY: valid out-pointers (or NULL, which is allowed).
        unsafe {
            ok(cuCtxGetStreamPriorityRange(&mut least, &mut greatest));
            ok(cuCtxGetStreamPriorityRange(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ));
        }
        assert_eq!((least, greatest), (0, -5));
        let prio = |s: Handle| {
            let mut p = 99;
            // SAFETY: a live stream (or a default one) and a valid out-pointer.
            ok(unsafe { cuStreamGetPriority(s, &mut p) });
            p
        };
        // Asked, clamped into the range, or the default.
        for (asked, got) in [(-3, -3), (-5, -5), (0, 0), (-100, -5), (7, 0)] {
            let mut s: Handle = std::ptr::null_mut();
            // SAFETY: valid out-pointer.
            ok(unsafe { cuStreamCreateWithPriority(&mut s, CU_STREAM_NON_BLOCKING, asked) });
            assert_eq!(prio(s), got, "asked {asked}");
            // SAFETY: a live stream.
            ok(unsafe { cuStreamDestroy_v2(s) });
        }
        let mut s: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointers; bad flags and a NULL out-pointer are refused.
        unsafe {
            ok(cuStreamCreate(&mut s, 0));
            assert_eq!(
                cuStreamCreateWithPriority(&mut s, 0x4, -1),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuStreamCreateWithPriority(std::ptr::null_mut(), 0, -1),
                CUDA_ERROR_INVALID_VALUE
            );
        }
        assert_eq!(prio(s), 0);
        assert_eq!(prio(std::ptr::null_mut()), 0);
        let mut p = 99;
        // SAFETY: the per-thread default stream; a valid out-pointer.
        ok(unsafe { cuStreamGetPriority_ptsz(std::ptr::null_mut(), &mut p) });
        assert_eq!(p, 0);
        // SAFETY: an unknown handle is refused before anything is written.
        let rc = unsafe { cuStreamGetPriority(handle(0x1234_5670), &mut p) };
        assert_eq!(rc, CUDA_ERROR_INVALID_HANDLE);
        // A high-priority stream is a stream like any other: a copy can run on it.
        // SAFETY: a live stream.
        unsafe {
            ok(cuStreamSynchronize(s));
            ok(cuStreamDestroy_v2(s));
        }
    }

    #[test]
    fn idle_stream_starts_now() {
        assert_eq!(schedule(1_000, 0, 0, 500), (1_000, 1_500));
    }

    #[test]
    fn busy_stream_queues_behind_its_work() {
        assert_eq!(schedule(1_000, 5_000, 0, 500), (5_000, 5_500));
    }

    #[test]
    fn implicit_wait_delays_start() {
        assert_eq!(schedule(1_000, 2_000, 9_000, 10), (9_000, 9_010));
    }

    #[test]
    fn end_saturates() {
        assert_eq!(schedule(10, 0, 0, u64::MAX), (10, u64::MAX));
    }

    #[test]
    fn default_stream_resolution() {
        let s = Streams::new();
        let me = StreamKey::PerThread(this_thread());
        assert_eq!(s.resolve(handle(0), false), Ok(StreamKey::Legacy));
        assert_eq!(s.resolve(handle(0), true), Ok(me));
        assert_eq!(
            s.resolve(handle(CU_STREAM_LEGACY), true),
            Ok(StreamKey::Legacy)
        );
        assert_eq!(s.resolve(handle(CU_STREAM_PER_THREAD), false), Ok(me));
        assert_eq!(
            s.resolve(handle(0x1234_5670), false),
            Err(CUDA_ERROR_INVALID_HANDLE)
        );
    }

    #[test]
    fn per_thread_streams_are_distinct_per_thread() {
        let s = Streams::new();
        let mine = s.resolve(handle(0), true);
        let other = std::thread::spawn(|| Streams::new().resolve(handle(0), true))
            .join()
            .expect("thread");
        assert_ne!(mine, other);
    }

    #[test]
    fn legacy_stream_synchronises_with_blocking_streams_only() {
        let mut s = Streams::new();
        s.user.insert(
            0x100,
            UserStream {
                ready_at: 0,
                blocking: true,
                priority: LEAST_PRIORITY,
            },
        );
        s.user.insert(
            0x200,
            UserStream {
                ready_at: 0,
                blocking: false,
                priority: LEAST_PRIORITY,
            },
        );
        // A long kernel on the non-blocking stream does not hold up the legacy stream.
        assert_eq!(
            s.enqueue(StreamKey::User(0x200), 0, 1_000_000),
            (0, 1_000_000)
        );
        assert_eq!(s.enqueue(StreamKey::Legacy, 10, 5), (10, 15));
        // Work on the blocking stream makes the legacy stream wait for it ...
        assert_eq!(s.enqueue(StreamKey::User(0x100), 20, 100), (20, 120));
        assert_eq!(s.enqueue(StreamKey::Legacy, 30, 5), (120, 125));
        // ... and later work on the blocking stream waits for the legacy stream.
        assert_eq!(s.enqueue(StreamKey::User(0x100), 121, 1), (125, 126));
        // The non-blocking stream is unaffected; ctx sync waits for everything.
        assert_eq!(s.ready_at(StreamKey::User(0x200)), 1_000_000);
        assert_eq!(s.all_ready_at(), 1_000_000);
    }

    #[test]
    fn per_thread_default_stream_is_blocking_wrt_legacy() {
        let mut s = Streams::new();
        let pt = StreamKey::PerThread(this_thread());
        assert_eq!(s.enqueue(pt, 0, 50), (0, 50));
        assert_eq!(s.enqueue(StreamKey::Legacy, 10, 10), (50, 60));
        assert_eq!(s.enqueue(pt, 20, 1), (60, 61));
    }
}
