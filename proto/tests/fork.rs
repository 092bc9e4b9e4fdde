//! Two processes share one memfd ring, as the shim and tandemd do: the parent
//! (coordinator) creates and initialises the region, the forked child (shim)
//! maps the fd itself with `map_received` and produces.
//!
//! The child runs only allocation-free code (atomics, mmap) and leaves with
//! `_exit`, so forking from the multi-threaded test harness is safe.

use std::os::fd::{AsFd, OwnedFd};

use tandem_proto::ring::{Consumer, Producer, RingLayout};
use tandem_proto::{shm, EventKind, Mapping, Record};

fn rec(seq: u64) -> Record {
    let mut r = Record::new(EventKind::LAUNCH_EX, seq);
    r.func_id = seq ^ 0xA5A5_A5A5_A5A5_A5A5;
    r.stream = seq.rotate_left(17);
    r
}

fn valid(r: &Record, seq: u64) -> bool {
    r.ts_ns == seq
        && r.func_id == seq ^ 0xA5A5_A5A5_A5A5_A5A5
        && r.stream == seq.rotate_left(17)
        && r.kind() == Ok(EventKind::LAUNCH_EX)
}

/// Run `body` in a forked child that maps `fd`; returns the child's pid.
fn spawn_producer(
    fd: &OwnedFd,
    layout: RingLayout,
    body: fn(&mut Producer<'_>) -> bool,
) -> libc::pid_t {
    // SAFETY: the child only calls async-signal-safe, allocation-free code
    // (fcntl, fstat, mmap, atomics) and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = match shm::map_received(fd.as_fd(), layout.region_len()) {
            Ok(map) => match Producer::attach(&map, layout) {
                Ok(mut p) => {
                    if body(&mut p) {
                        0
                    } else {
                        3
                    }
                }
                Err(_) => 2,
            },
            Err(_) => 1,
        };
        // SAFETY: terminating the child without running the parent's atexit
        // handlers or unwinding the test harness.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

fn region(cap: u32) -> (OwnedFd, Mapping, RingLayout) {
    let layout = RingLayout::new(cap).unwrap();
    let (fd, map) = shm::create(c"tandem-fork-test", layout.region_len()).unwrap();
    (fd, map, layout)
}

const LOSSLESS_N: u64 = 2_000_000;

#[test]
fn processes_lossless_in_order() {
    let (fd, map, layout) = region(4096);
    let mut c = Consumer::init(&map, layout, 9).unwrap();
    let pid = spawn_producer(&fd, layout, |p| {
        for i in 0..LOSSLESS_N {
            while p.free_slots() == 0 {
                std::hint::spin_loop();
            }
            if !p.push(&rec(i)) {
                return false;
            }
        }
        true
    });
    let mut next = 0u64;
    let mut bad = 0u64;
    while next < LOSSLESS_N {
        let n = c
            .drain(|r| {
                if !valid(r, next) {
                    bad += 1;
                }
                next += 1;
            })
            .unwrap();
        if n == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!(wait(pid), 0);
    assert_eq!(bad, 0, "records arrived out of order or corrupted");
    assert_eq!(c.pop().unwrap(), None);
    let st = c.stats();
    assert_eq!(st.dropped_full, 0);
    assert_eq!(st.head, LOSSLESS_N);
}

const DROPPY_N: u64 = 1_000_000;

#[test]
fn processes_exact_drop_count() {
    // No consumer while the child runs: exactly `capacity` records fit.
    let (fd, map, layout) = region(256);
    let mut c = Consumer::init(&map, layout, 9).unwrap();
    let pid = spawn_producer(&fd, layout, |p| {
        for i in 0..DROPPY_N {
            let _ = p.push(&rec(i));
        }
        true
    });
    assert_eq!(wait(pid), 0);
    let mut got = Vec::new();
    c.drain(|r| got.push(r.ts_ns)).unwrap();
    assert_eq!(got, (0..256).collect::<Vec<_>>());
    assert_eq!(c.stats().dropped_full, DROPPY_N - 256);

    // A slow concurrent consumer: what arrives is strictly increasing, valid,
    // and arrivals + drops account for every push.
    let (fd, map, layout) = region(64);
    let mut c = Consumer::init(&map, layout, 9).unwrap();
    let pid = spawn_producer(&fd, layout, |p| {
        for i in 0..DROPPY_N {
            let _ = p.push(&rec(i));
        }
        true
    });
    let mut received = 0u64;
    let mut last: Option<u64> = None;
    let mut ok = true;
    let mut child_done = false;
    loop {
        if !child_done {
            let mut status = 0;
            // SAFETY: polling our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                assert_eq!(libc::WEXITSTATUS(status), 0);
                child_done = true;
            }
        }
        let mut check = |r: &Record| {
            ok &= valid(r, r.ts_ns) && last.is_none_or(|l| r.ts_ns > l);
            last = Some(r.ts_ns);
            received += 1;
        };
        if child_done {
            c.drain(&mut check).unwrap();
            break;
        }
        if let Some(r) = c.pop().unwrap() {
            check(&r);
        }
        std::thread::yield_now();
    }
    assert!(ok, "records out of order or corrupted");
    let st = c.stats();
    assert!(st.dropped_full > 0);
    assert_eq!(received + st.dropped_full, DROPPY_N);
    assert_eq!(st.head, received);
}

/// The gate works across processes: the child (shim) sleeps in FUTEX_WAIT on
/// its own mapping of the memfd, the parent (coordinator) opens the gate and
/// FUTEX_WAKEs it (shared, not PRIVATE, futex).
#[test]
fn gate_wakes_across_processes() {
    use std::time::Duration;
    use tandem_proto::control::GateWait;
    use tandem_proto::ring::control_block;

    let (fd, map, layout) = region(16);
    let _c = Consumer::init(&map, layout, 5).unwrap();
    let cb = control_block(&map, layout).unwrap();
    cb.close_gate();
    // SAFETY: the child runs allocation-free code only and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = match shm::map_received(fd.as_fd(), layout.region_len()) {
            Ok(m) => match control_block(&m, layout) {
                // Generous bounds: the test asserts the outcome, not the time.
                Ok(cb) => match cb.wait_open(Duration::from_secs(60), Duration::from_secs(60)) {
                    GateWait::Open => 0,
                    GateWait::TimedOut => 4,
                    GateWait::CoordinatorStale => 5,
                    GateWait::FutexFailed(_) => 6,
                },
                Err(_) => 2,
            },
            Err(_) => 1,
        };
        // SAFETY: end the child without unwinding into the harness.
        unsafe { libc::_exit(code) };
    }
    // Wait until the child is waiting (it bumps gate_waits first), then open.
    while cb.client_counters().gate_waits == 0 {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    cb.open_gate().unwrap();
    assert_eq!(wait(pid), 0, "child did not see the gate open");
    assert_eq!(cb.client_counters().gate_timeouts, 0);
}
