//! Weight deduplication, the shim's side (`TANDEM_SHARE_WEIGHTS=on`).
//!
//! When the coordinator's Welcome allows sharing, `cuMemAlloc_v2` of 2 MiB or
//! more is backed by the VMM API instead: one reserved range, one shareable
//! physical allocation per 2 MiB granule, mapped read-write; the program gets
//! the same kind of pointer and frees it with `cuMemFree_v2` as before.
//!
//! The watcher thread then, every `TANDEM_DEDUP_SCAN_MS` (default 1000 ms),
//! copies granules to the host on its own lowest-priority stream and hashes
//! them; a granule stable by [`granules::Stability`]'s rules goes to the
//! coordinator as a CANDIDATE. The coordinator matches candidates of one trust
//! group and GPU and drives the rest (see `tandem_proto::dedup`): PUBLISH (this
//! granule becomes the shared copy: mapped read-only, re-hashed, exported) and
//! OFFER (compare this granule with a shared copy byte for byte and, if equal,
//! remap it to that copy read-only and release the private memory).
//!
//! Writes: a driver copy or memset into shared memory first gives this process
//! a private copy again (copy-on-write, [`before_write`]); a kernel writing into
//! it faults this process only (read-only mapping), and [`illegal_address`]
//! says so in one line. Remaps run with the program's submissions held back and
//! the context drained ([`quiesce`]).

mod granules;
mod hash;
mod merge;
pub mod quiesce;
mod requests;
mod state;
mod stats;

use core::sync::atomic::{AtomicBool, Ordering};
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tandem_proto::dedup::{Dedup, DedupOp};

use crate::client::session::Session;
use crate::types::{CUdeviceptr, CuResult};
use granules::{Backing, Rule};
use state::{send, state, FORKED, MIN_BYTES};
pub use stats::summary;
use stats::{SHARED_BYTES, SHARED_GRANULES};

// ---- knobs ----

struct Knobs {
    scan: Duration,
    rule: Rule,
}

fn knobs() -> &'static Knobs {
    static K: std::sync::OnceLock<Knobs> = std::sync::OnceLock::new();
    K.get_or_init(|| Knobs {
        scan: Duration::from_millis(crate::client::env_u64(
            c"TANDEM_DEDUP_SCAN_MS",
            1000,
            10,
            600_000,
        )),
        rule: Rule {
            stable_checks: crate::client::env_u64(c"TANDEM_DEDUP_STABLE_CHECKS", 3, 2, 1000) as u32,
        },
    })
}

/// A Dedup message from the coordinator (watcher thread).
pub fn on_message(s: &Session, d: Dedup, fd: Option<OwnedFd>) {
    if FORKED.load(Ordering::Relaxed) || d.op.from_shim() {
        return;
    }
    let reply = match d.op {
        DedupOp::Publish => requests::publish(&d),
        DedupOp::Offer => requests::offer(&d, fd),
        DedupOp::Forget => return requests::forget(&d),
        _ => return,
    };
    let (msg, fd) = reply;
    send(s, msg, fd.as_ref().map(|f| std::os::fd::AsFd::as_fd(f)));
}

/// The coordinator went away: what it knew is gone with it. Shared granules
/// stay mapped (correct, now orphans); candidates go out again to the next one.
pub fn session_lost() {
    if FORKED.load(Ordering::Relaxed) {
        return;
    }
    let mut st = state();
    for a in st.table.allocs_mut() {
        for g in &mut a.granules {
            g.track.sent = false;
            if let Backing::Shared { orphan, .. } = &mut g.backing {
                *orphan = true;
            }
        }
    }
}

/// How long the watcher may sleep before the next [`tick`] is due: zero while
/// a scan pass is under way (it runs in slices between the coordinator's
/// messages), else the scan period.
pub fn poll_slice(s: &Session, default: Duration) -> Duration {
    // Not only once dedup-backed memory exists: the first allocation may come
    // while the watcher sleeps, and its first scan must not wait a whole slice.
    if !s.share_weights {
        default
    } else if SCANNING.load(Ordering::Relaxed) {
        Duration::ZERO
    } else {
        default.min(knobs().scan)
    }
}

/// A scan pass is under way (more slices to run).
static SCANNING: AtomicBool = AtomicBool::new(false);

/// Longest one scan slice holds the watcher thread from the coordinator's
/// messages.
const SCAN_SLICE: Duration = Duration::from_millis(20);

/// Periodic work on the watcher thread: one slice of the scan pass under way,
/// or a new pass every `TANDEM_DEDUP_SCAN_MS` (a pass is one check of every
/// granule; a long pass simply makes the period longer).
pub fn tick(s: &Session) {
    if !s.share_weights || FORKED.load(Ordering::Relaxed) || !quiesce::active() {
        return;
    }
    static NEXT: Mutex<Option<Instant>> = Mutex::new(None);
    let now = Instant::now();
    let new_pass = {
        let mut next = NEXT.lock().unwrap_or_else(|p| p.into_inner());
        let due = next.is_none_or(|t| now >= t);
        if due && !SCANNING.load(Ordering::Relaxed) {
            *next = Some(now + knobs().scan);
            true
        } else {
            false
        }
    };
    if !new_pass && !SCANNING.load(Ordering::Relaxed) {
        return;
    }
    let more = merge::scan_step(s, knobs().rule, new_pass, now + SCAN_SLICE);
    SCANNING.store(more, Ordering::Relaxed);
}

// ---- hooks' entry points ----

/// `cuMemAlloc_v2` for a client allowed to share: a dedup-backed allocation of
/// `bytes`, or `None` to let the caller allocate normally (fail-open: any
/// driver error, another context, or a fork child).
pub fn alloc(bytes: usize) -> Option<CUdeviceptr> {
    if FORKED.load(Ordering::Relaxed) || bytes < MIN_BYTES {
        return None;
    }
    merge::alloc(bytes)
        .map_err(|e| crate::log!(Debug, "dedup: plain allocation of {bytes} bytes ({e})"))
        .ok()
}

/// `cuMemFree_v2(dptr)`: `Some(result)` when `dptr` is a dedup-backed
/// allocation (released here), `None` when it is not ours.
pub fn free(dptr: CUdeviceptr) -> Option<CuResult> {
    if !quiesce::active() || FORKED.load(Ordering::Relaxed) {
        return None;
    }
    merge::free(dptr)
}

/// Before a driver-visible write (copy, memset) of `len` bytes at `dst`:
/// granules of it that map a shared copy get a private copy first. Called from
/// inside the hook's submission bracket.
#[inline]
pub fn before_write(dst: CUdeviceptr, len: usize) {
    if !quiesce::active() || len == 0 {
        return;
    }
    if SHARED_GRANULES.load(Ordering::Relaxed) != 0 {
        merge::copy_on_write(dst, len as u64);
    }
    merge::note_copy_write(dst, len as u64);
}

/// [`before_write`] for a write whose extent takes work to find (a 2D or 3D
/// copy's descriptor, a pitched memset): `span` is asked only when this
/// process has dedup-backed memory, so without dedup the cost stays one
/// relaxed load. It answers `(dst, len)`, or `None` when there is nothing to
/// check or the extent cannot be known (no descriptor, a destination that is
/// not device memory, sizes that overflow): nothing is done then, and the
/// driver answers the call.
#[inline]
pub fn before_write_with(span: impl FnOnce() -> Option<(CUdeviceptr, usize)>) {
    if !quiesce::active() {
        return;
    }
    if let Some((dst, len)) = span() {
        before_write(dst, len);
    }
}

/// A call returned `CUDA_ERROR_ILLEGAL_ADDRESS`: when this process maps shared
/// read-only memory, say once that a kernel writing into it is the likely cause.
#[cold]
pub fn illegal_address() {
    static SAID: AtomicBool = AtomicBool::new(false);
    let shared = SHARED_BYTES.load(Ordering::Relaxed);
    if shared == 0 || SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    crate::log::raw_line(format_args!(
        "tandem[{}]: CUDA_ERROR_ILLEGAL_ADDRESS: this process maps {} MiB of model weights shared \
         read-only with other jobs, and a kernel most likely wrote into them; this process's CUDA \
         context is lost (other jobs are unaffected). Run it with TANDEM_SHARE_WEIGHTS=off.",
        std::process::id(),
        shared >> 20
    ));
}

/// In a fork child: dedup stays off there (the parent's CUDA state is unusable).
/// Its hooks then skip dedup entirely: they neither wait for a remap a parent
/// thread had under way at the fork nor take the state lock one may have held.
pub fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
    quiesce::after_fork_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granules_are_2_mib_where_that_is_a_whole_number_of_the_gpus() {
        const MIB: usize = 1 << 20;
        for (granularity, want) in [
            (2 * MIB, Some(2 * MIB)),
            (64 << 10, Some(2 * MIB)),
            (4096, Some(2 * MIB)),
            (4 * MIB, None),
            (3 * MIB, None),
            (3 << 19, None), // 1.5 MiB: 2 MiB is not a multiple of it
            (0, None),
        ] {
            assert_eq!(merge::granule_for(granularity), want, "{granularity}");
        }
    }
    use std::sync::mpsc;

    /// A child forked while the parent remaps (a remap holds the submission
    /// pause and the state lock) has no such remap to wait for: its
    /// submitting calls go straight to the driver, as with no dedup at all.
    /// They once waited for a pause no thread of the child would ever lift.
    #[test]
    fn a_child_forked_during_a_remap_never_waits_for_it() {
        let _serial = quiesce::TEST_SERIAL
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        quiesce::activate();
        let (inside_tx, inside_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let remap = std::thread::spawn(move || {
            quiesce::exclusive::<_, ()>(
                false,
                || Ok(()),
                || {
                    let _st = state();
                    inside_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                },
            )
            .unwrap();
        });
        inside_rx.recv().unwrap();
        // SAFETY: the child only calls the shim's fork handler, atomics and
        // (with the defect) futex waits and lock attempts, then _exit(2).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            after_fork_in_child();
            // What a copy hook does: its bracket, then the dedup check.
            let b = quiesce::Bracket::enter();
            before_write(0x7000_0000_0000, 4096);
            drop(b);
            // SAFETY: ends the child without running the parent's atexit work.
            unsafe { libc::_exit(0) };
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let mut status = 0;
        let exited = loop {
            // SAFETY: waits for the child this test forked.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break true;
            }
            if std::time::Instant::now() >= deadline {
                // SAFETY: kills and reaps the child this test forked.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        release_tx.send(()).unwrap();
        remap.join().unwrap();
        assert!(exited, "the fork child hung on the parent's remap");
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
