//! `tandem-os`: the one thin, typed layer over the system calls that
//! `libtandem.so`, `tandem-proto` and `tandemd` make to talk to each other.
//!
//! * [`socket`]: unix `SOCK_SEQPACKET` sockets: create (blocking or not),
//!   bind and listen, the one bounded [`socket::connect`], accept,
//!   `SO_PEERCRED`, timeouts, waiting for readiness.
//! * [`msg`]: one datagram with at most one descriptor (`SCM_RIGHTS`).
//! * [`memfd`]: memfds, their size, seals, and read-only reopening.
//! * [`mm`]: the owned shared [`Mapping`].
//! * [`futex`]: bounded, cross-process `FUTEX_WAIT` / `FUTEX_WAKE`.
//! * [`epoll`]: tandemd's readiness loop and its wake-up pipe.
//! * [`rlimit`]: the open-file limit, read and raised.
//! * [`poll`]: waiting for a few descriptors at once, and an eventfd to
//!   wake the thread that waits.
//!
//! # One error type
//!
//! Every call returns [`Result`], whose [`Error`] keeps the operation's name
//! and the raw `errno` and nothing else: it is `Copy`, never allocates, and
//! can be built and passed on the shim's allocation-free and signal-safe
//! paths. Callers that speak `std::io` convert it (`From<Error> for
//! io::Error`); `tandem-proto` wraps it as `Error::Os { op, errno }`.
//!
//! # Why rustix
//!
//! The layer is built on `rustix` rather than `nix` (which the design card
//! names). Both are thin and typed over the raw calls, but the shim calls
//! these functions inside an interposed driver call, in a `fork` child
//! handler and on a launch path that must never allocate: rustix takes
//! socket addresses, control-message buffers and paths in caller (stack)
//! storage and reports `Errno` by value, where nix's `sendmsg`/`recvmsg`
//! build their control messages in a `Vec` and its path arguments may
//! allocate. rustix's default Linux backend makes the system calls directly
//! (no libc `errno`, no `libc` wrapper in between), which is also what the
//! futex and memfd calls did by hand before. Nothing here wraps more than one
//! system call except where the caller always needs the pair (a bounded
//! connect; the `EINTR` retries).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod epoll;
pub mod error;
pub mod futex;
pub mod memfd;
pub mod mm;
pub mod msg;
pub mod poll;
pub mod rlimit;
pub mod socket;

pub use error::{Error, Result};
pub use mm::Mapping;
