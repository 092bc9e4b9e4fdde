//! The driver calls the shim makes on its own behalf (never the program's),
//! as thin typed functions with one error type, [`DriverError`], naming the
//! call. Dedup's VMM layer ([`crate::dedup`]) and completion marks
//! ([`crate::client`]) are built on it.
//!
//! Hooked functions are reached through their real-pointer slots and counted as
//! the shim's own calls (`counters::own_call`), so the driver's count stays the
//! program's plus ours; the others through `driver::support`, counted too
//! (`counters::support_call`): a program may call them as well.

use crate::types::{CUcontext, CUevent, CUstream, CuResult};

/// A driver call that failed (or is missing: `CuResult::NOT_SUPPORTED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverError {
    pub call: &'static str,
    pub rc: CuResult,
}

impl core::fmt::Display for DriverError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} returned CUresult {}", self.call, self.rc.0)
    }
}

pub type Result<T> = core::result::Result<T, DriverError>;

pub(crate) fn check(call: &'static str, rc: CuResult) -> Result<()> {
    if rc == CuResult::SUCCESS {
        Ok(())
    } else {
        Err(DriverError { call, rc })
    }
}

/// A driver function that is not there.
pub(crate) fn missing(call: &'static str) -> DriverError {
    DriverError {
        call,
        rc: CuResult::NOT_SUPPORTED,
    }
}

/// The real function of a hooked variant, counted as our own call; a missing
/// one is a [`DriverError`] naming it.
macro_rules! hooked {
    ($hook:ident, fn($($ty:ty),*)) => {{
        match $crate::driver::real($crate::table::Hook::$hook) {
            Some(p) => {
                $crate::counters::own_call($crate::table::Hook::$hook);
                // SAFETY: the slot of a hook holds the driver's function of that
                // name, whose C signature is the one written here (cuda.h).
                Ok(unsafe {
                    core::mem::transmute::<
                        usize,
                        unsafe extern "C" fn($($ty),*) -> $crate::types::CuResult,
                    >(p)
                })
            }
            None => Err($crate::calls::missing(stringify!($hook))),
        }
    }};
}

/// A support function of the driver, by its `Support` slot; a missing one is
/// a [`DriverError`] naming it.
macro_rules! support {
    ($which:ident, fn($($ty:ty),*)) => {{
        match $crate::driver::support($crate::driver::Support::$which) {
            Some(p) => {
                $crate::counters::support_call($crate::driver::Support::$which);
                // SAFETY: the support slot holds the driver's function of that
                // name, whose C signature is the one written here (cuda.h).
                Ok(unsafe {
                    core::mem::transmute::<
                        usize,
                        unsafe extern "C" fn($($ty),*) -> $crate::types::CuResult,
                    >(p)
                })
            }
            None => Err($crate::calls::missing($crate::driver::Support::$which.name())),
        }
    }};
}

pub(crate) use {hooked, support};

/// The calling thread's current context (may be null).
pub fn ctx_current() -> Result<CUcontext> {
    let f = support!(CtxGetCurrent, fn(*mut CUcontext))?;
    let mut c: CUcontext = core::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("cuCtxGetCurrent", unsafe { f(&mut c) })?;
    Ok(c)
}

/// Makes `ctx` current on the calling thread.
pub fn ctx_set_current(ctx: CUcontext) -> Result<()> {
    let f = support!(CtxSetCurrent, fn(CUcontext))?;
    // SAFETY: `ctx` came from cuCtxGetCurrent in this process.
    check("cuCtxSetCurrent", unsafe { f(ctx) })
}

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: u32 = 2;

/// Puts the calling thread in the relaxed stream-capture interaction mode, so
/// that its calls (the shim's background work) can never invalidate a graph
/// capture the program runs in another thread in the default, global mode.
pub fn relax_capture_mode() -> Result<()> {
    let f = support!(ThreadExchangeStreamCaptureMode, fn(*mut u32))?;
    let mut mode = CAPTURE_MODE_RELAXED;
    // SAFETY: valid in/out pointer to a CUstreamCaptureMode (a C enum, 32 bits).
    check("cuThreadExchangeStreamCaptureMode", unsafe { f(&mut mode) })
}

/// `CU_EVENT_DISABLE_TIMING`: the cheapest event, for completion only.
const EVENT_DISABLE_TIMING: u32 = 2;

/// A completion-only event in the current context.
pub fn event_create() -> Result<CUevent> {
    let f = support!(EventCreate, fn(*mut CUevent, u32))?;
    let mut e: CUevent = core::ptr::null_mut();
    // SAFETY: valid out-pointer; flags from cuda.h.
    check("cuEventCreate", unsafe { f(&mut e, EVENT_DISABLE_TIMING) })?;
    Ok(e)
}

/// A timing event in the current context (for a sampled launch's start and
/// end: [`event_elapsed_ns`] needs both to time).
pub fn event_create_timed() -> Result<CUevent> {
    let f = support!(EventCreate, fn(*mut CUevent, u32))?;
    let mut e: CUevent = core::ptr::null_mut();
    // SAFETY: valid out-pointer; 0 is CU_EVENT_DEFAULT.
    check("cuEventCreate", unsafe { f(&mut e, 0) })?;
    Ok(e)
}

/// GPU time from `start` to `end` (both timing events, both complete), in
/// ns (`cuEventElapsedTime` answers in float milliseconds, to about half a
/// microsecond).
pub fn event_elapsed_ns(start: CUevent, end: CUevent) -> Result<u64> {
    let f = support!(EventElapsedTime, fn(*mut f32, CUevent, CUevent))?;
    let mut ms = 0f32;
    // SAFETY: valid out-pointer; both events came from event_create_timed.
    check("cuEventElapsedTime", unsafe { f(&mut ms, start, end) })?;
    Ok((f64::from(ms.max(0.0)) * 1e6).round() as u64)
}

/// Records `event` on `stream`; `per_thread`: the stream argument means what
/// it means to a `_ptsz` call (the null stream is the per-thread one).
pub fn event_record(event: CUevent, stream: CUstream, per_thread: bool) -> Result<()> {
    let f = if per_thread {
        support!(EventRecordPtsz, fn(CUevent, CUstream))?
    } else {
        support!(EventRecord, fn(CUevent, CUstream))?
    };
    // SAFETY: `event` came from event_create; `stream` is the one the program
    // just launched on successfully.
    check("cuEventRecord", unsafe { f(event, stream) })
}

/// Whether all the work queued on `stream` so far has completed: `Ok(true)`
/// idle, `Ok(false)` busy (`CUDA_ERROR_NOT_READY`); `per_thread` as for
/// [`event_record`].
pub fn stream_query(stream: CUstream, per_thread: bool) -> Result<bool> {
    let f = if per_thread {
        hooked!(cuStreamQuery_ptsz, fn(CUstream))?
    } else {
        hooked!(cuStreamQuery, fn(CUstream))?
    };
    // SAFETY: `stream` is the one the program is launching on.
    match unsafe { f(stream) } {
        CuResult::SUCCESS => Ok(true),
        CuResult::NOT_READY => Ok(false),
        rc => Err(DriverError {
            call: "cuStreamQuery",
            rc,
        }),
    }
}

/// Whether the work before `event`'s last record has completed: `Ok(true)`
/// done, `Ok(false)` not yet (`CUDA_ERROR_NOT_READY`).
pub fn event_query(event: CUevent) -> Result<bool> {
    let f = hooked!(cuEventQuery, fn(CUevent))?;
    // SAFETY: `event` came from event_create.
    match unsafe { f(event) } {
        CuResult::SUCCESS => Ok(true),
        CuResult::NOT_READY => Ok(false),
        rc => Err(DriverError {
            call: "cuEventQuery",
            rc,
        }),
    }
}
