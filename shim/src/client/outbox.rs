//! Messages the coordinator must not miss, held back while its socket is full.
//!
//! Most of what a shim sends may be lost (a Hello's answer times out) or is
//! sent again (a FuncName: `super::funcs`). Some may not: weight dedup's
//! WITHDRAW says that a job no longer maps a shared copy, and without it
//! tandemd keeps counting the job as a holder, and the copy's memory open,
//! until the job leaves; follow mode's UNSHARE and UNMAP are the same kind.
//!
//! Such a message is *posted*: sent at once when nothing is held back and the
//! socket takes it, else queued behind the others, in order, and sent by the
//! watcher thread as the coordinator drains the socket (it tries every
//! [`RETRY_EVERY`] while any is held). A request that waits for its answer is
//! never queued (its asker would give up first): it is sent *in order*, only
//! when nothing is held, or not at all.
//!
//! The queue is one session's: a coordinator that goes away takes what was
//! held for it along (its successor is told the state afresh,
//! `super::features`). Cold paths only: one lock, and a copy of the message
//! (and of its descriptor) for each one held.

use std::collections::VecDeque;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Most messages held at once (a few hundred KiB): past it a posted message
/// is lost, with one warning per full spell.
pub const MAX_HELD: usize = 4096;

/// How often the watcher tries the socket again while messages are held.
pub const RETRY_EVERY: Duration = Duration::from_millis(5);

/// Why the socket did not take a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Full: the coordinator is not reading (yet). Worth trying again.
    Full,
    /// Closed or broken: the session is ending.
    Closed,
}

/// What became of a posted message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Posted {
    /// The socket took it.
    Sent,
    /// Queued behind earlier ones; the watcher sends it.
    Held,
    /// Neither: the session is ending, the queue is full, or its descriptor
    /// could not be copied.
    Lost,
}

struct Message {
    bytes: Vec<u8>,
    fd: Option<OwnedFd>,
}

#[derive(Default)]
struct Queue {
    held: VecDeque<Message>,
    /// Messages held since the queue was last empty (for the log).
    spell: usize,
    /// The queue overflowed in this spell (warned once).
    overflowed: bool,
}

/// One session's held messages.
#[derive(Default)]
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
}

impl Outbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic aborts the process (panic = "abort"): never poisoned.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `msg` through `send` now if nothing is held, else (or if the
    /// socket is full) holds it behind the others.
    pub(crate) fn post(
        &self,
        msg: &[u8],
        fd: Option<BorrowedFd<'_>>,
        send: impl FnOnce(&[u8], Option<BorrowedFd<'_>>) -> Result<(), Refused>,
    ) -> Posted {
        let mut q = self.lock();
        if q.held.is_empty() {
            match send(msg, fd) {
                Ok(()) => return Posted::Sent,
                Err(Refused::Closed) => return Posted::Lost,
                Err(Refused::Full) => {}
            }
        }
        if q.held.len() >= MAX_HELD {
            if !q.overflowed {
                q.overflowed = true;
                crate::log!(
                    Warn,
                    "the coordinator has not read for a while: {MAX_HELD} messages are held \
                     for it, and later ones are dropped"
                );
            }
            return Posted::Lost;
        }
        let fd = match fd.map(|f| f.try_clone_to_owned()).transpose() {
            Ok(fd) => fd,
            Err(e) => {
                crate::log!(Debug, "cannot hold a message's descriptor ({e}); dropped");
                return Posted::Lost;
            }
        };
        if q.held.is_empty() {
            crate::log!(
                Debug,
                "the coordinator's socket is full: holding messages back until it drains"
            );
        }
        q.held.push_back(Message {
            bytes: msg.to_vec(),
            fd,
        });
        q.spell += 1;
        Posted::Held
    }

    /// Sends `msg` through `send` only if nothing is held (so it cannot pass
    /// a posted message); `false` if it did not go out.
    pub(crate) fn send_in_order(
        &self,
        msg: &[u8],
        fd: Option<BorrowedFd<'_>>,
        send: impl FnOnce(&[u8], Option<BorrowedFd<'_>>) -> Result<(), Refused>,
    ) -> bool {
        let q = self.lock();
        q.held.is_empty() && send(msg, fd).is_ok()
    }

    /// Sends held messages, oldest first, until the socket refuses one;
    /// returns how many are still held.
    pub(crate) fn flush(
        &self,
        mut send: impl FnMut(&[u8], Option<BorrowedFd<'_>>) -> Result<(), Refused>,
    ) -> usize {
        let mut q = self.lock();
        while let Some(m) = q.held.front() {
            if send(&m.bytes, m.fd.as_ref().map(std::os::fd::AsFd::as_fd)).is_err() {
                return q.held.len();
            }
            q.held.pop_front();
        }
        if q.spell > 0 {
            crate::log!(
                Debug,
                "the coordinator's socket drained: {} held messages sent",
                q.spell
            );
            q.spell = 0;
            q.overflowed = false;
        }
        0
    }

    /// How many messages are held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// Drops every held message (and closes its descriptor): the session ended.
    pub(crate) fn clear(&self) {
        *self.lock() = Queue::default();
    }

    /// In a child after fork (one thread, async-signal-safe calls only):
    /// closes the child's copies of the held descriptors, which would
    /// otherwise keep what they name (an exported shared copy) alive for
    /// the child's life. Frees nothing; skipped if the lock was held at the
    /// fork (a parent thread was sending: its holder does not exist here).
    pub(crate) fn close_fds_in_child(&self) {
        let Ok(mut q) = self.queue.try_lock() else {
            return;
        };
        for m in q.held.iter_mut() {
            // Dropping an OwnedFd is one close(2).
            drop(m.fd.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::fd::{AsFd, AsRawFd};

    /// A socket double: takes messages while `room` lasts, recording them.
    struct Peer {
        room: usize,
        closed: bool,
        got: Vec<Vec<u8>>,
        fds: Vec<i32>,
    }

    impl Peer {
        fn new(room: usize) -> RefCell<Peer> {
            RefCell::new(Peer {
                room,
                closed: false,
                got: Vec::new(),
                fds: Vec::new(),
            })
        }
    }

    fn sender(
        p: &RefCell<Peer>,
    ) -> impl Fn(&[u8], Option<BorrowedFd<'_>>) -> Result<(), Refused> + '_ {
        move |m, fd| {
            let mut p = p.borrow_mut();
            if p.closed {
                return Err(Refused::Closed);
            }
            if p.room == 0 {
                return Err(Refused::Full);
            }
            p.room -= 1;
            p.got.push(m.to_vec());
            if let Some(fd) = fd {
                // Still open when sent: fcntl answers on it.
                // SAFETY: F_GETFD on a borrowed descriptor reads its flags only.
                let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
                assert!(
                    flags >= 0,
                    "a held descriptor was closed before it was sent"
                );
                p.fds.push(fd.as_raw_fd());
            }
            Ok(())
        }
    }

    #[test]
    fn a_full_socket_holds_messages_and_they_go_out_in_order() {
        let o = Outbox::default();
        let p = Peer::new(1);
        assert_eq!(o.post(b"a", None, sender(&p)), Posted::Sent);
        assert_eq!(o.post(b"b", None, sender(&p)), Posted::Held);
        // Room again, but "c" must not pass "b".
        p.borrow_mut().room = 10;
        assert_eq!(o.post(b"c", None, sender(&p)), Posted::Held);
        assert_eq!(o.held(), 2);
        assert!(
            !o.send_in_order(b"ask", None, sender(&p)),
            "an ask must not pass them"
        );
        assert_eq!(o.flush(sender(&p)), 0);
        assert!(o.send_in_order(b"ask", None, sender(&p)));
        let got = p.borrow().got.clone();
        assert_eq!(got, [&b"a"[..], b"b", b"c", b"ask"]);
    }

    #[test]
    fn a_flush_stops_at_the_first_refusal_and_keeps_the_rest() {
        let o = Outbox::default();
        let p = Peer::new(0);
        for m in [b"1", b"2", b"3"] {
            assert_eq!(o.post(m, None, sender(&p)), Posted::Held);
        }
        p.borrow_mut().room = 1;
        assert_eq!(o.flush(sender(&p)), 2);
        assert_eq!(
            o.flush(sender(&p)),
            2,
            "no room: nothing sent, nothing lost"
        );
        p.borrow_mut().room = 5;
        assert_eq!(o.flush(sender(&p)), 0);
        assert_eq!(
            p.borrow().got,
            [b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]
        );
    }

    #[test]
    fn a_held_message_keeps_its_own_copy_of_the_descriptor() {
        let o = Outbox::default();
        let p = Peer::new(0);
        let file = std::fs::File::open("/dev/null").unwrap();
        let raw = file.as_raw_fd();
        assert_eq!(o.post(b"x", Some(file.as_fd()), sender(&p)), Posted::Held);
        drop(file); // the poster's copy goes; the held one must stay open
        p.borrow_mut().room = 1;
        assert_eq!(o.flush(sender(&p)), 0);
        let sent = p.borrow().fds.clone();
        assert_eq!(sent.len(), 1);
        assert_ne!(sent[0], raw, "a copy, not the poster's descriptor");
    }

    #[test]
    fn a_closed_socket_loses_the_message_and_a_full_queue_the_newest() {
        let o = Outbox::default();
        let p = Peer::new(0);
        p.borrow_mut().closed = true;
        assert_eq!(o.post(b"x", None, sender(&p)), Posted::Lost);
        assert_eq!(o.held(), 0);
        p.borrow_mut().closed = false;
        for i in 0..MAX_HELD {
            assert_eq!(o.post(&i.to_le_bytes(), None, sender(&p)), Posted::Held);
        }
        assert_eq!(o.post(b"over", None, sender(&p)), Posted::Lost);
        assert_eq!(o.held(), MAX_HELD);
        p.borrow_mut().room = usize::MAX;
        assert_eq!(o.flush(sender(&p)), 0);
        let got = &p.borrow().got;
        assert_eq!(got.len(), MAX_HELD);
        assert_eq!(
            got[MAX_HELD - 1],
            (MAX_HELD - 1).to_le_bytes(),
            "the oldest kept"
        );
    }

    #[test]
    fn clearing_closes_the_held_descriptors() {
        let o = Outbox::default();
        let p = Peer::new(0);
        let (r, w) = std::io::pipe().unwrap();
        assert_eq!(o.post(b"x", Some(w.as_fd()), sender(&p)), Posted::Held);
        drop(w);
        // A pipe reads end-of-file only once every write end is closed.
        let mut r = r;
        set_nonblocking(&r);
        let mut b = [0u8; 1];
        let open = std::io::Read::read(&mut r, &mut b);
        assert!(open.is_err(), "the held copy keeps the pipe open: {open:?}");
        o.clear();
        assert_eq!(std::io::Read::read(&mut r, &mut b).unwrap(), 0);
        assert_eq!(o.held(), 0);
    }

    #[test]
    fn a_fork_child_closes_its_copies_of_the_held_descriptors() {
        let o = Outbox::default();
        let p = Peer::new(0);
        let (mut r, w) = std::io::pipe().unwrap();
        assert_eq!(o.post(b"x", Some(w.as_fd()), sender(&p)), Posted::Held);
        drop(w);
        set_nonblocking(&r);
        o.close_fds_in_child();
        let mut b = [0u8; 1];
        assert_eq!(std::io::Read::read(&mut r, &mut b).unwrap(), 0);
    }

    fn set_nonblocking(f: &impl AsRawFd) {
        // SAFETY: F_SETFL on a descriptor the caller owns.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(rc, 0);
    }
}
