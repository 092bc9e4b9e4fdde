//! Waiting for several descriptors at once (`poll(2)`), and the eventfd a
//! thread uses to wake another that waits there.
//!
//! Users: the shim's watcher thread (its coordinator socket and the eventfd
//! a launching thread writes when it places the first completion mark after
//! an idle spell), tandemd's stats server (its wake-up pipe and listeners)
//! and `tandemctl top` (the terminal). No allocation: the descriptors and
//! what each showed live in the caller's arrays.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};

use crate::error::{Error, Result, EINTR};

/// Descriptors one [`wait`] may watch at most.
pub const MAX_FDS: usize = 4;

/// What one descriptor showed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Data to read (or a listener's pending connection).
    pub readable: bool,
    /// The peer hung up or shut down its writing side, or the descriptor
    /// failed (`POLLHUP`, `POLLRDHUP`, `POLLERR`, `POLLNVAL`).
    pub closed: bool,
}

/// Waits until one of `fds` is readable or closed, at most `timeout`
/// (`None`: no limit), and fills `seen` (same order). Returns how many
/// showed something; 0 after the timeout or a signal (`EINTR`: the caller's
/// loop simply goes round again).
///
/// # Errors
/// No descriptor, more than [`MAX_FDS`], or a `seen` of another length
/// (`EINVAL`), or `poll` failing.
pub fn wait(fds: &[BorrowedFd<'_>], seen: &mut [Seen], timeout: Option<Duration>) -> Result<usize> {
    const EINVAL: i32 = rustix::io::Errno::INVAL.raw_os_error();
    let Some(&first) = fds.first() else {
        return Err(Error::new("poll", EINVAL));
    };
    if fds.len() > MAX_FDS || seen.len() != fds.len() {
        return Err(Error::new("poll", EINVAL));
    }
    let want = PollFlags::IN | PollFlags::RDHUP;
    // The entries past `fds.len()` repeat the first and are never passed on.
    let mut p: [PollFd<'_>; MAX_FDS] = core::array::from_fn(|i| {
        PollFd::from_borrowed_fd(fds.get(i).copied().unwrap_or(first), want)
    });
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: t.subsec_nanos().into(),
    });
    let n = match rustix::event::poll(&mut p[..fds.len()], ts.as_ref()) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == EINTR => 0,
        Err(e) => return Err(Error::new("poll", e.raw_os_error())),
    };
    let closed = PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR | PollFlags::NVAL;
    for (s, p) in seen.iter_mut().zip(&p[..fds.len()]) {
        let r = p.revents();
        *s = Seen {
            readable: r.contains(PollFlags::IN),
            closed: r.intersects(closed),
        };
    }
    Ok(n)
}

/// A non-blocking, close-on-exec eventfd with counter 0.
///
/// # Errors
/// `eventfd` failing.
pub fn eventfd() -> Result<OwnedFd> {
    rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
        .map_err(Error::at("eventfd"))
}

/// Adds 1 to an eventfd's counter, which makes it readable. A failure (the
/// counter at its maximum: it is readable already) is ignored.
pub fn eventfd_signal(fd: BorrowedFd<'_>) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Resets a non-blocking eventfd's counter to 0 (not readable any more).
pub fn eventfd_clear(fd: BorrowedFd<'_>) {
    let mut v = [0u8; 8];
    let _ = rustix::io::read(fd, &mut v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_eventfd_is_readable_once_signalled_until_cleared() {
        let e = eventfd().unwrap();
        let mut seen = [Seen::default()];
        let n = wait(&[e.as_fd()], &mut seen, Some(Duration::from_millis(1))).unwrap();
        assert_eq!((n, seen[0]), (0, Seen::default()), "nothing yet");
        eventfd_signal(e.as_fd());
        eventfd_signal(e.as_fd());
        let n = wait(&[e.as_fd()], &mut seen, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(n, 1);
        assert!(seen[0].readable && !seen[0].closed, "{seen:?}");
        eventfd_clear(e.as_fd());
        let n = wait(&[e.as_fd()], &mut seen, Some(Duration::from_millis(1))).unwrap();
        assert_eq!(
            (n, seen[0]),
            (0, Seen::default()),
            "one read clears both signals"
        );
    }

    #[test]
    fn each_descriptor_says_what_it_showed_and_a_hangup_is_closed() {
        let (r1, w1) = crate::epoll::pipe().unwrap();
        let (r2, w2) = crate::epoll::pipe().unwrap();
        let mut seen = [Seen::default(); 2];
        crate::epoll::poke(w2.as_fd());
        let n = wait(&[r1.as_fd(), r2.as_fd()], &mut seen, None).unwrap();
        assert_eq!(n, 1);
        assert_eq!(seen[0], Seen::default());
        assert!(seen[1].readable && !seen[1].closed);
        drop(w1);
        crate::epoll::drain_pipe(r2.as_fd());
        let n = wait(
            &[r1.as_fd(), r2.as_fd()],
            &mut seen,
            Some(Duration::from_secs(5)),
        )
        .unwrap();
        assert_eq!(n, 1);
        assert!(seen[0].closed, "the writer is gone: {seen:?}");
        assert_eq!(seen[1], Seen::default());
        drop(w2);
    }

    #[test]
    fn no_descriptor_too_many_or_a_short_seen_are_refused() {
        let e = eventfd().unwrap();
        let fds = [e.as_fd(); MAX_FDS + 1];
        let mut seen = [Seen::default(); MAX_FDS + 1];
        assert!(wait(&fds, &mut seen, Some(Duration::ZERO)).is_err());
        assert!(wait(&fds[..2], &mut seen[..1], Some(Duration::ZERO)).is_err());
        assert!(
            wait(&[], &mut [], Some(Duration::ZERO)).is_err(),
            "nothing to wait for"
        );
    }
}
