//! tandem over MPS: what a client needs to join the NVIDIA MPS control
//! daemon tandemd runs, and the environment variables that carry it into the
//! CUDA driver.
//!
//! tandemd tells a shim that asked ([`crate::wire::HELLO_FLAG_MPS`]) in its
//! Welcome ([`crate::wire::WELCOME_FLAG_MPS`] and the tail encoded here):
//! the pipe directory of the control daemon, the client priority for the
//! class it granted, and an optional cap on the active thread percentage.
//! The shim puts them into its process environment before the driver's
//! `cuInit` runs, since the driver reads them once, when CUDA initialises.
//!
//! Tail layout (after the Welcome's 32 fixed bytes, little-endian):
//!
//! ```text
//! 0 priority u8 (0 normal, 1 below normal)   1 thread_percentage u8 (0: none, else 1..=100)
//! 2 pipe_dir_len u16 (1..=MAX_PIPE_DIR_LEN)  4 pipe_dir[pipe_dir_len] (absolute, no NUL)
//! ```

use crate::error::{Error, Result};

/// The MPS pipe directory (control daemon, servers and clients must agree).
pub const PIPE_DIR_ENV: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// The MPS log directory (the control daemon's and servers' logs).
pub const LOG_DIR_ENV: &str = "CUDA_MPS_LOG_DIRECTORY";
/// A client's priority: [`PRIORITY_NORMAL`] or [`PRIORITY_BELOW_NORMAL`].
pub const CLIENT_PRIORITY_ENV: &str = "CUDA_MPS_CLIENT_PRIORITY";
/// A client's cap on the share of each GPU's threads it may use (1..=100).
pub const THREAD_PERCENTAGE_ENV: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

/// `CUDA_MPS_CLIENT_PRIORITY` for normal priority (the driver's default).
pub const PRIORITY_NORMAL: u8 = 0;
/// `CUDA_MPS_CLIENT_PRIORITY` for below-normal priority.
pub const PRIORITY_BELOW_NORMAL: u8 = 1;

/// Longest pipe directory the Welcome carries. tandemd's configuration
/// allows less (the daemons put unix sockets inside it).
pub const MAX_PIPE_DIR_LEN: usize = 255;
/// Fixed part of the Welcome's MPS tail.
pub const TAIL_FIXED_LEN: usize = 4;

/// How a client joins tandem's MPS control daemon.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MpsJoin {
    /// [`PRIORITY_NORMAL`] or [`PRIORITY_BELOW_NORMAL`].
    pub priority: u8,
    /// 0: no cap from tandem; else 1..=100.
    pub thread_percentage: u8,
    pipe_dir: [u8; MAX_PIPE_DIR_LEN],
    pipe_dir_len: u8,
}

impl core::fmt::Debug for MpsJoin {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MpsJoin")
            .field("priority", &self.priority)
            .field("thread_percentage", &self.thread_percentage)
            .field(
                "pipe_dir",
                &String::from_utf8_lossy(self.pipe_dir()).as_ref(),
            )
            .finish()
    }
}

impl MpsJoin {
    /// Checked construction: the values [`decode_tail`](Self::decode_tail)
    /// accepts, and only those.
    pub fn new(priority: u8, thread_percentage: u8, pipe_dir: &[u8]) -> Result<MpsJoin> {
        if priority > PRIORITY_BELOW_NORMAL {
            return Err(Error::BadValue {
                field: "mps priority",
                value: u64::from(priority),
            });
        }
        if thread_percentage > 100 {
            return Err(Error::BadValue {
                field: "mps thread percentage",
                value: u64::from(thread_percentage),
            });
        }
        if pipe_dir.len() > MAX_PIPE_DIR_LEN {
            return Err(Error::FieldTooLong {
                field: "mps pipe directory",
                len: pipe_dir.len(),
                max: MAX_PIPE_DIR_LEN,
            });
        }
        if pipe_dir.first() != Some(&b'/') || pipe_dir.contains(&0) {
            return Err(Error::BadValue {
                field: "mps pipe directory (not an absolute path without NUL)",
                value: pipe_dir.len() as u64,
            });
        }
        let mut dir = [0u8; MAX_PIPE_DIR_LEN];
        dir[..pipe_dir.len()].copy_from_slice(pipe_dir);
        Ok(MpsJoin {
            priority,
            thread_percentage,
            pipe_dir: dir,
            pipe_dir_len: pipe_dir.len() as u8,
        })
    }

    /// The pipe directory's bytes (absolute, no NUL).
    #[must_use]
    pub fn pipe_dir(&self) -> &[u8] {
        &self.pipe_dir[..usize::from(self.pipe_dir_len)]
    }

    /// Bytes the tail takes.
    #[must_use]
    pub fn tail_len(&self) -> usize {
        TAIL_FIXED_LEN + self.pipe_dir().len()
    }

    /// Writes the tail into `b` (exactly [`tail_len`](Self::tail_len) bytes).
    pub(crate) fn encode_tail(&self, b: &mut [u8]) {
        let dir = self.pipe_dir();
        b[0] = self.priority;
        b[1] = self.thread_percentage;
        b[2..4].copy_from_slice(&(dir.len() as u16).to_le_bytes());
        b[TAIL_FIXED_LEN..TAIL_FIXED_LEN + dir.len()].copy_from_slice(dir);
    }

    /// Decodes a whole tail (`b` is the rest of the Welcome body).
    pub(crate) fn decode_tail(b: &[u8]) -> Result<MpsJoin> {
        if b.len() < TAIL_FIXED_LEN {
            return Err(Error::Truncated {
                what: "Welcome MPS tail",
                need: TAIL_FIXED_LEN,
                have: b.len(),
            });
        }
        let len = usize::from(crate::bytes::get_u16(b, 2));
        if len > MAX_PIPE_DIR_LEN {
            return Err(Error::FieldTooLong {
                field: "mps pipe directory",
                len,
                max: MAX_PIPE_DIR_LEN,
            });
        }
        if b.len() != TAIL_FIXED_LEN + len {
            return Err(Error::LengthMismatch {
                what: "Welcome MPS tail",
                declared: TAIL_FIXED_LEN + len,
                actual: b.len(),
            });
        }
        MpsJoin::new(b[0], b[1], &b[TAIL_FIXED_LEN..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_every_field() {
        let j = MpsJoin::new(PRIORITY_BELOW_NORMAL, 30, b"/run/tandem/mps").unwrap();
        assert_eq!(j.pipe_dir(), b"/run/tandem/mps");
        assert_eq!(j.tail_len(), 4 + 15);
        assert!(MpsJoin::new(2, 0, b"/d").is_err(), "priority 2");
        assert!(MpsJoin::new(0, 101, b"/d").is_err(), "101 percent");
        assert!(MpsJoin::new(0, 0, b"").is_err(), "empty dir");
        assert!(MpsJoin::new(0, 0, b"run/mps").is_err(), "relative dir");
        assert!(MpsJoin::new(0, 0, b"/a\0b").is_err(), "NUL");
        let long = [b'/'; MAX_PIPE_DIR_LEN + 1];
        assert!(matches!(
            MpsJoin::new(0, 0, &long),
            Err(Error::FieldTooLong { .. })
        ));
        assert!(MpsJoin::new(0, 100, &long[..MAX_PIPE_DIR_LEN]).is_ok());
    }

    #[test]
    fn tail_round_trips_and_rejects_bad_lengths() {
        let j = MpsJoin::new(PRIORITY_NORMAL, 0, b"/run/tandem/mps").unwrap();
        let mut b = vec![0u8; j.tail_len()];
        j.encode_tail(&mut b);
        assert_eq!(&b[..4], &[0, 0, 15, 0]);
        assert_eq!(MpsJoin::decode_tail(&b), Ok(j));
        for n in 0..b.len() {
            assert!(MpsJoin::decode_tail(&b[..n]).is_err(), "{n} bytes");
        }
        let mut longer = b.clone();
        longer.push(b'x');
        assert!(matches!(
            MpsJoin::decode_tail(&longer),
            Err(Error::LengthMismatch { .. })
        ));
        let mut bad = b.clone();
        bad[0] = 7;
        assert!(MpsJoin::decode_tail(&bad).is_err());
    }
}
