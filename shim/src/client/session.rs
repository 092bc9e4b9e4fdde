//! One registration with a coordinator: the ring producer, the control block,
//! the socket. Created on a cold path, then leaked (`&'static`): a launching
//! thread may hold a session it loaded just before the session was retired, so
//! a session's memory is never freed. A retired session's ring is swapped for
//! anonymous memory, so such a late push lands nowhere and the coordinator's
//! memory is released.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tandem_proto::{ControlBlock, Record, SyncProducer};

/// Byte offset of the producer's `head` in the ring header (`RingHeader::head`:
/// the ring layout table in `tandem_proto::ring`, mirrored in `include/tandem.h`;
/// checked against proto by a unit test below).
pub const RING_HEAD_OFFSET: usize = 128;

/// How long a retiring session waits for threads still sending on its socket
/// before it leaks the descriptor instead of closing it under them.
const SENDER_DRAIN: Duration = Duration::from_millis(100);

// ---- records pushed and dropped, per process ----

/// Records this process dropped since start (or fork). Bumped only when a push
/// fails, so the fast path has no shared read-modify-write for counting:
/// records pushed are read from the rings' own `head` words instead.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Records pushed into the rings of sessions already retired (this process).
static RETIRED_PUSHED: AtomicU64 = AtomicU64::new(0);

#[cold]
#[inline(never)]
fn count_drop() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

/// Notes the final count of a session being retired.
pub(super) fn retired(pushed: u64) {
    RETIRED_PUSHED.fetch_add(pushed, Ordering::Relaxed);
}

/// Records pushed into the rings of retired sessions.
pub(super) fn retired_pushed() -> u64 {
    RETIRED_PUSHED.load(Ordering::Relaxed)
}

pub(super) fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// In a child after fork.
pub(super) fn reset_counts() {
    DROPPED.store(0, Ordering::Relaxed);
    RETIRED_PUSHED.store(0, Ordering::Relaxed);
}

/// What a hook body gets: the live session, or `None` (fail-open).
pub type Client = Option<&'static Session>;

pub struct Session {
    // ---- read on every hooked call with a session ----
    producer: SyncProducer<'static>,
    pub(super) control: &'static ControlBlock,
    /// The board and the estimates (scheduler v2, [`super::local`]).
    pub(crate) local: super::local::Local,
    /// Which session this is in this process (never 0); FuncName resend tracking.
    pub(crate) gen: u32,
    /// Whether the Device message went out (or is being sent) on this session.
    pub(crate) device_sent: AtomicBool,
    /// Whether the Device message is out: set once its send succeeded, so a
    /// message tandemd keys by the GPU (a CANDIDATE, a SHARE) sent after
    /// seeing it is read after the Device. `device_sent` alone is also set
    /// while another thread is still sending it.
    pub(crate) device_out: AtomicBool,
    /// When a report (a FuncName, the Device message) may next be tried
    /// after one could not be sent (monotonic ns; 0 = no failed send
    /// pending): `super::funcs`.
    pub(crate) reports_retry_ns: AtomicU64,
    /// Gate waits give up when the heartbeat stands still this long.
    pub(super) stale_after: Duration,
    /// The heartbeat last seen by a gate wait, and when (monotonic ns): a
    /// coordinator that stopped beating stops costing waits after `stale_after`
    /// in total, not per launch.
    pub(super) last_beat: AtomicU64,
    pub(super) beat_seen_ns: AtomicU64,
    // ---- cold ----
    /// The coordinator's id for this client.
    pub(crate) client_id: u64,
    /// The Welcome said this client may share weights (dedup).
    pub(crate) share_weights: bool,
    /// The Welcome said this coordinator speaks follow mode to this client.
    pub(crate) follow: bool,
    /// The Welcome said this coordinator decodes a FuncName's attributes.
    pub(crate) func_attrs: bool,
    /// The Welcome said this coordinator decodes a Device's SM shape.
    pub(crate) device_shape: bool,
    /// The connected socket, or -1 once closed.
    sock: AtomicI32,
    /// Threads sending on the socket (so it is not closed under them).
    senders: AtomicU32,
    /// Messages the coordinator must not miss, held while its socket is full.
    outbox: super::outbox::Outbox,
    /// The ring region (base, length): remapped to anonymous memory when retired.
    region: (usize, usize),
}

impl Session {
    /// A session over a mapped, attached ring.
    pub(crate) fn new(
        producer: SyncProducer<'static>,
        control: &'static ControlBlock,
        estimates: &'static tandem_proto::estimates::EstimateTable,
        region: (usize, usize),
        sock: i32,
        client_id: u64,
        gen: u32,
        heartbeat_ms: u32,
        welcome_flags: u8,
    ) -> Session {
        Session {
            producer,
            control,
            local: super::local::Local::new(estimates),
            gen,
            device_sent: AtomicBool::new(false),
            device_out: AtomicBool::new(false),
            reports_retry_ns: AtomicU64::new(0),
            stale_after: Duration::from_millis(u64::from(heartbeat_ms).saturating_mul(4)),
            last_beat: AtomicU64::new(control.heartbeat()),
            beat_seen_ns: AtomicU64::new(tandem_proto::monotonic_ns()),
            client_id,
            share_weights: welcome_flags & tandem_proto::wire::WELCOME_FLAG_SHARE_WEIGHTS != 0,
            follow: welcome_flags & tandem_proto::wire::WELCOME_FLAG_FOLLOW != 0,
            func_attrs: welcome_flags & tandem_proto::wire::WELCOME_FLAG_FUNC_ATTRS != 0,
            device_shape: welcome_flags & tandem_proto::wire::WELCOME_FLAG_DEVICE_SHAPE != 0,
            sock: AtomicI32::new(sock),
            senders: AtomicU32::new(0),
            outbox: super::outbox::Outbox::default(),
            region,
        }
    }

    /// An explicit request, or an inference sync's wait, began or ended
    /// (the board, when inference: counted open in between).
    pub(crate) fn request_mark(&self, begin: bool) {
        self.local.request(begin, self.control());
    }

    /// Pushes one record from a launching thread. Never blocks for long: a
    /// full ring drops it at once, a ring another thread holds is waited
    /// for boundedly (spins, yields, then naps of 50 us up to at least 5 ms:
    /// `SyncProducer::push`, only while a holder is descheduled) and drops
    /// it past that; drops are counted.
    #[inline(always)]
    pub fn push(&self, record: &Record) {
        if !self.producer.push(record) {
            count_drop();
        }
    }

    /// Pushes one record from off the launch path (the watcher's completion
    /// marks): as [`push`](Self::push), waiting up to at least 50 ms for a
    /// ring a descheduled launching thread holds (`SyncProducer::push_patient`).
    pub fn push_patient(&self, record: &Record) {
        if !self.producer.push_patient(record) {
            count_drop();
        }
    }

    /// Records pushed into this session's ring: the `head` the producer
    /// publishes in the ring header (a fresh ring starts at 0). Reads 0 once
    /// the session is retired (its ring is then anonymous zero memory).
    pub(crate) fn ring_head(&self) -> u64 {
        let head = (self.region.0 + RING_HEAD_OFFSET) as *const AtomicU64;
        // SAFETY: the region is a live, 128-aligned mapping for the rest of the
        // process (leaked; after retirement, zero pages at the same address),
        // larger than the ring header; `head` is an aligned 8-byte word there
        // that is only ever accessed atomically.
        unsafe { (*head).load(Ordering::Relaxed) }
    }

    /// The control block (after retirement: zero memory, so every request in
    /// it reads as "none").
    #[inline(always)]
    pub(crate) fn control(&self) -> &ControlBlock {
        self.control
    }

    /// The connected socket, or `None` once closed (for the watcher).
    pub(crate) fn socket(&self) -> Option<i32> {
        let fd = self.sock.load(Ordering::Acquire);
        (fd >= 0).then_some(fd)
    }

    /// Sends one encoded message without blocking. `false` when the socket is
    /// closed, full (the coordinator is not reading) or broken: the message is
    /// lost, and the job goes on. For a message that must not be lost, see
    /// [`post`](Self::post).
    pub(crate) fn send(&self, msg: &[u8]) -> bool {
        self.try_send(msg, None).is_ok()
    }

    /// Sends one message that the coordinator must not miss: at once if the
    /// socket takes it and nothing is held, else held, in order, for the
    /// watcher to send as the socket drains ([`super::outbox`]). `false` only
    /// when it is lost: the session is ending, or too much is held.
    pub(crate) fn post(&self, msg: &[u8], attached: Option<std::os::fd::BorrowedFd<'_>>) -> bool {
        let posted = self
            .outbox
            .post(msg, attached, |m, fd| self.try_send(m, fd));
        posted != super::outbox::Posted::Lost
    }

    /// Sends a request whose answer is awaited, never ahead of a posted
    /// message still held; `false` if it did not go out.
    pub(crate) fn send_in_order(
        &self,
        msg: &[u8],
        attached: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> bool {
        self.outbox
            .send_in_order(msg, attached, |m, fd| self.try_send(m, fd))
    }

    /// Sends held messages while the socket takes them (watcher thread);
    /// returns how many are still held.
    pub(crate) fn flush_held(&self) -> usize {
        self.outbox.flush(|m, fd| self.try_send(m, fd))
    }

    fn try_send(
        &self,
        msg: &[u8],
        attached: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> Result<(), super::outbox::Refused> {
        use super::outbox::Refused;
        // SeqCst pairs with `close_socket`: either we see the closed (-1) socket,
        // or the closer sees us in `senders` and waits for us to leave.
        self.senders.fetch_add(1, Ordering::SeqCst);
        let fd = self.sock.load(Ordering::SeqCst);
        let sent = if fd < 0 {
            Err(Refused::Closed)
        } else {
            // SAFETY: `fd` stays open while we are counted in `senders` (see close_socket).
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            // The socket is non-blocking: a full socket is EAGAIN, never a stall.
            tandem_proto::wire::send(fd, msg, attached).map_err(|e| match e.errno() {
                Some(libc::EAGAIN | libc::ENOBUFS) => Refused::Full,
                _ => Refused::Closed,
            })
        };
        self.senders.fetch_sub(1, Ordering::SeqCst);
        sent
    }

    /// Closes the socket once no thread is sending on it (bounded; leaks the
    /// descriptor rather than closing it under a sender).
    fn close_socket(&self) {
        let fd = self.sock.swap(-1, Ordering::SeqCst);
        if fd < 0 {
            return;
        }
        let start = std::time::Instant::now();
        while self.senders.load(Ordering::SeqCst) != 0 {
            if start.elapsed() >= SENDER_DRAIN {
                crate::log!(
                    Debug,
                    "a thread is still sending on the old coordinator socket; leaving it open"
                );
                return;
            }
            std::thread::yield_now();
        }
        // SAFETY: we own `fd` (swapped out above) and no sender uses it any more.
        unsafe { libc::close(fd) };
    }

    /// Makes every later push a no-op, and swaps the ring for anonymous memory
    /// at the same address: a thread that still holds this session writes into
    /// memory nobody reads, never into a region the coordinator reuses.
    fn detach_ring(&self) {
        self.producer.disable();
        let (base, len) = self.region;
        // SAFETY: `base..base+len` is the ring mapping this session owns (leaked,
        // never unmapped). MAP_FIXED replaces it atomically with zero pages of
        // the same size and protection, so every pointer into it stays valid;
        // zero is a valid value for every field there (all atomics: an open gate,
        // empty ring).
        let replaced = unsafe { tandem_os::mm::replace_with_anonymous(base as *mut u8, len) };
        if replaced.is_err() {
            crate::log!(
                Debug,
                "could not release the old ring mapping; keeping it (never written again)"
            );
        }
    }

    /// After the coordinator hung up (watcher thread, session already unpublished).
    pub(crate) fn retire(&self) {
        self.detach_ring();
        self.close_socket();
        self.outbox.clear();
    }

    /// In a child after fork (one thread; the session is no longer published):
    /// the child never writes the parent's ring and drops its copy of the
    /// parent's socket, so the coordinator sees the parent's hang-up when the
    /// parent exits. Only async-signal-safe calls.
    pub(crate) fn abandon_in_child(&self) {
        self.detach_ring();
        self.outbox.close_fds_in_child();
        let fd = self.sock.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: the child's copy of the parent's socket; nothing else in the
            // child uses it (the session is unpublished, no other thread exists).
            unsafe { libc::close(fd) };
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tandem_proto::{ring, Consumer, EventKind, Mapping, Producer, RingLayout};

    fn session() -> (Session, Consumer<'static>) {
        session_on(-1)
    }

    /// A session over a fresh ring, sending on `sock` (-1: no socket).
    pub(crate) fn session_on(sock: i32) -> (Session, Consumer<'static>) {
        session_with_flags(sock, 0)
    }

    /// [`session_on`] with the Welcome's `flags` (what the coordinator speaks).
    pub(crate) fn session_with_flags(sock: i32, flags: u8) -> (Session, Consumer<'static>) {
        let layout = RingLayout::new(16).unwrap();
        let map: &'static Mapping = Box::leak(Box::new(
            Mapping::anonymous_shared(layout.region_len()).unwrap(),
        ));
        let consumer = Consumer::init(map, layout, 9).unwrap();
        let producer = Producer::attach(map, layout).unwrap();
        let control = ring::control_block(map, layout).unwrap();
        let estimates = ring::estimates(map, layout).unwrap();
        let s = Session::new(
            SyncProducer::new(producer),
            control,
            estimates,
            (map.as_ptr() as usize, map.len()),
            sock,
            9,
            1,
            100,
            flags,
        );
        (s, consumer)
    }

    /// A non-blocking datagram pair, as the shim's coordinator socket is:
    /// the session's end as a raw descriptor (the session owns it from
    /// then on), and the peer's.
    pub(crate) fn pair() -> (i32, std::os::fd::OwnedFd) {
        use std::os::fd::IntoRawFd;
        let (ours, peer) = tandem_os::socket::seqpacket_pair().unwrap();
        (ours.into_raw_fd(), peer)
    }

    #[test]
    fn a_posted_message_waits_out_a_full_socket_and_keeps_its_place() {
        use std::os::fd::AsFd;
        let (sock, peer) = pair();
        let (s, _ring) = session_on(sock);
        let mut filler = 0;
        while s.send(&[0u8; 256]) {
            filler += 1;
        }
        assert!(filler > 0, "the socket took something before it was full");
        assert!(!s.send(b"lost"), "full: a plain send is lost");
        assert!(s.post(b"first", None), "full: a posted message is held");
        assert!(s.post(b"second", None));
        assert!(!s.send_in_order(b"ask", None), "an ask never passes them");
        assert_eq!(s.flush_held(), 2, "nothing read yet: both still held");

        let mut buf = vec![0u8; 512];
        let mut read = || {
            let r = tandem_proto::wire::recv(peer.as_fd(), &mut buf).ok()?;
            Some(buf[..r.len].to_vec())
        };
        for _ in 0..filler {
            assert_eq!(read().unwrap().len(), 256);
        }
        assert_eq!(read(), None, "the plain send that failed was not queued");
        assert_eq!(s.flush_held(), 0);
        assert!(s.send_in_order(b"ask", None));
        assert_eq!(read().as_deref(), Some(&b"first"[..]));
        assert_eq!(read().as_deref(), Some(&b"second"[..]));
        assert_eq!(read().as_deref(), Some(&b"ask"[..]));
    }

    #[test]
    fn a_retired_session_drops_what_it_held() {
        let (sock, _peer) = pair();
        let (s, _ring) = session_on(sock);
        while s.send(&[0u8; 256]) {}
        assert!(s.post(b"held", None));
        s.retire();
        assert_eq!(s.flush_held(), 0, "nothing left to send on a closed socket");
        assert!(!s.post(b"late", None), "closed: lost, not held");
    }

    #[test]
    fn ring_head_offset_matches_proto() {
        let (s, mut consumer) = session();
        assert_eq!(s.ring_head(), 0);
        for i in 0..5 {
            s.push(&Record::new(EventKind::LAUNCH, i));
        }
        assert_eq!(s.ring_head(), 5);
        assert_eq!(consumer.stats().head, s.ring_head());
        assert_eq!(consumer.drain(|_| ()).unwrap(), 5);
        assert_eq!(s.ring_head(), 5, "head counts pushes, not what is unread");
    }

    #[test]
    fn a_retired_session_drops_quietly_and_its_gate_is_open() {
        let (s, _consumer) = session();
        s.control.close_gate();
        s.push(&Record::new(EventKind::LAUNCH, 1));
        assert_eq!(s.ring_head(), 1);
        s.retire();
        assert_eq!(s.ring_head(), 0, "the ring is anonymous zero memory now");
        s.push(&Record::new(EventKind::LAUNCH, 2));
        assert_eq!(s.ring_head(), 0, "a disabled producer writes nothing");
        assert!(s.control.gate_is_open(), "zero memory: an open gate");
        s.gate(1);
        assert_eq!(s.socket(), None);
        assert!(!s.send(b"x"), "no socket: nothing sent, no panic");
    }

    #[test]
    fn each_gate_pass_counts_one_launch_and_the_limit_holds_the_next() {
        let (s, _consumer) = session();
        for _ in 0..3 {
            s.gate(1);
        }
        assert_eq!(s.control.client_counters().launches, 3);
        assert_eq!(
            s.control.client_counters().gate_waits,
            0,
            "no limit: no wait"
        );
        // Allow one more; the fifth launch waits (bounded: the beat never
        // moves, so at most stale_after) and still goes ahead: fail open.
        s.control.set_launch_limit(4).unwrap();
        s.gate(1);
        assert_eq!(s.control.client_counters().gate_waits, 0);
        s.gate(1);
        let k = s.control.client_counters();
        assert_eq!(k.launches, 5, "a launch that waited is counted too");
        assert_eq!(k.gate_waits, 1, "{k:?}");
        assert_eq!(k.gate_timeouts + k.stale_opens, 1, "{k:?}");
    }

    #[test]
    fn a_closed_gate_of_a_silent_coordinator_stops_costing_waits() {
        let (s, _consumer) = session();
        s.control.close_gate();
        // Heartbeat never moves: waits end (bounded), and once the beat has been
        // still for stale_after (400 ms) the gate is passed without waiting.
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(600) {
            s.gate(1);
        }
        let waits = s.control.client_counters().gate_waits;
        for _ in 0..100 {
            s.gate(1);
        }
        assert_eq!(
            s.control.client_counters().gate_waits,
            waits,
            "no further waits on a stale coordinator"
        );
        assert!(waits >= 1);
    }
}
