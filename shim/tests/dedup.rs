//! The shim's side of weight dedup, driven by the in-test coordinator: two
//! replica processes (tests/hosts/replica.c) under the real libtandem.so over
//! the fake driver, each CANDIDATE / PUBLISH / OFFER step sent by hand, so the
//! test decides what the shim is offered, lies included.

mod support;

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use support::{socket_path, Coordinator, Mode};
use tandem_e2e::coord::{client_env, spawn_host, Proc};
use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus, WithdrawReason};
use tandem_proto::wire::WELCOME_FLAG_SHARE_WEIGHTS;

const GRANULE: u64 = 2 << 20;

struct Replicas {
    coord: Coordinator,
    wait_file: PathBuf,
    procs: Vec<Proc>,
    ids: Vec<u64>,
}

/// `n` replicas with the same seed and arguments, sharing on, scanning every
/// 20 ms, kept alive after their requests until `wait_file` exists.
fn start(tag: &str, n: usize, extra: &[&str]) -> Replicas {
    start_each(tag, &vec![extra; n])
}

/// One replica per entry of `extras` (its extra arguments).
fn start_each(tag: &str, extras: &[&[&str]]) -> Replicas {
    let path = socket_path(tag);
    let coord = Coordinator::start(&path, Mode::Welcome);
    coord.set_welcome_flags(WELCOME_FLAG_SHARE_WEIGHTS);
    let wait_file = path.with_file_name("go");
    let env = client_env(&path)
        .var("TANDEM_SHARE_WEIGHTS", "on")
        .var("TANDEM_DEDUP_SCAN_MS", "20")
        .var("TANDEM_DEDUP_STABLE_CHECKS", "2");
    let wf = wait_file.to_str().unwrap().to_string();
    let args = vec![
        "--weights-mib",
        "4",
        "--seed",
        "7",
        "--requests",
        "300",
        "--gap-ms",
        "2",
        "--wait-file",
        &wf,
    ];
    let procs: Vec<Proc> = extras
        .iter()
        .map(|extra| {
            let mut args = args.clone();
            args.extend_from_slice(extra);
            spawn_host("replica", &args, &env)
        })
        .collect();
    let pids: Vec<u32> = procs.iter().map(Proc::pid).collect();
    let clients = coord.wait_for("every replica registered", |c| {
        pids.iter().all(|p| c.iter().any(|v| v.hello_pid == *p))
    });
    let ids = pids
        .iter()
        .map(|p| clients.iter().find(|v| v.hello_pid == *p).unwrap().id)
        .collect();
    Replicas {
        coord,
        wait_file,
        procs,
        ids,
    }
}

impl Replicas {
    /// The `skip + 1`-th CANDIDATE from replica `i` for the granule at
    /// `granule` (any granule if None).
    fn candidate(&self, i: usize, granule: Option<u64>, skip: usize) -> Dedup {
        let id = self.ids[i];
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let hits: Vec<Dedup> = self
                .coord
                .dedup_received()
                .into_iter()
                .map(|(from, d, _)| (from, d))
                .filter(|(from, d)| {
                    *from == id
                        && d.op == DedupOp::Candidate
                        && granule.is_none_or(|g| g == d.granule)
                })
                .map(|(_, d)| d)
                .collect();
            if let Some(d) = hits.get(skip) {
                return *d;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no candidate #{skip} from replica {i}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Releases the replicas and returns their `DONE digest=` and `SHIM` lines.
    fn finish(mut self) -> Vec<(String, String)> {
        std::fs::File::create(&self.wait_file).unwrap();
        self.procs
            .iter_mut()
            .map(|p| {
                let st = p.wait_exit(Duration::from_secs(60));
                assert!(st.success(), "replica failed: {st:?}\n{}", p.stderr());
                let done = p.lines("DONE").pop().expect("DONE line");
                let shim = p.lines("SHIM").pop().expect("SHIM line");
                (done, shim)
            })
            .collect()
    }
}

/// The digest the replica computes with no shim and no sharing.
fn plain_digest(extra: &[&str]) -> String {
    let mut args = vec![
        "--weights-mib",
        "4",
        "--seed",
        "7",
        "--requests",
        "300",
        "--gap-ms",
        "0",
    ];
    args.extend_from_slice(extra);
    tandem_e2e::unshared_replica_done(&args)
}

fn memfd_with(bytes: &[u8]) -> OwnedFd {
    // SAFETY: memfd_create with a NUL-terminated name.
    let raw = unsafe { libc::memfd_create(c"tandem-test-bad-copy".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(raw >= 0);
    // SAFETY: fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut f = std::fs::File::from(fd.try_clone().unwrap());
    f.write_all(bytes).unwrap();
    fd
}

fn read_fd(fd: &OwnedFd, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: pread into a buffer of `len` bytes from a descriptor we hold.
    let n = unsafe { libc::pread(fd.as_raw_fd(), v.as_mut_ptr().cast(), len, 0) };
    assert_eq!(n, len as isize, "pread of the exported granule");
    v
}

fn msg(op: DedupOp, c: &Dedup, shared_id: u64) -> Dedup {
    let mut d = Dedup::new(op, c.granule, c.len);
    d.hash = c.hash;
    d.shared_id = shared_id;
    d
}

#[test]
fn a_merge_needs_equal_bytes_not_an_equal_hash() {
    let r = start("dedup-bytes", 2, &[]);
    // Both replicas offer the first granule of their weights with the same hash.
    let ca = r.candidate(0, None, 0);
    let cb = r.candidate(1, None, 0);
    assert_eq!(ca.len, GRANULE);
    let cb = if cb.hash == ca.hash {
        cb
    } else {
        // another granule came first: wait for B's twin of A's
        r.coord
            .wait_dedup("B's twin of A's candidate", |from, d| {
                from == r.ids[1] && d.op == DedupOp::Candidate && d.hash == ca.hash
            })
            .1
    };

    // A publishes: its granule goes read-only and comes back as an fd.
    r.coord
        .send_dedup(r.ids[0], msg(DedupOp::Publish, &ca, 1), None);
    let (_, p, fd) = r.coord.wait_dedup("PUBLISHED", |from, d| {
        from == r.ids[0] && d.op == DedupOp::Published
    });
    assert_eq!(DedupStatus(p.status), DedupStatus::OK);
    assert_eq!((p.granule, p.shared_id), (ca.granule, 1));
    let fd = fd.expect("the exported granule rides along");
    let good = read_fd(&fd, GRANULE as usize);

    // A copy that claims the same hash but differs in one byte is refused.
    let mut bad = good.clone();
    bad[GRANULE as usize / 2] ^= 0x40;
    r.coord.send_dedup(
        r.ids[1],
        msg(DedupOp::Offer, &cb, 2),
        Some(Arc::new(memfd_with(&bad))),
    );
    let (_, res, _) = r.coord.wait_dedup("RESULT of the lying offer", |from, d| {
        from == r.ids[1] && d.op == DedupOp::Result && d.shared_id == 2
    });
    assert_eq!(DedupStatus(res.status), DedupStatus::MISMATCH);

    // The granule is offered again once stable, and the true copy merges.
    let cb2 = r.candidate(1, Some(cb.granule), 1);
    assert_eq!(cb2.hash, cb.hash);
    r.coord
        .send_dedup(r.ids[1], msg(DedupOp::Offer, &cb2, 1), Some(fd));
    let (_, res, _) = r.coord.wait_dedup("RESULT of the true offer", |from, d| {
        from == r.ids[1] && d.op == DedupOp::Result && d.shared_id == 1
    });
    assert_eq!(DedupStatus(res.status), DedupStatus::OK);
    assert!(res.elapsed_ns > 0);

    // Outputs: both replicas computed exactly what an unshared run computes,
    // before and after the merge; each maps one shared granule.
    let want = plain_digest(&[]);
    for (done, shim) in r.finish() {
        assert_eq!(done, want);
        assert!(shim.contains(&format!("shared_bytes={GRANULE}")), "{shim}");
    }
}

#[test]
fn offers_for_unknown_or_changed_granules_are_refused_and_nothing_changes() {
    let r = start("dedup-gone", 1, &[]);
    let c = r.candidate(0, None, 0);
    // Wrong hash, an address that is no granule, a granule never offered: GONE.
    let mut wrong_hash = msg(DedupOp::Offer, &c, 5);
    wrong_hash.hash[0] ^= 1;
    let mut not_granule = msg(DedupOp::Offer, &c, 6);
    not_granule.granule += 4096;
    let mut publish_wrong = msg(DedupOp::Publish, &c, 7);
    publish_wrong.hash[3] ^= 1;
    let any = Arc::new(memfd_with(&vec![1u8; GRANULE as usize]));
    r.coord.send_dedup(r.ids[0], wrong_hash, Some(any.clone()));
    r.coord.send_dedup(r.ids[0], not_granule, Some(any));
    r.coord.send_dedup(r.ids[0], publish_wrong, None);
    for sid in [5, 6, 7] {
        let (_, d, fd) = r.coord.wait_dedup("an answer", |_, d| {
            d.shared_id == sid && matches!(d.op, DedupOp::Result | DedupOp::Published)
        });
        assert_eq!(DedupStatus(d.status), DedupStatus::GONE, "shared id {sid}");
        assert!(fd.is_none());
    }
    let want = plain_digest(&[]);
    for (done, shim) in r.finish() {
        assert_eq!(done, want);
        assert!(shim.contains("shared_bytes=0"), "{shim}");
    }
}

#[test]
fn copies_and_memsets_into_shared_weights_get_a_private_copy_first() {
    for kind in ["memcpy", "memset", "d2d", "memcpy2d", "memset2d"] {
        copy_on_write_case(kind);
    }
}

/// Both replicas write (`kind`: HtoD copy, memset, DtoD copy, or the pitched
/// 2D copy and memset, which write a row in every granule) into their first
/// granule after request 200, once their shim reports shared memory (A
/// published it, B merged it).
fn copy_on_write_case(kind: &str) {
    let writes = [
        "--write-after",
        "200",
        "--write",
        kind,
        "--write-when-shared",
    ];
    let r = start(&format!("dedup-cow-{kind}"), 2, &writes);
    let ca = r.candidate(0, None, 0);
    let cb = r
        .coord
        .wait_dedup("B's twin", |from, d| {
            from == r.ids[1] && d.op == DedupOp::Candidate && d.hash == ca.hash
        })
        .1;
    r.coord
        .send_dedup(r.ids[0], msg(DedupOp::Publish, &ca, 1), None);
    let (_, _, fd) = r
        .coord
        .wait_dedup("PUBLISHED", |_, d| d.op == DedupOp::Published);
    let fd = fd.expect("fd");
    r.coord
        .send_dedup(r.ids[1], msg(DedupOp::Offer, &cb, 1), Some(fd.clone()));
    let (_, res, _) = r.coord.wait_dedup("RESULT", |_, d| d.op == DedupOp::Result);
    assert_eq!(DedupStatus(res.status), DedupStatus::OK);
    let before = read_fd(&fd, 64);

    // Both replicas write at request 200 (same args); each breaks sharing.
    for id in &r.ids {
        r.coord
            .wait_dedup(&format!("{kind}: WITHDRAW copy-on-write"), |from, d| {
                from == *id
                    && d.op == DedupOp::Withdraw
                    && d.shared_id == 1
                    && WithdrawReason(d.status) == WithdrawReason::COPY_ON_WRITE
            });
    }
    // The shared copy itself was never written.
    assert_eq!(read_fd(&fd, 64), before);
    let want = plain_digest(&writes[..4]);
    for (done, shim) in r.finish() {
        assert_eq!(done, want, "{kind}: each writer sees its own write only");
        assert!(shim.contains("cow=1"), "{kind}: {shim}");
        assert!(shim.contains("shared_bytes=0"), "{kind}: {shim}");
    }
}

#[test]
fn a_kernel_writing_into_shared_weights_fails_only_its_process_with_one_line() {
    // Replica 0 writes its first weight granule with a kernel after request 200,
    // once it has published that granule (read-only); replica 1 maps it.
    let mut r = start_each(
        "dedup-kernel",
        &[
            &[
                "--write-after",
                "200",
                "--write",
                "kernel",
                "--write-when-shared",
            ],
            &[],
        ],
    );
    let ca = r.candidate(0, None, 0);
    let cb = r
        .coord
        .wait_dedup("B's twin", |from, d| {
            from == r.ids[1] && d.op == DedupOp::Candidate && d.hash == ca.hash
        })
        .1;
    r.coord
        .send_dedup(r.ids[0], msg(DedupOp::Publish, &ca, 1), None);
    let (_, p, fd) = r
        .coord
        .wait_dedup("PUBLISHED", |_, d| d.op == DedupOp::Published);
    assert_eq!(DedupStatus(p.status), DedupStatus::OK);
    r.coord
        .send_dedup(r.ids[1], msg(DedupOp::Offer, &cb, 1), fd);
    let (_, res, _) = r.coord.wait_dedup("RESULT", |_, d| d.op == DedupOp::Result);
    assert_eq!(DedupStatus(res.status), DedupStatus::OK);

    // The writer stops: the kernel faulted on the read-only mapping, and the
    // shim said why in one line.
    let mut writer = r.procs.remove(0);
    let st = writer.wait_exit(Duration::from_secs(60));
    assert_eq!(st.code(), Some(3), "{}", writer.stderr());
    assert!(
        writer.stdout().contains("WRITE kernel rc=700"),
        "{}",
        writer.stdout()
    );
    let said: Vec<String> = writer
        .stderr()
        .lines()
        .filter(|l| l.contains("TANDEM_SHARE_WEIGHTS=off"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        said.len(),
        1,
        "one line naming the remedy:\n{}",
        writer.stderr()
    );
    assert!(said[0].contains("ILLEGAL_ADDRESS"), "{}", said[0]);

    // The other replica never noticed: all its outputs are the unshared ones.
    r.ids.remove(0);
    let want = plain_digest(&[]);
    for (done, shim) in r.finish() {
        assert_eq!(done, want);
        assert!(shim.contains(&format!("shared_bytes={GRANULE}")), "{shim}");
    }
}
