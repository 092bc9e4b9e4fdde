//! The streams: when the work queued on each is done (`ready_at`), which are blocking, their
//! priorities, and the legacy stream's implicit synchronisation.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::schedule;
use crate::types::*;

/// The least (numerically greatest) stream priority, as on an H100; also the default.
pub const LEAST_PRIORITY: c_int = 0;
/// The greatest (numerically least) stream priority, as on an H100.
pub const GREATEST_PRIORITY: c_int = -5;

/// Which stream a handle names once default streams are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKey {
    Legacy,
    /// The per-thread default stream of the thread with this fake-internal id.
    PerThread(u64),
    User(usize),
}

thread_local! {
    static THREAD_ID: u64 = {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

/// The calling thread's id for its per-thread default stream (0 during TLS teardown).
pub(crate) fn this_thread() -> u64 {
    THREAD_ID.try_with(|id| *id).unwrap_or(0)
}

pub(crate) struct UserStream {
    pub(crate) ready_at: u64,
    pub(crate) blocking: bool,
    /// In `GREATEST_PRIORITY..=LEAST_PRIORITY`.
    pub(crate) priority: c_int,
}

pub struct Streams {
    pub(crate) legacy: u64,
    pub(crate) per_thread: BTreeMap<u64, u64>,
    pub(crate) user: BTreeMap<usize, UserStream>,
}

impl Streams {
    pub const fn new() -> Self {
        Self {
            legacy: 0,
            per_thread: BTreeMap::new(),
            user: BTreeMap::new(),
        }
    }

    /// Resolves a `CUstream` argument. `per_thread_default` is true in `_ptsz`/`_ptds` functions.
    pub fn resolve(&self, stream: Handle, per_thread_default: bool) -> CuResult<StreamKey> {
        match key(stream) {
            0 if per_thread_default => Ok(StreamKey::PerThread(this_thread())),
            0 | CU_STREAM_LEGACY => Ok(StreamKey::Legacy),
            CU_STREAM_PER_THREAD => Ok(StreamKey::PerThread(this_thread())),
            h if self.user.contains_key(&h) => Ok(StreamKey::User(h)),
            _ => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    }

    /// A stream's priority; the default streams have the default (least) priority.
    pub fn priority(&self, stream: StreamKey) -> c_int {
        match stream {
            StreamKey::User(h) => self.user.get(&h).map_or(LEAST_PRIORITY, |s| s.priority),
            StreamKey::Legacy | StreamKey::PerThread(_) => LEAST_PRIORITY,
        }
    }

    pub fn ready_at(&self, stream: StreamKey) -> u64 {
        match stream {
            StreamKey::Legacy => self.legacy,
            StreamKey::PerThread(t) => self.per_thread.get(&t).copied().unwrap_or(0),
            StreamKey::User(h) => self.user.get(&h).map_or(0, |s| s.ready_at),
        }
    }

    /// The time before which new work on `stream` cannot start because of the legacy stream's
    /// implicit synchronisation.
    pub fn implicit_wait(&self, stream: StreamKey) -> u64 {
        match stream {
            StreamKey::Legacy => {
                let per_thread = self.per_thread.values().copied().max().unwrap_or(0);
                let blocking = self
                    .user
                    .values()
                    .filter(|s| s.blocking)
                    .map(|s| s.ready_at)
                    .max()
                    .unwrap_or(0);
                per_thread.max(blocking)
            }
            StreamKey::PerThread(_) => self.legacy,
            StreamKey::User(h) => match self.user.get(&h) {
                Some(s) if s.blocking => self.legacy,
                _ => 0,
            },
        }
    }

    /// Queues work of `duration` ns on `stream` at time `now`; returns `(start, end)`.
    pub fn enqueue(&mut self, stream: StreamKey, now: u64, duration: u64) -> (u64, u64) {
        self.enqueue_with(stream, now, duration, |earliest, d| {
            schedule(earliest, 0, 0, d)
        })
    }

    /// [`enqueue`](Self::enqueue) where `place(earliest, duration)` decides the final
    /// `(start, end)` from the earliest start stream order allows (the shared device may delay
    /// it further).
    pub fn enqueue_with(
        &mut self,
        stream: StreamKey,
        now: u64,
        duration: u64,
        place: impl FnOnce(u64, u64) -> (u64, u64),
    ) -> (u64, u64) {
        let (earliest, _) = schedule(now, self.ready_at(stream), self.implicit_wait(stream), 0);
        let (start, end) = place(earliest, duration);
        match stream {
            StreamKey::Legacy => self.legacy = end,
            StreamKey::PerThread(t) => {
                self.per_thread.insert(t, end);
            }
            StreamKey::User(h) => {
                if let Some(s) = self.user.get_mut(&h) {
                    s.ready_at = end;
                }
            }
        }
        (start, end)
    }

    /// When every stream is idle (`cuCtxSynchronize`).
    pub fn all_ready_at(&self) -> u64 {
        let per_thread = self.per_thread.values().copied().max().unwrap_or(0);
        let user = self.user.values().map(|s| s.ready_at).max().unwrap_or(0);
        self.legacy.max(per_thread).max(user)
    }
}
