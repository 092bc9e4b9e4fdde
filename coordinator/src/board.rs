//! tandemd's side of the GPU board ([`tandem_proto::board`]): it creates the
//! node's board, hands each shim that asks a descriptor of it (writable only
//! to clients granted the inference class), claims a GPU's slot as soon as
//! a client reports that GPU and releases it when no client is on that GPU
//! any more, and repairs the open-request count a client leaves behind when
//! it goes.
//!
//! tandemd never reads the board to decide anything: the shims react to it
//! on their own launch paths (DESIGN.md contract 8). Without a board (the
//! memfd could not be made) shims run with tandemd's gates and limits alone.

use std::os::fd::{AsFd, OwnedFd};

use tandem_proto::board::{Board, BOARD_LEN};
use tandem_proto::shm::{self, Mapping};

/// The node's board: its memfd and tandemd's own (writable) mapping.
#[derive(Debug)]
pub struct NodeBoard {
    fd: OwnedFd,
    map: Mapping,
}

impl NodeBoard {
    /// A fresh, sealed, initialised board.
    pub fn create() -> tandem_proto::Result<NodeBoard> {
        let (fd, map) = shm::create(c"tandem-gpu-board", BOARD_LEN)?;
        // SAFETY: a fresh writable shared mapping of BOARD_LEN bytes, owned by
        // the NodeBoard that returns it and accessed only through atomics.
        unsafe { Board::init(map.as_ptr(), map.len())? };
        Ok(NodeBoard { fd, map })
    }

    /// The board, unless a writable client overwrote its header (then
    /// tandemd stops claiming and repairing; the shims ignore such a board
    /// when they map it, and keep the one they have).
    #[must_use]
    pub fn board(&self) -> Option<&Board> {
        // SAFETY: a live shared mapping of BOARD_LEN bytes for as long as
        // `self`, accessed only through atomics.
        unsafe { Board::from_raw(self.map.as_ptr(), self.map.len()) }.ok()
    }

    /// A descriptor to send a client: a duplicate of the board's own
    /// (writable) or a read-only reopening of it.
    pub fn descriptor(&self, writable: bool) -> tandem_proto::Result<OwnedFd> {
        if writable {
            self.fd.try_clone().map_err(|e| tandem_proto::Error::Os {
                op: "dup",
                errno: e.raw_os_error().unwrap_or(0),
            })
        } else {
            shm::reopen_read_only(self.fd.as_fd())
        }
    }

    /// Claims the slot of GPU `gpu` (a client reported it). `None`: board full.
    pub fn claim(&self, gpu: u64) -> Option<usize> {
        self.board()?.claim(gpu)
    }

    /// Releases the slot of GPU `gpu` (no client is on it any more), if it
    /// has one: its index.
    pub fn release(&self, gpu: u64) -> Option<usize> {
        self.board()?.release(gpu)
    }

    /// A client left with `open` explicit requests counted in `slot`.
    pub fn repair(&self, slot: Option<usize>, open: u64) {
        if let (Some(slot), true, Some(b)) = (slot, open > 0, self.board()) {
            b.end_requests(slot, open);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_descriptors_cannot_map_writable_and_see_the_bumps() {
        let nb = NodeBoard::create().unwrap();
        let slot = nb.claim(42).unwrap();
        let ro = nb.descriptor(false).unwrap();
        assert!(shm::map_received(ro.as_fd(), BOARD_LEN).is_err());
        let view = shm::map_received_read_only(ro.as_fd(), BOARD_LEN).unwrap();
        // SAFETY: a live read-only mapping of the board, only read.
        let b = unsafe { Board::from_raw(view.as_ptr(), view.len()) }.unwrap();
        assert_eq!(b.find(42), Some(slot));
        let rw = nb.descriptor(true).unwrap();
        let w = shm::map_received(rw.as_fd(), BOARD_LEN).unwrap();
        // SAFETY: a live writable mapping of the board.
        let wb = unsafe { Board::from_raw(w.as_ptr(), w.len()) }.unwrap();
        wb.slot(slot).unwrap().begin_request();
        assert_eq!(b.slot(slot).unwrap().seq(), 1);
        assert_eq!(b.slot(slot).unwrap().open(), 1);
        nb.repair(Some(slot), 1);
        assert_eq!(b.slot(slot).unwrap().open(), 0);
        nb.repair(None, 5);
    }
}
