//! Answers from tandemd to the program threads waiting for them: a caller
//! announces the request id it is about to send ([`Mailbox::expect`]), the
//! watcher thread delivers each SHARED / MAPPED it reads ([`Mailbox::deliver`]),
//! and the caller waits, bounded, for its own ([`Mailbox::wait`]). An answer
//! nobody waits for (its caller gave up, or a re-offer after a reconnect)
//! is handed back to the deliverer to log, and its fd closed.

use std::os::fd::OwnedFd;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use tandem_proto::follow::Follow;

/// One request's slot.
struct Slot {
    request: u64,
    answer: Option<(Follow, Option<OwnedFd>)>,
}

/// See the module docs.
pub struct Mailbox {
    slots: Mutex<Vec<Slot>>,
    arrived: Condvar,
}

impl Mailbox {
    /// An empty mailbox.
    pub const fn new() -> Mailbox {
        Mailbox {
            slots: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
        }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        // A panic aborts the process (panic = "abort"): never poisoned in use.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announces `request` before it is sent, so an answer that comes back
    /// before the caller waits is kept.
    pub fn expect(&self, request: u64) {
        self.slots().push(Slot {
            request,
            answer: None,
        });
    }

    /// Gives the answer to its waiting caller; `Some` (the answer back) when
    /// nobody expects it.
    pub fn deliver(&self, f: Follow, fd: Option<OwnedFd>) -> Option<(Follow, Option<OwnedFd>)> {
        let mut slots = self.slots();
        match slots
            .iter_mut()
            .find(|s| s.request == f.request && s.answer.is_none())
        {
            Some(s) => {
                s.answer = Some((f, fd));
                drop(slots);
                self.arrived.notify_all();
                None
            }
            None => Some((f, fd)),
        }
    }

    /// Waits until the answer to `request` arrives or `deadline` passes; the
    /// slot is gone either way (a late answer is then unexpected).
    pub fn wait(&self, request: u64, deadline: Instant) -> Option<(Follow, Option<OwnedFd>)> {
        let mut slots = self.slots();
        loop {
            if let Some(i) = slots
                .iter()
                .position(|s| s.request == request && s.answer.is_some())
            {
                return slots.swap_remove(i).answer;
            }
            let now = Instant::now();
            if now >= deadline {
                slots.retain(|s| s.request != request);
                return None;
            }
            slots = self
                .arrived
                .wait_timeout(slots, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Slots waiting (tests).
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.slots().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tandem_proto::follow::{FollowOp, FollowStatus};

    fn answer(request: u64) -> Follow {
        Follow::new(FollowOp::Map, request, b"m", 4096)
            .unwrap()
            .answer(FollowStatus::OK)
    }

    #[test]
    fn an_answer_reaches_the_caller_that_expects_it_even_before_it_waits() {
        let m = Mailbox::new();
        m.expect(1);
        m.expect(2);
        assert!(m.deliver(answer(2), None).is_none());
        let soon = Instant::now() + Duration::from_millis(1);
        assert_eq!(m.wait(2, soon).map(|a| a.0.request), Some(2));
        assert!(m.wait(1, soon).is_none(), "1 never answered");
        assert_eq!(m.pending(), 0, "both slots gone");
        // Late or unknown answers go back to the deliverer.
        assert!(m.deliver(answer(1), None).is_some());
        assert!(m.deliver(answer(9), None).is_some());
    }

    #[test]
    fn a_waiter_wakes_when_another_thread_delivers() {
        static M: Mailbox = Mailbox::new();
        M.expect(7);
        let t = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            assert!(M.deliver(answer(7), None).is_none());
        });
        let got = M.wait(7, Instant::now() + Duration::from_secs(10));
        t.join().unwrap();
        assert_eq!(
            got.map(|a| (a.0.request, a.0.op)),
            Some((7, FollowOp::Mapped))
        );
    }
}
