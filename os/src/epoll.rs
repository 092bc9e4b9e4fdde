//! tandemd's readiness loop: an epoll set with `u64` tokens, and the
//! non-blocking pipe that wakes it.

use core::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{epoll, Timespec};
use rustix::io::Errno;
use rustix::pipe::PipeFlags;

use crate::error::{Error, Result};

/// An epoll instance whose registrations carry `u64` tokens.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// Readiness of one token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The token given at [`Epoll::add`].
    pub token: u64,
    /// Data to read (or a pending error/hang-up that read will report).
    pub readable: bool,
    /// The peer hung up or the socket failed.
    pub hangup: bool,
}

/// Events one [`Epoll::wait`] collects at most.
pub const MAX_EVENTS: usize = 64;

impl Epoll {
    /// A new epoll instance (close-on-exec).
    pub fn new() -> Result<Epoll> {
        let fd = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(Error::at("epoll_create1"))?;
        Ok(Epoll { fd })
    }

    /// Watch `fd` for input and hang-up under `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64) -> Result<()> {
        epoll::add(
            &self.fd,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        )
        .map_err(Error::at("epoll_ctl(EPOLL_CTL_ADD)"))
    }

    /// Watch `fd` (added under `token`) for room to write and hang-up instead
    /// of input: a server that has an answer to send and nothing more to
    /// read from the peer.
    pub fn watch_write(&self, fd: BorrowedFd<'_>, token: u64) -> Result<()> {
        epoll::modify(
            &self.fd,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::OUT | epoll::EventFlags::RDHUP,
        )
        .map_err(Error::at("epoll_ctl(EPOLL_CTL_MOD)"))
    }

    /// Stop watching `fd` (errors ignored: closing the fd also removes it).
    pub fn delete(&self, fd: BorrowedFd<'_>) {
        let _ = epoll::delete(&self.fd, fd);
    }

    /// Wait up to `timeout` (None: forever; at most a minute at a time) and
    /// append what is ready to `out`. A signal ends the wait with nothing.
    pub fn wait(&self, out: &mut Vec<Event>, timeout: Option<Duration>) -> Result<()> {
        let mut evs = [MaybeUninit::<epoll::Event>::uninit(); MAX_EVENTS];
        // Whole milliseconds, as epoll_wait(2) counts.
        let ts = timeout.map(|t| {
            let ms = t.as_millis().min(60_000) as u64;
            Timespec {
                tv_sec: (ms / 1000) as i64,
                tv_nsec: ((ms % 1000) * 1_000_000) as i64,
            }
        });
        let (ready, _) = match epoll::wait(&self.fd, &mut evs, ts.as_ref()) {
            Ok(r) => r,
            Err(Errno::INTR) => return Ok(()),
            Err(e) => return Err(Error::new("epoll_wait", e.raw_os_error())),
        };
        for ev in ready.iter() {
            let bits = ev.flags;
            out.push(Event {
                token: ev.data.u64(),
                readable: bits.contains(epoll::EventFlags::IN),
                hangup: bits.intersects(
                    epoll::EventFlags::HUP | epoll::EventFlags::RDHUP | epoll::EventFlags::ERR,
                ),
            });
        }
        Ok(())
    }
}

/// A non-blocking, close-on-exec pipe: (read end, write end).
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).map_err(Error::at("pipe2"))
}

/// Empty a non-blocking pipe.
pub fn drain_pipe(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 64];
    while let Ok(n) = rustix::io::read(fd, &mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Write one byte to a (non-blocking) pipe; a full pipe already wakes the reader.
pub fn poke(fd: BorrowedFd<'_>) {
    let _ = rustix::io::write(fd, &[1u8]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_poked_pipe_is_ready_under_its_token_until_drained() {
        let ep = Epoll::new().unwrap();
        let (r, w) = pipe().unwrap();
        ep.add(r.as_fd(), 42).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, Some(Duration::from_millis(1))).unwrap();
        assert!(out.is_empty());
        poke(w.as_fd());
        ep.wait(&mut out, Some(Duration::from_secs(1))).unwrap();
        assert_eq!(
            out,
            [Event {
                token: 42,
                readable: true,
                hangup: false
            }]
        );
        drain_pipe(r.as_fd());
        out.clear();
        ep.wait(&mut out, Some(Duration::from_millis(1))).unwrap();
        assert!(out.is_empty(), "drained");
        drop(w);
        ep.wait(&mut out, Some(Duration::from_secs(1))).unwrap();
        assert!(out[0].hangup);
        ep.delete(r.as_fd());
    }

    #[test]
    fn watch_write_reports_room_to_write_instead_of_input() {
        let ep = Epoll::new().unwrap();
        let (r, w) = pipe().unwrap();
        ep.add(w.as_fd(), 7).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, Some(Duration::from_millis(1))).unwrap();
        assert!(out.is_empty(), "a pipe's write end never has input");
        ep.watch_write(w.as_fd(), 7).unwrap();
        ep.wait(&mut out, Some(Duration::from_secs(1))).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].token, 7, "the empty pipe has room: {out:?}");
        drop(r);
    }
}
