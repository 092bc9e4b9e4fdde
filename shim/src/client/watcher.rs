//! The background thread of a registered (or registering) client: it sleeps in
//! `poll` on the coordinator socket; when the coordinator hangs up it
//! unpublishes the session (hooks fail open at once) and tries to register
//! again every 200 ms, so a restarted coordinator is rejoined within a second.
//! Started on the first CUDA call (never in the constructor), one per process.
//! It is also where the features above the session run ([`super::features`]:
//! weight dedup's Dedup messages and, between them, its periodic granule
//! scan; follow mode's Follow messages); and
//! where completion marks are polled (`super::marks`, every 200 us while any
//! is outstanding; the first mark after an idle spell wakes it), and where
//! messages held while the socket was full go out (`super::outbox`, every
//! 5 ms while any is held).

use core::sync::atomic::{AtomicBool, Ordering};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use tandem_os::poll::{self, Seen};
use tandem_proto::wire;

use super::config::Config;
use super::connect::{self, Outcome};
use super::features;
use super::published::{publish, retire};
use super::session::Session;

/// Most messages read in one turn of the loop, and for how long at most
/// (completion marks and held messages are seen to between turns).
const MAX_MESSAGES_PER_TURN: usize = 256;
const READ_BUDGET: Duration = Duration::from_millis(20);
/// Pause between registration attempts while no coordinator answers.
pub const RETRY_EVERY: Duration = Duration::from_millis(200);
/// How long one `poll` on a live connection lasts before it is simply repeated.
const POLL_SLICE_MS: u64 = 1000;
/// How often the board slot of this client's GPU is looked for while none
/// is found.
const SLOT_RESCAN: Duration = Duration::from_millis(20);

/// Whether this process has a watcher thread.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Starts the watcher (once per process). `session` is the session to watch,
/// or `None` to start by retrying. `false` if no thread could be started.
pub fn spawn(cfg: Config, session: Option<&'static Session>) -> bool {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return true;
    }
    // The thread must not take the program's signals: start it with all blocked.
    // SAFETY: sigset_t values are plain data, initialised by sigfillset /
    // pthread_sigmask before they are read.
    let mut all: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: valid sigset pointers; only this thread's mask changes, and it is
    // restored right after the spawn.
    let masked = unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) == 0
    };
    let spawned = std::thread::Builder::new()
        .name("tandem-client".into())
        .stack_size(256 * 1024)
        .spawn(move || run(cfg, session));
    if masked {
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    }
    match spawned {
        Ok(_) => true,
        Err(e) => {
            RUNNING.store(false, Ordering::Release);
            crate::log!(
                Warn,
                "cannot start the coordinator watcher thread ({e}); no reconnection after a \
                 coordinator restart"
            );
            false
        }
    }
}

fn run(cfg: Config, mut current: Option<&'static Session>) {
    // This thread's driver calls (dedup scans, mark queries) must never
    // invalidate a graph capture the program runs in another thread.
    if let Err(e) = crate::calls::relax_capture_mode() {
        crate::log!(Debug, "stream capture mode of the watcher unchanged: {e}");
    }
    loop {
        if let Some(s) = current.take() {
            watch(s);
            retire(s);
            crate::log!(
                Info,
                "the coordinator hung up (client {}); running unscheduled, reconnecting",
                s.client_id
            );
        }
        std::thread::sleep(RETRY_EVERY);
        match connect::attempt(&cfg) {
            // Too late for MPS here: this shim's Hello no longer asks.
            Outcome::Welcome(s, _) => {
                if publish(s) {
                    current = Some(s);
                    (features::get().session_started)(s);
                } else {
                    s.retire();
                }
                connect::HANDSHAKE_FD.store(-1, Ordering::SeqCst);
            }
            Outcome::Unavailable => {}
            Outcome::Refused => break,
        }
    }
    RUNNING.store(false, Ordering::Release);
}

/// Returns when the coordinator hangs up (or the socket fails).
fn watch(s: &Session) {
    let Some(fd) = s.socket() else {
        return;
    };
    let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
    // Messages were still waiting when the last turn's reading stopped.
    let mut backlog = false;
    loop {
        // Installed at start-up; loaded each turn all the same (one load).
        let features = features::get();
        // No new scan slice (and so no new candidates) while answers wait.
        if !backlog {
            (features.tick)(s);
        }
        super::marks::poll(s);
        // Messages held while the socket was full: send what it takes now,
        // and look again soon while any is left.
        let held = s.flush_held();
        // A scan under way asks for no sleep at all; it still pauses 1 ms.
        let slice = (features.poll_slice)(s, Duration::from_millis(POLL_SLICE_MS))
            .max(Duration::from_millis(1));
        let slice = super::marks::poll_slice(s, slice);
        // A board without a slot for our GPU yet (or one tandemd released
        // and gave to another GPU): tandemd claims it when it reads a Device
        // report; look again soon.
        s.local.resolve_slot(s.control());
        let slice = if s.local.wants_slot() {
            slice.min(SLOT_RESCAN)
        } else {
            slice
        };
        let slice = if held > 0 {
            slice.min(super::outbox::RETRY_EVERY)
        } else {
            slice
        };
        // SAFETY: `fd` is the live session's socket: only this thread and a
        // fork child close it, so it stays open for this turn of the loop.
        let sock = unsafe { BorrowedFd::borrow_raw(fd) };
        // SAFETY: the process's eventfd, never closed while the process runs
        // (a fork child resets it before its own watcher starts).
        let wake = super::wake::wake_fd().map(|w| unsafe { BorrowedFd::borrow_raw(w) });
        let mut seen = [Seen::default(); 2];
        let both;
        let fds: &[BorrowedFd<'_>] = match wake {
            Some(w) => {
                both = [sock, w];
                &both
            }
            None => core::slice::from_ref(&sock),
        };
        if poll::wait(fds, &mut seen[..fds.len()], Some(slice)).is_err() {
            return;
        }
        if let (Some(w), true) = (wake, seen[1].readable) {
            // A mark was placed: the next turn of the loop polls it.
            super::wake::clear_wake(w);
        }
        let p = seen[0];
        if p.readable {
            // What is waiting, before the next scan slice: one message a
            // turn let a scan that finds candidates faster than their OFFERs
            // are handled pile answers up until the socket was full, and
            // tandemd dropped what it could not send. Bounded, so that marks
            // and held messages are seen to between long handlings.
            let until = std::time::Instant::now() + READ_BUDGET;
            backlog = true;
            for _ in 0..MAX_MESSAGES_PER_TURN {
                match wire::recv(sock, &mut buf) {
                    Ok(got) if got.len == 0 => return,
                    Ok(got) => handle(s, features, &buf[..got.len], got.fd),
                    Err(e) if e.errno() == Some(libc::EAGAIN) => {
                        backlog = false;
                        break;
                    }
                    Err(_) => return,
                }
                if std::time::Instant::now() >= until {
                    break;
                }
            }
            continue;
        }
        backlog = false;
        if p.closed {
            return;
        }
    }
}

/// One message from the coordinator.
fn handle(s: &Session, features: &features::Features, msg: &[u8], fd: Option<OwnedFd>) {
    match wire::Message::decode(msg) {
        Ok(wire::Message::Dedup(d)) => (features.on_dedup)(s, d, fd),
        Ok(wire::Message::Follow(f)) => (features.on_follow)(f, fd),
        Ok(wire::Message::Board(b)) => match fd {
            Some(fd) => {
                s.local
                    .attach_board(fd, b.flags & wire::BOARD_FLAG_WRITABLE != 0, s.control())
            }
            None => crate::log!(Debug, "a Board message without its descriptor"),
        },
        Ok(m) => crate::log!(
            Debug,
            "ignoring a {} message from the coordinator",
            m.type_name()
        ),
        Err(e) => crate::log!(Debug, "unreadable message from the coordinator: {e}"),
    }
}

/// In a child after fork: the parent's watcher thread does not exist here.
pub(super) fn after_fork_in_child() {
    RUNNING.store(false, Ordering::Relaxed);
}
