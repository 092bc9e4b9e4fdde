//! Keeping the program's GPU work away from memory while dedup remaps it.
//!
//! Unmapping or remapping a range that a queued kernel or copy still uses would
//! fault the program. So every hooked call that submits device work (launches,
//! graph launches, copies, memsets) runs inside a [`Bracket`] once this process
//! has dedup-backed memory, and a remap runs in [`exclusive`]: it stops new
//! submissions, waits for the ones under way to be handed to the driver, waits
//! for the context to drain (`cuCtxSynchronize`), remaps, and lets submissions
//! go again.
//!
//! Cost without dedup: one relaxed load of [`ACTIVE`] per submitting call. With
//! it: two atomic read-modify-writes and a load. A submission waits only while a
//! remap is in progress (a few driver calls after the context drained). These
//! waits are on this process's own remap, never on the coordinator.
//!
//! Protocol (all SeqCst, a Dekker pair): a submitter increments [`INFLIGHT`],
//! then reads [`PAUSE`]; the remapper sets [`PAUSE`], then reads [`INFLIGHT`].
//! At least one of them sees the other, so no submission slips into a remap.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Set once this process has memory dedup may remap; cleared only in a fork
/// child ([`after_fork_in_child`]).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// 1 while a remap holds the process (a futex word).
static PAUSE: AtomicU32 = AtomicU32::new(0);
/// Submitting calls between [`Bracket::enter`] and its drop.
static INFLIGHT: AtomicU32 = AtomicU32::new(0);

/// From now on, submissions are bracketed.
pub fn activate() {
    ACTIVE.store(true, Ordering::SeqCst);
}

/// In a fork child (one thread, atomics only): dedup is off there, so its
/// submissions are not bracketed, and neither the parent's pause (a remap
/// under way in another thread at the fork, which no thread of the child
/// will ever end) nor the parent's threads' brackets count.
pub fn after_fork_in_child() {
    ACTIVE.store(false, Ordering::SeqCst);
    PAUSE.store(0, Ordering::SeqCst);
    INFLIGHT.store(0, Ordering::SeqCst);
}

/// Whether submissions are bracketed.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// One submitting call in flight; dropping it ends the call.
#[must_use]
pub struct Bracket(());

impl Bracket {
    /// Enters (waiting while a remap runs), or `None` when dedup is not active.
    #[inline(always)]
    pub fn enter() -> Option<Bracket> {
        if !active() {
            return None;
        }
        Some(Self::enter_slow())
    }

    #[cold]
    #[inline(never)]
    fn enter_slow() -> Bracket {
        loop {
            INFLIGHT.fetch_add(1, Ordering::SeqCst);
            if PAUSE.load(Ordering::SeqCst) == 0 {
                return Bracket(());
            }
            INFLIGHT.fetch_sub(1, Ordering::SeqCst);
            wait_unpaused();
        }
    }
}

impl Drop for Bracket {
    #[inline(always)]
    fn drop(&mut self) {
        INFLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sleeps while a remap holds the process (futex slices of 10 ms, rechecked).
fn wait_unpaused() {
    while PAUSE.load(Ordering::SeqCst) != 0 {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        // SAFETY: FUTEX_WAIT on a static word with a valid relative timeout; a
        // spurious or early return just rechecks.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                PAUSE.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                1u32,
                &ts as *const libc::timespec,
            );
        }
    }
}

/// Runs `f` with no submission in flight and the context drained. `in_bracket`:
/// the caller itself is inside a [`Bracket`] (a copy hook breaking sharing
/// before its write); its own slot is then not waited for.
///
/// `drain` is called once no other submission is in flight (normally
/// `cuCtxSynchronize`); if it fails, `f` is not run and the error is returned.
pub fn exclusive<R, E>(
    in_bracket: bool,
    drain: impl FnOnce() -> Result<(), E>,
    f: impl FnOnce() -> R,
) -> Result<R, E> {
    loop {
        if PAUSE
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            break;
        }
        // Another remap runs: give up our slot while waiting, or it would wait for us.
        if in_bracket {
            INFLIGHT.fetch_sub(1, Ordering::SeqCst);
        }
        wait_unpaused();
        if in_bracket {
            INFLIGHT.fetch_add(1, Ordering::SeqCst);
        }
    }
    let mine = u32::from(in_bracket);
    let mut spins = 0u32;
    while INFLIGHT.load(Ordering::SeqCst) > mine {
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let out = drain().map(|()| f());
    PAUSE.store(0, Ordering::SeqCst);
    // SAFETY: FUTEX_WAKE on a static word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            PAUSE.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
    out
}

/// For tests of the protocol's global words: one at a time, so that one
/// test's remap or bracket never shows in another's checks.
#[cfg(test)]
pub(crate) static TEST_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Submitters record whether they ever ran inside an exclusive section; a
    /// broken protocol (e.g. checking PAUSE before counting in) shows up as an
    /// overlap.
    #[test]
    fn no_submission_overlaps_an_exclusive_section() {
        let _serial = TEST_SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        activate();
        let in_section = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for _ in 0..3 {
            let (in_section, overlaps, stop) = (in_section.clone(), overlaps.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _b = Bracket::enter().expect("active");
                    if in_section.load(Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
                n
            }));
        }
        let mut sections = 0;
        for _ in 0..200 {
            exclusive::<(), ()>(
                false,
                || Ok(()),
                || {
                    in_section.store(true, Ordering::SeqCst);
                    std::thread::yield_now();
                    in_section.store(false, Ordering::SeqCst);
                    sections += 1;
                },
            )
            .unwrap();
            // a submitter inside a bracket can break sharing itself
            let _b = Bracket::enter().expect("active");
            exclusive::<(), ()>(
                true,
                || Ok(()),
                || {
                    in_section.store(true, Ordering::SeqCst);
                    in_section.store(false, Ordering::SeqCst);
                },
            )
            .unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let submitted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(sections, 200);
        assert!(submitted > 0);
        assert_eq!(overlaps.load(Ordering::Relaxed), 0);
        assert_eq!(INFLIGHT.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_failed_drain_skips_the_work_and_releases_the_pause() {
        let _serial = TEST_SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let ran = exclusive(false, || Err("sync failed"), || 1);
        assert_eq!(ran, Err("sync failed"));
        assert_eq!(PAUSE.load(Ordering::SeqCst), 0);
    }
}
