//! Completion marks: how the coordinator learns when this process's GPU work
//! completed without the program syncing.
//!
//! When the control block asks for them (`mark_every_ns` > 0: the coordinator
//! asks training clients), the launching thread records a driver event on the
//! launch's stream right after a launch, at most once per `mark_every_ns`
//! across all threads, and reports it as a MARK record (sequence number, the
//! session's launch counter). The watcher thread queries the outstanding
//! events every [`POLL_EVERY`] and reports each one the GPU has reached as a
//! MARK_DONE record: everything the process launched on that stream before
//! the mark had completed by then.
//!
//! Cost on the launch path while marks are off: one Relaxed load of a word
//! on the control block's first cache line (already read by the gate), and
//! one of a static that nothing writes then (whether to time this launch).
//! While on: one more Relaxed load per launch, and per mark one
//! `cuEventRecord`, one record push and a few atomics (the event is created
//! once per slot); when it is timed, a few driver calls more (below).
//!
//! Bounded: at most [`SLOTS`] marks are outstanding; a mark that would reuse
//! a slot still in flight is skipped (the GPU is that far behind; the marks in
//! flight already say so). Events are completion-only
//! (`CU_EVENT_DISABLE_TIMING`; a timed launch's two excepted, below) and
//! never destroyed (a fixed pool). No mark is
//! placed on a stream being captured into a graph (such launches are not
//! reported at all). The watcher's driver calls run in the relaxed
//! stream-capture mode, so they cannot invalidate a capture the program runs
//! in another thread. While the watcher is busy with a dedup scan slice
//! (at most 20 ms) marks are seen late, never lost. A MARK_DONE and a
//! launch that meet at the ring's lock both get through: the one that finds
//! it held waits (boundedly) for a holder the scheduler preempted, instead of
//! dropping its record (`SyncProducer`'s contended path; the watcher's push
//! may wait longer than a launch's). The watcher sleeps as
//! usual while no mark is outstanding: the first mark after an idle spell
//! wakes it through an eventfd (one `write`, only on that transition).
//!
//! **Timed launches.** Every `timing_every`-th mark interval
//! (`TANDEM_MARK_TIMING`, default 1: every one; 0: none) the mark is not
//! placed after the launch that found the interval over but after the next
//! kernel launch (after a sync, possibly that launch itself: the
//! pre-checks in [`interval`](super::interval)), which is bracketed: a
//! timing event recorded on its stream just before it, and the mark's own
//! (a timing event too) just after. The watcher then reports, with the
//! MARK_DONE, that launch's GPU time
//! (`cuEventElapsedTime`; [`FLAG_TIMED`], `bytes`): the duration of one
//! kernel even when the GPU idles between launches, which the marks'
//! completion times alone cannot tell apart. The start event may complete
//! before the kernel starts (on an idle stream, by the launch call's host
//! time): [`timing`](super::timing) says what is taken off, and when a
//! mark is reported untimed instead.
//!
//! Which launches are timed, and when an interval ends: see
//! [`interval`](super::interval).
//!
//! Cost: a mark interval ends once per `mark_every_ns` on average (each
//! lasts a drawn time from 0 to twice that), except while the
//! GPU is behind the host: then, for the first 32 intervals of each
//! backlog and while under half the slots are in flight, about 8 times
//! per `mark_every_ns` ([`interval`](super::interval)'s `gpu_behind`:
//! host time the backlog hides, at most 256 timings more per backlog); per
//! timed mark (at most one per mark interval) one more `cuEventRecord`,
//! one `cuStreamQuery`, one `cuEventQuery` and one clock read (and a `cuStreamIsCapturing` while a
//! capture is under way: on a capturing stream nothing is timed, so none of
//! these calls reaches it); on every kernel launch one Relaxed load of a
//! static ([`before_launch`]), and on the one to four launches after each
//! synchronising call a clock read more (the pre-checks). Events are still
//! a fixed pool: each slot has its two timing events, created on first use,
//! and the lead's three words.
//! Another thread's launch on the same stream between the two events is
//! timed with it (rare; the sample is then long).
//!
//! One context per process is assumed (the common case): events are created
//! in the context current at the first mark, and a mark on another
//! context's stream fails to record and is skipped.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tandem_proto::{monotonic_ns, EventKind, Record};

use tandem_proto::record::FLAG_TIMED;

use super::interval::{self, interval_over, AtLaunch, NEXT_NS, TIME_IT, TIME_NEXT};
use super::session::Session;
use super::slots::{claim, slot_of, Slot, ARMED, FREE, POOL, SLOTS};
use super::timing::{kernel_ns, lead_ns, timing_due, UNKNOWN_LEAD};
use super::wake;
use super::Client;
use crate::calls;
use crate::table::Hook;
use crate::types::{CUcontext, CUevent, CUstream};

/// How often the watcher queries outstanding marks.
pub const POLL_EVERY: Duration = Duration::from_micros(200);

/// A token from [`before_launch`]: the launch is not timed, but the mark of
/// the interval that asked for the timing is still to be placed after it.
const UNTIMED: u64 = u64::MAX;
/// The stream of the latest launch (`CUstream` value) and whether it was a
/// per-thread-default-stream form: where an on-demand mark goes.
static LAST_STREAM: AtomicU64 = AtomicU64::new(0);
static LAST_PER_THREAD: AtomicU32 = AtomicU32::new(0);
/// Held by whichever thread polls the marks now (the watcher, or a launch
/// waiting at the local bound): one poller at a time.
static POLLING: AtomicU32 = AtomicU32::new(0);

/// Slots ARMED now.
static OUTSTANDING: AtomicU32 = AtomicU32::new(0);
/// The context the events were created in (the watcher makes it current).
static CTX: AtomicUsize = AtomicUsize::new(0);

/// Before a kernel launch by a registered process: 0 (the usual case: one
/// Relaxed load), or a token for [`after_launch`] / [`abandon`] when this
/// launch is the one to time (its start event is then recorded).
/// `capturing`: whether the stream is being captured into a graph (asked
/// only then: no event may go into a capture).
#[inline(always)]
pub fn before_launch(
    client: Client,
    hook: Hook,
    stream: CUstream,
    capturing: impl FnOnce() -> bool,
) -> u64 {
    if TIME_NEXT.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    match client {
        Some(s) => begin_timed(s, hook.info().per_thread, stream, capturing),
        None => 0,
    }
}

/// The launch that took [`before_launch`]'s token did not reach the GPU (or
/// was captured into a graph): frees the slot it held.
#[inline(always)]
pub fn abandon(token: u64) {
    if token != 0 && token != UNTIMED {
        slot_of(token).state.store(FREE, Ordering::Release);
    }
}

/// Claims a slot and records its start event before the launch: the token
/// (the mark's sequence number), or [`UNTIMED`] where timing is not
/// possible now (the interval's mark is then placed plainly after the
/// launch), or 0 when another thread took the timing, marks are off, or
/// this launch was pre-checked and the interval is not over
/// ([`interval::at_launch`]).
#[cold]
#[inline(never)]
fn begin_timed(
    s: &Session,
    per_thread: bool,
    stream: CUstream,
    capturing: impl FnOnce() -> bool,
) -> u64 {
    let every = s.control().mark_every_ns();
    if every == 0 {
        // Marks were turned off since: no mark at all.
        TIME_NEXT.store(0, Ordering::Relaxed);
        return 0;
    }
    match interval::at_launch(every) {
        AtLaunch::Nothing => return 0,
        AtLaunch::Plain => return UNTIMED,
        AtLaunch::Time => {}
    }
    if capturing() {
        return UNTIMED;
    }
    let Some((seq, slot)) = claim() else {
        return UNTIMED;
    };
    let Some((start, _)) = timing_events(slot) else {
        slot.state.store(FREE, Ordering::Release);
        return UNTIMED;
    };
    // Idle: `start` completes as it is recorded, before the launch reaches
    // the driver (a failed query counts as busy: `finish_timed` then asks
    // the event). Legal: the stream is not being captured (above), and it is
    // the one the program launches on next.
    let idle = calls::stream_query(stream, per_thread).unwrap_or(false);
    if calls::event_record(start, stream, per_thread).is_err() {
        slot.state.store(FREE, Ordering::Release);
        return UNTIMED;
    }
    slot.t0.store(monotonic_ns(), Ordering::Relaxed);
    slot.t1.store(0, Ordering::Relaxed);
    slot.idle.store(u32::from(idle), Ordering::Relaxed);
    seq
}

/// Right after the launch call returned, before anything else: the time
/// the timed launch's lead ends (the capture query and the record that
/// follow are the shim's, not the launch's: counted, they took up to 0.9%
/// off a 100 us kernel's timing on a loaded machine).
#[inline(always)]
pub fn launch_returned(token: u64) {
    if token != 0 && token != UNTIMED {
        returned(token);
    }
}

#[cold]
#[inline(never)]
fn returned(token: u64) {
    slot_of(token).t1.store(monotonic_ns(), Ordering::Relaxed);
}

/// After a kernel launch that reached the GPU (`now`: its record's
/// timestamp; `token`: [`before_launch`]'s).
#[inline(always)]
pub fn after_launch(s: &Session, hook: Hook, stream: CUstream, now: u64, token: u64) {
    if token != 0 {
        finish_timed(s, hook.info().per_thread, stream, now, token);
        return;
    }
    interval(s, hook, stream, now, true);
}

/// After a graph launch that reached the GPU (never timed: a graph is many
/// kernels).
#[inline(always)]
pub fn after_graph_launch(s: &Session, hook: Hook, stream: CUstream, now: u64) {
    interval(s, hook, stream, now, false);
}

/// A mark after this launch if the interval is over (`timeable`: or after
/// the next kernel launch, timed, if timing is due).
#[inline(always)]
fn interval(s: &Session, hook: Hook, stream: CUstream, now: u64, timeable: bool) {
    let every = s.control().mark_every_ns();
    if every == 0 {
        return;
    }
    let per_thread = hook.info().per_thread;
    LAST_STREAM.store(stream as u64, Ordering::Relaxed);
    LAST_PER_THREAD.store(u32::from(per_thread), Ordering::Relaxed);
    if interval_over(now, every).is_none() {
        return;
    }
    if timeable && timing_due() {
        // The mark is placed after the next kernel launch, which is timed.
        TIME_NEXT.store(TIME_IT, Ordering::Relaxed);
        return;
    }
    place(s, per_thread, stream, now);
}

/// After a synchronising call returned (cold: a sync waits anyway): see
/// [`interval::sync_returned`].
#[cold]
pub fn after_sync(s: &Session) {
    interval::sync_returned(s.control().mark_every_ns());
}

/// After the timed launch: records the mark's (end) event and arms the slot.
#[cold]
#[inline(never)]
fn finish_timed(s: &Session, per_thread: bool, stream: CUstream, now: u64, token: u64) {
    if token == UNTIMED {
        place(s, per_thread, stream, now);
        return;
    }
    let slot = &slot_of(token);
    let end = slot.end.load(Ordering::Relaxed) as CUevent;
    // At once: an end event recorded after a short kernel finished would
    // complete at its record instead.
    if calls::event_record(end, stream, per_thread).is_err() {
        slot.state.store(FREE, Ordering::Release);
        return;
    }
    // `now` was read right after the launch returned.
    let start = slot.start.load(Ordering::Relaxed) as CUevent;
    let start_done = calls::event_query(start).ok();
    if start_done == Some(true) {
        interval::gpu_caught_up();
    } else if start_done == Some(false) {
        interval::gpu_behind(
            now,
            s.control().mark_every_ns(),
            OUTSTANDING.load(Ordering::Relaxed),
        );
    }
    let t1 = match slot.t1.load(Ordering::Relaxed) {
        0 => now,
        t1 => t1,
    };
    let lead = lead_ns(
        slot.idle.load(Ordering::Relaxed) != 0,
        slot.t0.load(Ordering::Relaxed),
        t1,
        start_done,
    );
    slot.lead
        .store(lead.unwrap_or(UNKNOWN_LEAD), Ordering::Relaxed);
    arm(s, slot, token, stream, now, true);
}

/// A launch waits at the local bound with `charged` ns charged: if no mark
/// covers that much yet, place one now, after the latest launch, whatever
/// the interval (cold: only from a waiting launch).
#[cold]
pub fn cover(s: &Session, charged: u64) {
    if s.control().mark_every_ns() == 0 || s.local.covered() >= charged {
        return;
    }
    let stream = LAST_STREAM.load(Ordering::Relaxed) as CUstream;
    let per_thread = LAST_PER_THREAD.load(Ordering::Relaxed) != 0;
    place(s, per_thread, stream, monotonic_ns());
}

/// Polls the outstanding marks from a launching thread that waits at the
/// local bound, when no other thread is polling and this thread's current
/// context is the marks' (it never switches the program's context).
#[cold]
pub fn poll_here(s: &Session) {
    if OUTSTANDING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let ctx = CTX.load(Ordering::Relaxed) as CUcontext;
    if ctx.is_null() || calls::ctx_current().ok() != Some(ctx) {
        return;
    }
    poll_locked(s);
}

#[cold]
#[inline(never)]
fn place(s: &Session, per_thread: bool, stream: CUstream, now: u64) {
    let Some((seq, slot)) = claim() else {
        return;
    };
    let Some(event) = slot_event(slot) else {
        slot.state.store(FREE, Ordering::Release);
        return;
    };
    if calls::event_record(event, stream, per_thread).is_err() {
        // Another context's stream, or a stream the driver refuses: no mark.
        slot.state.store(FREE, Ordering::Release);
        return;
    }
    arm(s, slot, seq, stream, now, false);
}

/// A slot this thread holds (BUSY) with its mark's event recorded: report
/// the MARK and hand the slot to the poller.
fn arm(s: &Session, slot: &Slot, seq: u64, stream: CUstream, now: u64, timed: bool) {
    let charged = s.control().charged_ns();
    slot.timed.store(u32::from(timed), Ordering::Relaxed);
    slot.seq.store(seq, Ordering::Relaxed);
    slot.stream.store(stream as u64, Ordering::Relaxed);
    slot.charged.store(charged, Ordering::Relaxed);
    slot.gen.store(s.gen, Ordering::Relaxed);
    s.local.cover(charged);
    mark(s, EventKind::MARK, seq, stream as u64, now, None);
    s.control().count_mark(false);
    let first = OUTSTANDING.fetch_add(1, Ordering::Relaxed) == 0;
    slot.state.store(ARMED, Ordering::Release);
    if first {
        wake::wake_watcher();
    }
}

/// MARK (`bytes`: the session's launch counter) / MARK_DONE (with the timed
/// launch's GPU ns, if any), for mark `seq`.
#[inline]
fn mark(s: &Session, kind: EventKind, seq: u64, stream: u64, ts_ns: u64, elapsed: Option<u64>) {
    let mut r = Record::new(kind, ts_ns);
    r.func_id = seq;
    r.stream = stream;
    if let Some(ns) = elapsed {
        r.flags = FLAG_TIMED;
        r.bytes = ns;
    }
    if kind == EventKind::MARK {
        r.bytes = s.control().launches();
        s.push(&r);
    } else {
        // Off the launch path (the watcher, or a launch already waiting at
        // the local bound): waits out a launching thread the scheduler
        // preempted while it held the ring, where `push` would give up
        // sooner.
        s.push_patient(&r);
    }
}

/// The slot's event, created in the calling thread's context the first time.
fn slot_event(slot: &Slot) -> Option<CUevent> {
    match slot.event.load(Ordering::Relaxed) {
        0 => {
            let ctx = calls::ctx_current().ok().filter(|c| !c.is_null())?;
            let e = calls::event_create().ok()?;
            let _ = CTX.compare_exchange(0, ctx as usize, Ordering::Relaxed, Ordering::Relaxed);
            slot.event.store(e as usize, Ordering::Relaxed);
            Some(e)
        }
        e => Some(e as CUevent),
    }
}

/// The slot's timing events (start, end), created in the calling thread's
/// context the first time.
fn timing_events(slot: &Slot) -> Option<(CUevent, CUevent)> {
    let (start, end) = (
        slot.start.load(Ordering::Relaxed),
        slot.end.load(Ordering::Relaxed),
    );
    if start != 0 && end != 0 {
        return Some((start as CUevent, end as CUevent));
    }
    let ctx = calls::ctx_current().ok().filter(|c| !c.is_null())?;
    let start = match start {
        0 => calls::event_create_timed().ok()?,
        e => e as CUevent,
    };
    slot.start.store(start as usize, Ordering::Relaxed);
    let end = calls::event_create_timed().ok()?;
    let _ = CTX.compare_exchange(0, ctx as usize, Ordering::Relaxed, Ordering::Relaxed);
    slot.end.store(end as usize, Ordering::Relaxed);
    Some((start, end))
}

/// How long the watcher may sleep before it should poll marks again:
/// [`POLL_EVERY`] while any is outstanding, else `default` (a new mark wakes
/// it through [`super::wake::wake_fd`]; without an eventfd, [`POLL_EVERY`] while this
/// session asks for marks).
pub fn poll_slice(s: &Session, default: Duration) -> Duration {
    let outstanding = OUTSTANDING.load(Ordering::Relaxed) > 0;
    let unwakeable = !wake::wakeable() && s.control().mark_every_ns() != 0;
    if outstanding || unwakeable {
        default.min(POLL_EVERY)
    } else {
        default
    }
}

/// On the watcher thread: reports every outstanding mark the GPU has reached,
/// in sequence order.
pub fn poll(s: &Session) {
    if OUTSTANDING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let ctx = CTX.load(Ordering::Relaxed) as CUcontext;
    if !ctx.is_null()
        && calls::ctx_current().ok() != Some(ctx)
        && calls::ctx_set_current(ctx).is_err()
    {
        return;
    }
    poll_locked(s);
}

/// The poll itself, by one thread at a time (another poller: skip).
fn poll_locked(s: &Session) {
    if POLLING
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    poll_armed(s);
    POLLING.store(0, Ordering::Release);
}

fn poll_armed(s: &Session) {
    let mut armed = [(0u64, 0usize); SLOTS];
    let mut n = 0;
    for (i, slot) in POOL.iter().enumerate() {
        if slot.state.load(Ordering::Acquire) == ARMED {
            armed[n] = (slot.seq.load(Ordering::Relaxed), i);
            n += 1;
        }
    }
    armed[..n].sort_unstable();
    // A created stream's marks complete in its order: past its oldest one
    // not yet complete, the rest of that stream's are not asked about. (The
    // default streams' handles, 0, CU_STREAM_LEGACY and
    // CU_STREAM_PER_THREAD, may each name several streams: every one of
    // their marks is asked.)
    let mut waiting = [0u64; 8];
    let mut n_waiting = 0;
    for &(seq, i) in &armed[..n] {
        let slot = &POOL[i];
        let stream = slot.stream.load(Ordering::Relaxed);
        let ordered = stream > 2;
        if ordered && waiting[..n_waiting].contains(&stream) {
            continue;
        }
        let timed = slot.timed.load(Ordering::Relaxed) != 0;
        let event = if timed {
            slot.end.load(Ordering::Relaxed)
        } else {
            slot.event.load(Ordering::Relaxed)
        } as CUevent;
        match calls::event_query(event) {
            Ok(false) => {
                if ordered && n_waiting < waiting.len() {
                    waiting[n_waiting] = stream;
                    n_waiting += 1;
                }
                continue;
            }
            Ok(true) => {
                let now = monotonic_ns();
                if slot.gen.load(Ordering::Relaxed) == s.gen {
                    s.control()
                        .complete_through(slot.charged.load(Ordering::Relaxed));
                }
                let lead = slot.lead.load(Ordering::Relaxed);
                let elapsed = (timed && lead != UNKNOWN_LEAD)
                    .then(|| {
                        let start = slot.start.load(Ordering::Relaxed) as CUevent;
                        calls::event_elapsed_ns(start, event)
                            .map(|ns| kernel_ns(ns, lead))
                            .map_err(|e| crate::log!(Debug, "untimed mark {seq}: {e}"))
                            .ok()
                    })
                    .flatten();
                mark(s, EventKind::MARK_DONE, seq, stream, now, elapsed);
                s.control().count_mark(true);
            }
            Err(e) => crate::log!(Debug, "dropping completion mark {seq}: {e}"),
        }
        slot.state.store(FREE, Ordering::Release);
        OUTSTANDING.fetch_sub(1, Ordering::Relaxed);
    }
}

/// In a child after fork: the parent's events belong to its context.
pub(super) fn after_fork_in_child() {
    for slot in &POOL {
        slot.state.store(FREE, Ordering::Relaxed);
        slot.event.store(0, Ordering::Relaxed);
        slot.start.store(0, Ordering::Relaxed);
        slot.end.store(0, Ordering::Relaxed);
    }
    NEXT_NS.store(0, Ordering::Relaxed);
    TIME_NEXT.store(0, Ordering::Relaxed);
    OUTSTANDING.store(0, Ordering::Relaxed);
    CTX.store(0, Ordering::Relaxed);
    wake::after_fork_in_child();
}
