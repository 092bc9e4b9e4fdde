//! Joining tandem's MPS control daemon (tandem over MPS, `[mps]` in
//! tandemd.toml): the `CUDA_MPS_*` variables, put into this process's
//! environment once, before the driver initialises.
//!
//! The CUDA driver reads the MPS variables when it initialises (`cuInit`),
//! so they must be in the environment before the real `cuInit` runs:
//!
//! - The first hooked call of the process registers synchronously
//!   (`super::first_call`) before it is forwarded. Its Hello asks for MPS
//!   ([`HELLO_FLAG_MPS`]) only while no `cuInit` has been forwarded yet; the
//!   variables are set right after the Welcome, in that call, before it
//!   returns. So when the first hooked call is `cuInit` (the usual case: the
//!   driver refuses other calls before it), the driver sees them.
//! - When the first hooked call is something else (a call that the driver
//!   answers `CUDA_ERROR_NOT_INITIALIZED`), the variables are set then, still
//!   before the `cuInit` that follows. A `cuInit` that reached the driver
//!   some other way (not through these hooks) has read the environment
//!   already: then setting it changes nothing for this process.
//! - A `cuInit` on another thread while the registration runs waits for it
//!   to finish (bounded by the registration's own bounds, about 1.2 s, plus a
//!   margin), so that it neither initialises the driver without the
//!   variables nor reads the environment while it is being changed.
//! - Reconnections (the watcher, after a tandemd restart) never ask: CUDA
//!   has initialised by then.
//!
//! `setenv` is not safe against a `getenv` running at the same moment in
//! another thread (POSIX promises nothing; glibc may move the environment
//! array). A shim cannot stop the host's other threads, so the variables
//! are set at the earliest point, once per process, on the thread making the
//! first CUDA call, and only those whose value differs (a job started with
//! the right values already is not touched at all). Never on a hook's fast
//! path.
//!
//! What is set: `CUDA_MPS_PIPE_DIRECTORY` (tandemd's), and
//! `CUDA_MPS_CLIENT_PRIORITY` as the Welcome says for the granted class (0
//! for inference, `[mps] training_priority` for training: the operator's
//! value replaces the job's own), and `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`
//! when tandemd caps training. A job whose environment already names
//! another `CUDA_MPS_PIPE_DIRECTORY` keeps all of its own MPS settings and
//! does not join (said at debug). Child processes inherit the variables.

use core::ffi::c_uint;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::ffi::CString;
use std::time::{Duration, Instant};

use tandem_proto::mps::{MpsJoin, CLIENT_PRIORITY_ENV, PIPE_DIR_ENV, THREAD_PERCENTAGE_ENV};
use tandem_proto::wire::HELLO_FLAG_MPS;

use crate::table::Hook;
use crate::types::CuResult;

/// Threads inside `super::first_call` now (the one registering, and any
/// that are about to find they lost the race to it).
static PENDING: AtomicU32 = AtomicU32::new(0);
/// The thread registering now (its tid), or 0.
static REGISTERING: AtomicI32 = AtomicI32::new(0);
/// A `cuInit` has been (or is being) forwarded to the driver.
static INIT_FORWARDED: AtomicBool = AtomicBool::new(false);
/// The variables were set (or left alone) once already.
static DECIDED: AtomicBool = AtomicBool::new(false);

/// Bound on a `cuInit` waiting for another thread's registration.
const INIT_WAIT: Duration = Duration::from_millis(
    super::connect::CONNECT_TIMEOUT.as_millis() as u64
        + super::connect::ANSWER_TIMEOUT.as_millis() as u64
        + 800,
);

fn tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Marks this thread as inside `super::first_call` while it lives. Entered
/// before the thread tries to become the one that registers, so a thread
/// that finds the registration taken (its CAS fails, or it loads the state
/// that CAS stored) also sees this mark.
pub(super) struct Pending(());

impl Pending {
    pub(super) fn enter() -> Pending {
        PENDING.fetch_add(1, Ordering::SeqCst);
        Pending(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs the registration `f` with this thread marked as registering.
/// `f` gets the Hello flag to add: [`HELLO_FLAG_MPS`] while no `cuInit` has
/// been forwarded, else 0.
pub(super) fn registering<R>(f: impl FnOnce(u8) -> R) -> R {
    REGISTERING.store(tid(), Ordering::SeqCst);
    // A cuInit forwarded before this registration began (a process whose
    // first hooked call came after it): too late to join.
    let ask = if INIT_FORWARDED.load(Ordering::SeqCst) {
        0
    } else {
        HELLO_FLAG_MPS
    };
    let r = f(ask);
    REGISTERING.store(0, Ordering::SeqCst);
    r
}

/// The atfork child handler's part (a registration in the parent is not
/// the child's).
pub(super) fn after_fork_in_child() {
    REGISTERING.store(0, Ordering::SeqCst);
    PENDING.store(0, Ordering::SeqCst);
}

/// The `cuInit` hook's body: waits (bounded) for another thread's
/// registration, then forwards.
///
/// # Safety
/// `real` is the driver's `cuInit`; `flags` as the caller passed it.
pub unsafe fn init(
    _: Hook,
    _: super::session::Client,
    real: unsafe extern "C" fn(c_uint) -> CuResult,
    flags: c_uint,
) -> CuResult {
    // This hook's `client::current()` has run: either this thread registered
    // (done by now), or it found the registration taken, and then the
    // registering thread's `Pending` mark is visible here until it is done.
    let me = tid();
    let until = Instant::now() + INIT_WAIT;
    while PENDING.load(Ordering::SeqCst) > 0
        && REGISTERING.load(Ordering::SeqCst) != me
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    INIT_FORWARDED.store(true, Ordering::SeqCst);
    // SAFETY: forwarding the caller's argument to the driver's own cuInit.
    unsafe { real(flags) }
}

/// What to do with one variable.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// It already has the value.
    Keep,
    /// Set it (it was unset, or had another value: the old one).
    Set(Option<Vec<u8>>),
}

fn step(current: Option<&[u8]>, want: &[u8]) -> Step {
    match current {
        Some(v) if v == want => Step::Keep,
        Some(v) if !v.is_empty() => Step::Set(Some(v.to_vec())),
        _ => Step::Set(None),
    }
}

/// The plan for `m` given the current values (pipe dir, priority,
/// percentage): `None` when the job names another pipe directory (it keeps
/// its own MPS settings), else the steps in that order (the percentage's is
/// `None` when tandem sets no cap).
#[allow(clippy::type_complexity)]
fn plan(m: &MpsJoin, current: [Option<&[u8]>; 3]) -> Option<(Step, Step, Option<(Step, Vec<u8>)>)> {
    let [dir, prio, pct] = current;
    let dir = match step(dir, m.pipe_dir()) {
        Step::Set(Some(_)) => return None,
        s => s,
    };
    let prio = step(prio, m.priority.to_string().as_bytes());
    let pct = (m.thread_percentage != 0).then(|| {
        let want = m.thread_percentage.to_string().into_bytes();
        (step(pct, &want), want)
    });
    Some((dir, prio, pct))
}

/// Puts `m` into the environment (once per process; see the module docs).
/// Cold: allocates, logs.
pub(super) fn join(m: &MpsJoin) {
    if DECIDED.swap(true, Ordering::AcqRel) {
        return;
    }
    let dir_now = get(PIPE_DIR_ENV);
    let current = [
        dir_now,
        get(CLIENT_PRIORITY_ENV),
        get(THREAD_PERCENTAGE_ENV),
    ];
    let Some((dir, prio, pct)) = plan(m, current) else {
        crate::log!(
            Debug,
            "{PIPE_DIR_ENV}={:?} is set by the job: keeping it and its MPS settings (tandem's MPS \
             daemon is at {:?})",
            crate::log::String8(dir_now.unwrap_or_default()),
            crate::log::String8(m.pipe_dir())
        );
        return;
    };
    set(PIPE_DIR_ENV, dir, m.pipe_dir());
    set(CLIENT_PRIORITY_ENV, prio, m.priority.to_string().as_bytes());
    if let Some((s, want)) = pct {
        set(THREAD_PERCENTAGE_ENV, s, &want);
    }
    crate::log!(
        Info,
        "joining tandem's MPS daemon at {:?} with {CLIENT_PRIORITY_ENV}={}{}",
        crate::log::String8(m.pipe_dir()),
        m.priority,
        if m.thread_percentage != 0 {
            format!(" {THREAD_PERCENTAGE_ENV}={}", m.thread_percentage)
        } else {
            String::new()
        }
    );
}

fn get(name: &str) -> Option<&'static [u8]> {
    crate::env::var(&CString::new(name).ok()?)
}

fn set(name: &str, s: Step, value: &[u8]) {
    let Step::Set(old) = s else {
        return;
    };
    if let Some(old) = old {
        crate::log!(
            Debug,
            "{name}={:?} replaced by tandem's {:?}",
            crate::log::String8(&old),
            crate::log::String8(value)
        );
    }
    let (Ok(n), Ok(v)) = (CString::new(name), CString::new(value)) else {
        return;
    };
    // SAFETY: two valid NUL-terminated strings. setenv itself is not safe
    // against a concurrent getenv in another thread; see the module docs for
    // why this is the earliest, once-only point and what that leaves.
    if unsafe { libc::setenv(n.as_ptr(), v.as_ptr(), 1) } != 0 {
        crate::log!(
            Warn,
            "cannot set {name}: {}; this job may not join tandem's MPS daemon",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(p: u8, pct: u8) -> MpsJoin {
        MpsJoin::new(p, pct, b"/run/tandem/mps").unwrap()
    }

    #[test]
    fn unset_variables_are_set() {
        let (d, p, c) = plan(&join(1, 30), [None, None, None]).unwrap();
        assert_eq!(d, Step::Set(None));
        assert_eq!(p, Step::Set(None));
        assert_eq!(c, Some((Step::Set(None), b"30".to_vec())));
        let (_, _, c) = plan(&join(0, 0), [None, None, None]).unwrap();
        assert_eq!(c, None, "no cap: the percentage is left alone");
    }

    #[test]
    fn right_values_are_not_touched_and_the_operators_priority_wins() {
        let (d, p, c) = plan(
            &join(1, 30),
            [Some(b"/run/tandem/mps"), Some(b"1"), Some(b"30")],
        )
        .unwrap();
        assert_eq!((d, p), (Step::Keep, Step::Keep));
        assert_eq!(c, Some((Step::Keep, b"30".to_vec())));
        let (_, p, c) = plan(&join(1, 30), [None, Some(b"0"), Some(b"90")]).unwrap();
        assert_eq!(p, Step::Set(Some(b"0".to_vec())));
        assert_eq!(c.unwrap().0, Step::Set(Some(b"90".to_vec())));
        // An empty value counts as unset.
        let (d, _, _) = plan(&join(0, 0), [Some(b""), None, None]).unwrap();
        assert_eq!(d, Step::Set(None));
    }

    #[test]
    fn a_job_with_its_own_pipe_directory_keeps_everything() {
        assert!(plan(&join(1, 30), [Some(b"/tmp/my-mps"), None, None]).is_none());
    }
}
