//! Weight deduplication through the tandemd binary, driven by fake shims:
//! candidates, PUBLISH / PUBLISHED with a real fd, OFFER with that fd, the
//! stats, the copy outliving its publisher, trust groups, refusals, restart.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::dedup::*;
use common::*;
use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus, WithdrawReason};
use tandem_proto::wire::{
    self, ClientClass, HELLO_FLAG_NO_SHARE_WEIGHTS, HELLO_FLAG_SHARE_WEIGHTS, MAX_MESSAGE_LEN,
};
use tandem_proto::EventKind;

const UUID: [u8; 16] = *b"GPU-DEDUP-012345";
const SHARE: u8 = HELLO_FLAG_SHARE_WEIGHTS;
const HASH: [u8; 16] = *b"weights-hash-001";
const G_A: u64 = 0x7f00_0000_0000;
const G_B: u64 = 0x7e00_0020_0000;

fn sharing_peer(d: &Tandemd) -> Peer {
    let p = Peer::connect_flags(&d.socket, ClientClass::Training, SHARE);
    assert!(p.shares(), "share flag granted");
    p.device(UUID, b"Fake H100");
    p
}

fn gpu_dedup(d: &Tandemd, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    wait_for(what, || {
        let r = tandem_coordinator::client::http_get(
            &d.stats,
            "/stats",
            std::time::Duration::from_secs(5),
        )
        .ok()?;
        let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
        let g = v["gpus"].as_array()?.first()?.clone();
        f(&g).then_some(v)
    })
}

#[test]
fn two_peers_merge_and_the_copy_outlives_its_publisher() {
    let d = Tandemd::start("dedup", None);
    let mut a = sharing_peer(&d);
    let mut b = sharing_peer(&d);
    for p in [&mut a, &mut b] {
        p.push(EventKind::ALLOC, 1, 0, 2 * GRANULE, 0x7f00_0000_0000);
    }
    a.candidate(G_A, HASH);
    b.candidate(G_B, HASH);
    // The oldest candidate publishes (the two sockets may be read in either order).
    let peers = [&a, &b];
    let first = first_with_message(&peers);
    let (publisher, other) = (peers[first], peers[1 - first]);
    let (p, fd) = publisher.recv_dedup();
    assert_eq!((p.op, p.len, p.hash), (DedupOp::Publish, GRANULE, HASH));
    assert!(fd.is_none() && p.shared_id != 0);
    let pg = if first == 0 { G_A } else { G_B };
    assert_eq!(p.granule, pg);
    let copy = memfd_with("tdc-weights", GRANULE as usize, |i| (i % 251) as u8);
    d.wait_memfds("tdc-weights", 0);
    publisher.published(&p, copy.as_fd());
    drop(copy); // tandemd and the other peer hold the copy from here on
    let (o, ofd) = other.recv_dedup();
    assert_eq!(
        (o.op, o.granule, o.shared_id, o.hash),
        (
            DedupOp::Offer,
            if first == 0 { G_B } else { G_A },
            p.shared_id,
            HASH
        )
    );
    let ofd = ofd.expect("the OFFER carries the copy's fd");
    let bytes = read_fd(ofd.as_fd(), GRANULE as usize);
    assert!(
        bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
        "content"
    );
    other.result(&o, DedupStatus::OK);

    let v = gpu_dedup(&d, "one merge", |g| g["dedup_merges"] == 1);
    let g = &v["gpus"][0];
    for &k in tandem_e2e::coord::GPU_DEDUP_KEYS {
        assert!(g.get(k).is_some(), "gpu lacks {k}: {g}");
    }
    assert_eq!(g["dedup_saved_bytes"], GRANULE);
    assert_eq!(g["dedup_shared_bytes"], GRANULE);
    assert_eq!(g["dedup_shared_copies"], 1);
    assert!(g["dedup_merge_latency_ms"]["max"].is_number(), "{g}");
    for &k in tandem_e2e::coord::STATS_KEYS {
        assert!(v.get(k).is_some(), "/stats lacks {k}");
    }
    assert_eq!(v["dedup"]["saved_bytes"], GRANULE);
    assert_eq!(v["dedup"]["sharing_clients"], 2);
    let s = d.wait_stats("allocations counted", |s| {
        s.clients.iter().all(|c| c.bytes_allocated == 2 * GRANULE)
    });
    for c in &s.clients {
        let v = serde_json::to_value(&c.dedup).unwrap();
        for &k in tandem_e2e::coord::CLIENT_DEDUP_KEYS {
            assert!(v.get(k).is_some(), "client dedup lacks {k}: {v}");
        }
        assert!(c.dedup.share_weights);
        assert_eq!(
            c.dedup.trust_group.as_deref(),
            Some(format!("uid:{}", c.uid).as_str())
        );
        assert_eq!(
            (c.dedup.shared_bytes, c.dedup.candidate_granules),
            (GRANULE, 0)
        );
        assert_eq!(c.dedup.private_bytes, GRANULE);
    }
    let r = tandem_coordinator::client::http_get(
        &d.stats,
        "/metrics",
        std::time::Duration::from_secs(5),
    )
    .unwrap();
    let ex = tandem_e2e::coord::parse_prometheus(&r.body)
        .unwrap_or_else(|e| panic!("bad Prometheus text: {e}\n{}", r.body));
    assert_eq!(ex.get("tandem_dedup_saved_bytes")[0].value, GRANULE as f64);
    assert_eq!(ex.get("tandem_dedup_merges_total")[0].value, 1.0);
    assert_eq!(
        ex.types
            .get("tandem_dedup_merges_total")
            .map(String::as_str),
        Some("counter")
    );
    assert_eq!(ex.get("tandem_dedup_client_shared_bytes").len(), 2);
    let out = Command::new(tandemctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SHARED") && text.contains("2.0MiB saved by weight sharing"),
        "{text}"
    );

    // The publisher goes away: nothing is saved any more, but the copy lives
    // on (the other peer maps it; tandemd keeps its fd).
    let (pid_other, gone_id) = (other.id(), publisher.id());
    let (keep, gone) = if first == 0 { (b, a) } else { (a, b) };
    assert_eq!(keep.id(), pid_other);
    drop(gone);
    let v = gpu_dedup(&d, "publisher gone", |g| g["dedup_saved_bytes"] == 0);
    assert_eq!(v["gpus"][0]["dedup_shared_copies"], 1);
    assert!(v["clients"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["id"] != gone_id));
    d.wait_memfds("tdc-weights", 1);
    // The last holder frees its granule: the copy is closed.
    keep.withdraw(o.granule, o.shared_id, WithdrawReason::FREED);
    gpu_dedup(&d, "copy closed", |g| g["dedup_shared_copies"] == 0);
    d.wait_memfds("tdc-weights", 0);
    assert_eq!(d.client(pid_other).unwrap().dedup.shared_bytes, 0);
}

#[test]
fn who_shares_and_what_is_refused() {
    let d = Tandemd::start("dedupflags", Some("[dedup]\ndefault_training = true\n"));
    // The class default shares a job that said nothing; `off` always wins.
    let quiet = Peer::connect(&d.socket, ClientClass::Training);
    assert!(quiet.shares());
    let off = Peer::connect_flags(
        &d.socket,
        ClientClass::Training,
        HELLO_FLAG_NO_SHARE_WEIGHTS,
    );
    assert!(!off.shares());
    let both = Peer::connect_flags(
        &d.socket,
        ClientClass::Training,
        SHARE | HELLO_FLAG_NO_SHARE_WEIGHTS,
    );
    assert!(!both.shares());
    let s = d.snapshot();
    let dd = |id: u64| s.clients.iter().find(|c| c.id == id).unwrap().dedup.clone();
    assert!(dd(quiet.id()).share_weights && !dd(off.id()).share_weights);
    assert_eq!(dd(off.id()).trust_group, None);

    // Dedup from a peer without the flag: counted, ignored, the peer stays.
    off.device(UUID, b"Fake H100");
    off.candidate(G_A, HASH);
    let s = d.wait_stats("protocol error counted", |s| s.dedup.protocol_errors == 1);
    assert!(s.clients.iter().any(|c| c.id == off.id()));
    // A Dedup datagram that does not decode (status out of range): counted.
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let mut w = Dedup::new(DedupOp::Withdraw, G_A, GRANULE);
    w.status = WithdrawReason::FREED.0;
    let n = wire::Message::Dedup(w).encode(&mut buf).unwrap();
    buf[wire::HEADER_LEN + 2] = 99;
    wire::send(quiet.sock.as_fd(), &buf[..n], None).unwrap();
    // An fd with a CANDIDATE, a CANDIDATE before the Device, a wrong length.
    let junk = memfd_with("tdc-junk", 4096, |_| 0);
    let mut c = Dedup::new(DedupOp::Candidate, G_B, GRANULE);
    c.hash = HASH;
    quiet.send_dedup(&c, Some(junk.as_fd()));
    drop(junk);
    quiet.candidate(G_B, HASH); // no Device yet: ignored
    quiet.device(UUID, b"Fake H100");
    let mut odd = c;
    odd.len = GRANULE / 2;
    quiet.send_dedup(&odd, None);
    let s = d.wait_stats("all counted", |s| {
        s.dedup.protocol_errors == 4 && s.dedup.candidates_ignored == 1
    });
    assert_eq!(s.totals.clients, 3, "nobody was disconnected");
    d.wait_memfds("tdc-junk", 0);
    assert!(
        d.log_text().contains("dedup message ignored"),
        "logged at debug"
    );
    // The daemon is fine: the peer that sent all that still merges.
    let a = sharing_peer(&d);
    a.candidate(G_A, HASH);
    quiet.candidate(G_B, HASH);
    let peers = [&a, &quiet];
    let first = first_with_message(&peers);
    let (p, _) = peers[first].recv_dedup();
    assert_eq!(p.op, DedupOp::Publish);
    let copy = memfd_with("tdc-ok", GRANULE as usize, |_| 7);
    peers[first].published(&p, copy.as_fd());
    let (o, fd) = peers[1 - first].recv_dedup();
    assert_eq!(read_fd(fd.unwrap().as_fd(), 16), vec![7; 16]);
    peers[1 - first].result(&o, DedupStatus::OK);
    d.wait_stats("merged", |s| s.dedup.merges == 1);
}

#[test]
fn restart_leaves_an_empty_index_and_peers_register_again() {
    let mut d = Tandemd::start("deduprestart", None);
    let a = sharing_peer(&d);
    let b = sharing_peer(&d);
    a.candidate(G_A, HASH);
    b.candidate(G_B, HASH);
    let peers = [&a, &b];
    let first = first_with_message(&peers);
    let (p, _) = peers[first].recv_dedup();
    let copy = memfd_with("tdc-restart", GRANULE as usize, |_| 1);
    peers[first].published(&p, copy.as_fd());
    d.wait_memfds("tdc-restart", 1);
    let old_pid = d.pid();
    d.restart();
    assert_ne!(d.pid(), old_pid);
    let s = d.snapshot();
    assert_eq!(
        (
            s.dedup.shared_copies,
            s.dedup.sharing_clients,
            s.dedup.merges
        ),
        (0, 0, 0)
    );
    assert_eq!(
        memfds_of(d.pid(), "tdc-restart"),
        0,
        "a new tandemd holds no old copy"
    );
    drop((a, b));
    // Peers register again and start over: the first shared id again.
    let a = sharing_peer(&d);
    let b = sharing_peer(&d);
    a.candidate(G_A, HASH);
    b.candidate(G_B, HASH);
    let peers = [&a, &b];
    let first = first_with_message(&peers);
    let (p2, _) = peers[first].recv_dedup();
    assert_eq!((p2.op, p2.shared_id), (DedupOp::Publish, 1));
    peers[first].published(&p2, copy.as_fd());
    let (o, fd) = peers[1 - first].recv_dedup();
    assert!(fd.is_some());
    peers[1 - first].result(&o, DedupStatus::OK);
    d.wait_stats("merged after restart", |s| s.dedup.saved_bytes == GRANULE);
}

// ---------------------------------------------------------------------------
// Trust groups: a second executable (a copy of this test binary) as a peer
// ---------------------------------------------------------------------------

/// A peer in another process, running [`child_peer_main`] from a copy of this
/// test binary (so the kernel reports another executable for it).
struct ChildPeer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl ChildPeer {
    fn spawn(exe: &Path, socket: &Path) -> ChildPeer {
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "child_peer_main",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("TDC_CHILD_PEER", socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child peer");
        let stdin = child.stdin.take().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut c = ChildPeer { child, stdin, out };
        assert_eq!(c.line(), "shares true");
        c
    }

    /// The child's next protocol line (without the "TDC " prefix), within 20 s.
    fn line(&mut self) -> String {
        let mut l = String::new();
        loop {
            l.clear();
            if self.out.buffer().is_empty() {
                let mut pfd = libc::pollfd {
                    fd: self.out.get_ref().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                let ready = unsafe { libc::poll(&mut pfd, 1, 20_000) };
                assert!(ready > 0, "the child peer said nothing for 20 s");
            }
            let n = self.out.read_line(&mut l).unwrap();
            assert!(n > 0, "child peer exited");
            // The harness may have written "test child_peer_main ... " first.
            if let Some(at) = l.find("TDC ") {
                return l[at + 4..].trim().to_string();
            }
        }
    }

    fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.line()
    }
}

impl Drop for ChildPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Not a test of its own: the body of a child peer when TDC_CHILD_PEER is set
/// (reads commands on stdin, answers "TDC ..." lines on stdout).
#[test]
fn child_peer_main() {
    let Some(socket) = std::env::var_os("TDC_CHILD_PEER") else {
        return;
    };
    // Straight to fd 1: the test harness may capture println!.
    let say = |s: String| {
        let mut o = std::io::stdout().lock();
        o.write_all(format!("TDC {s}\n").as_bytes()).unwrap();
        o.flush().unwrap();
    };
    let p = Peer::connect_flags(Path::new(&socket), ClientClass::Training, SHARE);
    p.device(UUID, b"Fake H100");
    say(format!("shares {}", p.shares()));
    let mut last: Option<Dedup> = None;
    for l in std::io::stdin().lock().lines() {
        let l = l.unwrap();
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["cand", g] => {
                p.candidate(u64::from_str_radix(g, 16).unwrap(), HASH);
                say("ok".into());
            }
            ["recv"] => {
                let (m, fd) = p.recv_dedup();
                let first = fd.map(|f| read_fd(f.as_fd(), 1)[0]);
                say(format!("{} {} {:?}", m.op.name(), m.shared_id, first));
                last = Some(m);
            }
            ["published", byte] => {
                let b: u8 = byte.parse().unwrap();
                let copy = memfd_with("tdc-child", GRANULE as usize, |_| b);
                p.published(&last.unwrap(), copy.as_fd());
                say("ok".into());
            }
            ["result"] => {
                p.result(&last.unwrap(), DedupStatus::OK);
                say("ok".into());
            }
            _ => panic!("child peer: unknown command {l:?}"),
        }
    }
}

/// A copy of this test binary at a path of its own (removed on drop).
struct OtherExe(PathBuf);

impl OtherExe {
    fn new() -> OtherExe {
        let me = std::env::current_exe().unwrap();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join(format!("tdc-other-peer-{}", std::process::id()));
        std::fs::copy(&me, &copy).unwrap();
        OtherExe(copy.canonicalize().unwrap())
    }
}

impl Drop for OtherExe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn trust_groups_keep_peers_of_different_executables_apart() {
    let other = OtherExe::new();
    let exe = other.0.clone();
    let cfg = format!(
        "[[dedup.group]]\nname = \"other\"\nexecutables = [{:?}]\n",
        exe.display().to_string()
    );
    let d = Tandemd::start("dedupgroups", Some(&cfg));
    let p1 = sharing_peer(&d);
    p1.candidate(G_A, HASH);
    let mut c1 = ChildPeer::spawn(&exe, &d.socket);
    assert_eq!(c1.cmd("cand 7e0000000000"), "ok");
    // Both candidates are tracked, each in its own group: no publish.
    let s = d.wait_stats("both candidates tracked", |s| {
        s.clients.len() == 2 && s.clients.iter().all(|c| c.dedup.candidate_granules == 1)
    });
    let groups: Vec<String> = s
        .clients
        .iter()
        .map(|c| c.dedup.trust_group.clone().unwrap())
        .collect();
    assert!(groups.contains(&"other".to_string()), "{groups:?}");
    assert!(
        groups.contains(&format!("uid:{}", s.clients[0].uid)),
        "{groups:?}"
    );
    // A second peer of the other group: the two children merge.
    let mut c2 = ChildPeer::spawn(&exe, &d.socket);
    assert_eq!(c2.cmd("cand 7d0000000000"), "ok");
    let publish = c1.cmd("recv");
    assert!(publish.starts_with("publish "), "{publish}");
    assert_eq!(c1.cmd("published 171"), "ok");
    let offer = c2.cmd("recv");
    assert!(
        offer.starts_with("offer ") && offer.ends_with("Some(171)"),
        "{offer}"
    );
    assert_eq!(c2.cmd("result"), "ok");
    d.wait_stats("children merged", |s| s.dedup.merges == 1);
    // Anything tandemd sent p1 was sent before c2's offer: nothing came.
    assert!(
        !p1.has_message(),
        "a peer of another group was asked to publish"
    );
    // A second peer of p1's group: p1 publishes its own copy, not the children's.
    let p2 = sharing_peer(&d);
    p2.candidate(G_B, HASH);
    let (p, _) = p1.recv_dedup();
    assert_eq!(p.op, DedupOp::Publish);
    let copy = memfd_with("tdc-groups", GRANULE as usize, |_| 205);
    p1.published(&p, copy.as_fd());
    let (o, fd) = p2.recv_dedup();
    assert_eq!(o.op, DedupOp::Offer);
    assert_eq!(
        read_fd(fd.unwrap().as_fd(), 4),
        vec![205; 4],
        "the group's own copy"
    );
    p2.result(&o, DedupStatus::OK);
    let s = d.wait_stats("two groups, two copies", |s| s.dedup.merges == 2);
    assert_eq!(
        (s.dedup.shared_copies, s.dedup.saved_bytes),
        (2, 2 * GRANULE)
    );
    drop((c1, c2));
}
