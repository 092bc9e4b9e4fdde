//! tandemd as a process on a temp socket, driven by fake peers.

mod common;

use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use common::*;
use tandem_coordinator::client;
use tandem_proto::wire::{
    self, ClientClass, ControlOp, Message, RejectReason, MAX_MESSAGE_LEN, PROTOCOL_VERSION,
};
use tandem_proto::EventKind;

const UUID_A: [u8; 16] = *b"GPU-A-0123456789";

#[test]
fn registration_and_per_client_record_counts() {
    let d = Tandemd::start("reg", None);
    let mut peers: Vec<Peer> = (0..3)
        .map(|_| Peer::connect(&d.socket, ClientClass::Training))
        .collect();
    for (i, p) in peers.iter_mut().enumerate() {
        let n = 100 * (i as u64 + 1);
        p.launches(n, 0x11);
        p.push(EventKind::LAUNCH_EX, 5, 0x22, 0, 0);
        p.push(EventKind::GRAPH_LAUNCH, 2, 0x9000, 7, 0);
        p.push(EventKind::ALLOC, 1, 0, 1 << 20, 0x1000);
        p.push(EventKind::ALLOC, 1, 0, 4096, 0x2000);
        p.push(EventKind::FREE, 1, 0, 0, 0x1000);
        p.push(EventKind::COPY_H2D, 3, 0, 100, 0x2000);
        p.push(EventKind::SYNC_BEGIN, 4, 0, 0, 0);
        p.func_name(0x11, b"_Z6matmulPfS_S_i");
        p.device(UUID_A, b"Fake H100");
    }
    for p in &peers {
        let want = p.pushed;
        let id = p.id();
        let c = wait_for("every pushed record counted", || {
            d.client(id)
                .filter(|c| c.records == want && c.top_kernels.iter().any(|k| k.name.is_some()))
        });
        assert_eq!(p.dropped, 0);
        assert_eq!(c.launches, want - 10, "{c:?}"); // minus 2 allocs, 1 free, 3 copies, 4 syncs
        assert_eq!(c.launches_ex, 5);
        assert_eq!(c.graph_launches, 2);
        assert_eq!(c.graph_kernels, 14);
        assert_eq!(c.bytes_allocated, 4096);
        assert_eq!(
            (c.allocs, c.frees, c.copies, c.h2d_bytes, c.syncs),
            (2, 1, 3, 300, 4)
        );
        assert_eq!(c.dropped, 0);
        assert_eq!(c.pid, std::process::id(), "pid comes from SO_PEERCRED");
        assert_eq!(c.class, "training");
        let top = &c.top_kernels[0];
        assert_eq!(top.func_id, "0x11");
        assert_eq!(top.name.as_deref(), Some("_Z6matmulPfS_S_i"));
        assert!(
            c.gpu.as_deref().is_some_and(|g| g.starts_with("GPU-")),
            "{c:?}"
        );
    }
    let s = d.wait_stats("gpu lists every client", |s| {
        s.gpus.len() == 1 && s.gpus[0].clients.len() == 3
    });
    assert_eq!(s.gpus[0].name, "Fake H100");
    let total: u64 = s.clients.iter().map(|c| c.launches).sum();
    assert_eq!(s.gpus[0].launches, total);
    assert_eq!(s.totals.launches, total);
    assert_eq!(s.totals.clients, 3);
    drop(peers);
    let s = d.wait_stats("all reclaimed", |s| s.totals.clients == 0);
    assert_eq!(s.totals.clients_reclaimed, 3);
    assert_eq!(
        s.totals.launches, total,
        "totals keep departed clients' launches"
    );
    assert_eq!(s.departed.len(), 3);
    assert_eq!(s.gpus[0].launches, total);
}

#[test]
fn full_ring_drops_are_counted_and_launches_match() {
    let mut d = Tandemd::start("drops", Some("ring_capacity = 16\n"));
    let mut p = Peer::connect(&d.socket, ClientClass::Auto);
    assert_eq!(p.welcome.ring_capacity, 16);
    p.launches(5000, 1);
    let (pushed, dropped) = (p.pushed, p.dropped);
    assert_eq!(pushed + dropped, 5000);
    let id = p.id();
    let c = wait_for("launches == pushed", || {
        d.client(id).filter(|c| c.launches == pushed)
    });
    assert_eq!(c.dropped, dropped, "the client's drop count is reported");
    assert_eq!(c.launches + c.dropped, 5000);
    assert_eq!(d.stop().map(|s| s.success()), Some(true));
    assert!(
        !d.socket.exists() && !d.stats.exists(),
        "socket files removed at stop"
    );
}

#[test]
fn time_spent_at_a_closed_gate_is_reported() {
    let d = Tandemd::start("gatewait", None);
    let p = Peer::connect(&d.socket, ClientClass::Auto);
    let cb = p.control();
    // What the scheduler will do; here the peer closes its own gate, then waits
    // as the shim does. TimedOut comes back only once the 30 ms bound is reached.
    cb.close_gate();
    let r = cb.wait_open(Duration::from_millis(30), Duration::from_secs(30));
    assert_eq!(r, tandem_proto::GateWait::TimedOut);
    let id = p.id();
    // The reader may sample mid-wait (waits counted, timeout not yet): wait for
    // the finished wait.
    let c = wait_for("gate counters reported", || {
        d.client(id).filter(|c| c.gate_timeouts == 1)
    });
    assert_eq!(c.gate_waits, 1);
    assert!(
        c.gate_wait_ns >= 30_000_000,
        "gate_wait_ns = {}",
        c.gate_wait_ns
    );
}

#[test]
fn many_concurrent_peers() {
    const PEERS: u64 = 24;
    let d = Tandemd::start("many", None);
    let socket = d.socket.clone();
    let stats = d.stats.clone();
    let handles: Vec<_> = (0..PEERS)
        .map(|i| {
            let socket = socket.clone();
            let stats = stats.clone();
            std::thread::spawn(move || {
                let mut p = Peer::connect(&socket, ClientClass::Training);
                p.launches(200 + i, 0x100 + i);
                let id = p.id();
                let want = p.pushed;
                wait_for("this peer's launches", || {
                    client::snapshot(&stats, Duration::from_secs(5))
                        .ok()?
                        .clients
                        .into_iter()
                        .find(|c| c.id == id && c.launches == want)
                });
                (id, want)
            })
        })
        .collect();
    let results: Vec<(u64, u64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut ids: Vec<u64> = results.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, PEERS, "unique ids");
    let s = d.wait_stats("all gone", |s| s.totals.clients == 0);
    assert_eq!(s.totals.clients_reclaimed, PEERS);
    assert_eq!(s.totals.launches, results.iter().map(|r| r.1).sum::<u64>());
    assert_eq!(s.totals.clients_registered, PEERS);
}

/// Fork a child that registers, pushes `n` launches, reports its client id
/// through a pipe and then sleeps until killed. Allocation-free after fork.
fn fork_peer(socket: &std::path::Path, n: u64) -> (libc::pid_t, u64) {
    let (r, w) = tandem_coordinator::sock::pipe().unwrap();
    let path = socket.to_path_buf();
    // SAFETY: the child only runs the peer code below and _exits; it never
    // returns into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let mut p = Peer::connect(&path, ClientClass::Training);
        p.launches(n, 0x77);
        let id = p.id().to_le_bytes();
        // SAFETY: writing 8 bytes from a valid buffer to our pipe.
        unsafe { libc::write(w.as_raw_fd(), id.as_ptr().cast(), 8) };
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    drop(w);
    let mut pfd = libc::pollfd {
        fd: r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ready = unsafe { libc::poll(&mut pfd, 1, 20_000) };
    assert!(ready > 0, "child peer never reported");
    let mut b = [0u8; 8];
    // SAFETY: reading into a valid 8-byte buffer.
    let got = unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    assert_eq!(got, 8, "child peer failed before registering");
    (pid, u64::from_le_bytes(b))
}

#[test]
fn reclaim_at_once_on_hang_up_and_on_kill_9() {
    let d = Tandemd::start("kill", None);
    let daemon_pid = d.pid();
    // hang-up
    let mut p = Peer::connect(&d.socket, ClientClass::Training);
    p.launches(10, 3);
    let id = p.id();
    let region = format!("tandem-client-{id} ");
    wait_for("region mapped in tandemd", || {
        maps_of(daemon_pid).contains(&region).then_some(())
    });
    drop(p);
    d.wait_stats("hung-up client reclaimed", |s| {
        s.totals.clients_reclaimed == 1 && s.clients.is_empty()
    });
    assert!(
        !maps_of(daemon_pid).contains(&region),
        "region unmapped after hang-up"
    );

    // kill -9 of a forked peer process
    let (child, cid) = fork_peer(&d.socket, 123);
    let c = wait_for("child's launches", || {
        d.client(cid).filter(|c| c.launches == 123)
    });
    assert_eq!(c.pid, child as u32);
    let region = format!("tandem-client-{cid} ");
    assert!(maps_of(daemon_pid).contains(&region));
    // SAFETY: killing and reaping our own child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let s = d.wait_stats("killed client reclaimed", |s| {
        s.totals.clients_reclaimed == 2
    });
    assert!(s.clients.is_empty());
    assert_eq!(s.totals.launches, 133);
    assert!(
        !maps_of(daemon_pid).contains(&region),
        "region unmapped after kill -9"
    );
    d.wait_log("ring reclaimed");
}

#[test]
fn misbehaving_peers_are_refused_and_others_unaffected() {
    let d = Tandemd::start("bad", Some("handshake_timeout_ms = 300\n"));
    let mut good = Peer::connect(&d.socket, ClientClass::Training);
    good.launches(50, 1);

    // 1. garbage first message
    let s = connect(&d.socket);
    wire::send(s.as_fd(), b"GET / HTTP/1.1\r\n\r\n", None).unwrap();
    let (b, _) = recv_raw(&s);
    let Ok(Message::Reject(r)) = Message::decode(&b) else {
        panic!("no Reject: {b:?}")
    };
    assert_eq!(r.reason, RejectReason::MALFORMED);
    assert!(r.message.contains("magic"), "{}", r.message);

    // 2. wrong protocol version
    let s = connect(&d.socket);
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = Message::Hello(hello(ClientClass::Auto))
        .encode(&mut buf)
        .unwrap();
    buf[4..6].copy_from_slice(&(PROTOCOL_VERSION + 8).to_le_bytes());
    wire::send(s.as_fd(), &buf[..n], None).unwrap();
    let (b, _) = recv_raw(&s);
    let Ok(Message::Reject(r)) = Message::decode(&b) else {
        panic!("no Reject: {b:?}")
    };
    assert_eq!(r.reason, RejectReason::VERSION_MISMATCH);
    assert!(
        r.message.contains(&format!("v{}", PROTOCOL_VERSION + 8)),
        "{}",
        r.message
    );

    // 3. oversize message
    let s = connect(&d.socket);
    let big = vec![0x41u8; 100_000];
    wire::send(s.as_fd(), &big, None).unwrap();
    let (b, _) = recv_raw(&s);
    let Ok(Message::Reject(r)) = Message::decode(&b) else {
        panic!("no Reject: {b:?}")
    };
    assert_eq!(r.reason, RejectReason::MALFORMED);

    // 4. a peer that connects and never sends: closed after the timeout
    let silent = connect(&d.socket);
    // 5. a peer that registers and never reads (nor hangs up)
    let deaf = connect(&d.socket);
    send_msg(&deaf, &Message::Hello(hello(ClientClass::Training)));
    // 6. garbage written into a ring header
    let mut vandal = Peer::connect(&d.socket, ClientClass::Training);
    vandal.launches(5, 2);
    let vid = vandal.id();
    wait_for("vandal's records", || {
        d.client(vid).filter(|c| c.launches == 5)
    });
    vandal.corrupt_ring_magic();
    let c = wait_for("ring detached", || {
        d.client(vid).filter(|c| c.ring_detached)
    });
    assert_eq!(c.bad_records, 1);
    // 7. a registered client that sends garbage later is disconnected
    let mut late = Peer::connect(&d.socket, ClientClass::Training);
    let lid = late.id();
    wire::send(late.sock.as_fd(), b"\x00\x01", None).unwrap();
    d.wait_stats("late garbage client removed", |s| {
        s.clients.iter().all(|c| c.id != lid)
    });
    late.launches(1, 1); // writing its own (now unread) ring harms nobody

    // the silent peer is closed by the daemon within its deadline
    let (b, _) = recv_raw(&silent);
    let Ok(Message::Reject(_)) = Message::decode(&b) else {
        panic!("silent peer not refused: {b:?}")
    };
    let s = d.wait_stats("counters", |s| {
        s.totals.handshake_timeouts >= 1 && s.totals.rejected >= 5
    });
    assert_eq!(s.totals.handshake_timeouts, 1);

    // the well-behaved client is still counted, live, after all that
    good.launches(50, 1);
    let gid = good.id();
    wait_for("good client unaffected", || {
        d.client(gid)
            .filter(|c| c.launches == 100 && c.bad_records == 0)
    });
    // the deaf client registered and stays
    assert!(s.totals.clients >= 3, "{:?}", s.totals);
    drop(deaf);

    let log = d.log_text();
    for needle in [
        "magic",
        "protocol version mismatch",
        "datagram longer than the receive buffer",
        "sent no Hello or Control",
        "garbage in the client's ring",
        "sent a bad message",
    ] {
        assert!(log.contains(needle), "log lacks {needle:?}:\n{log}");
    }
    assert!(
        log.contains(&format!("pid {}", std::process::id())),
        "logs name the peer pid"
    );
}

/// First messages queued while tandemd could not run are read, not taken
/// for silence: epoll hands over 64 events a wait, and the handshake
/// deadlines were checked after each batch, so connections whose garbage
/// waited in a later batch were refused as "no message within" (a CI run
/// logged 1,014 silent peers for 20). tandemd is stopped while 200
/// accepted peers send garbage, until their deadlines pass.
#[test]
fn first_messages_queued_past_the_deadline_are_read_not_called_silence() {
    const PEERS: usize = 200;
    let d = Tandemd::start("queued", Some("handshake_timeout_ms = 1500\n"));
    let started = std::time::Instant::now();
    let socks: Vec<_> = (0..PEERS).map(|_| connect(&d.socket)).collect();
    // Accepted (each deadline set) while tandemd runs; any it has not
    // accepted by the stop gets a fresh deadline later, which only hides
    // the fault, never fakes it.
    std::thread::sleep(Duration::from_millis(500));
    d.signal(libc::SIGSTOP);
    for s in &socks {
        wire::send(s.as_fd(), b"GET / HTTP/1.1\r\n\r\n", None).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2000).saturating_sub(started.elapsed()));
    d.signal(libc::SIGCONT);
    // A peer refused as silent is closed with its garbage unread, which
    // resets the connection: its recv fails before it reads the Reject.
    let (mut silent, mut reset) = (0, 0);
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    for s in &socks {
        let Ok(got) = wire::recv(s.as_fd(), &mut buf) else {
            reset += 1;
            continue;
        };
        let Ok(Message::Reject(r)) = Message::decode(&buf[..got.len]) else {
            panic!("no Reject: {:?}", &buf[..got.len])
        };
        assert_eq!(r.reason, RejectReason::MALFORMED, "{}", r.message);
        if r.message.contains("no message within") {
            silent += 1;
        }
    }
    assert_eq!(
        (silent, reset),
        (0, 0),
        "of {PEERS} peers that sent garbage, {silent} were told they sent nothing and {reset} were reset"
    );
    let s = d.snapshot();
    assert_eq!(s.totals.handshake_timeouts, 0);
}

#[test]
fn control_needs_privilege() {
    let d = Tandemd::start("ctl", None);
    let mut p = Peer::connect(&d.socket, ClientClass::Training);
    p.launches(1, 1);
    let id = p.id();
    if !is_root() {
        println!("note: not root: skipping the setuid(65534) half of control_needs_privilege");
    } else {
        let (r, w) = tandem_coordinator::sock::pipe().unwrap();
        let socket = d.socket.clone();
        // SAFETY: the child only calls setuid, the control client, writes
        // two bytes to a pipe and _exits; it never returns into the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut out = [0xFFu8; 2];
            // SAFETY: plain setuid in the single-threaded child.
            if unsafe { libc::setuid(65534) } == 0 {
                let t = Duration::from_secs(5);
                let a = client::control(&socket, ControlOp::Reload, 0, ClientClass::Auto, t);
                let b =
                    client::control(&socket, ControlOp::SetClass, id, ClientClass::Inference, t);
                out[0] = a.map_or(0xFE, |(st, _)| st as u8);
                out[1] = b.map_or(0xFE, |(st, _)| st as u8);
            }
            // SAFETY: write from a valid buffer, then exit without unwinding.
            unsafe {
                libc::write(w.as_raw_fd(), out.as_ptr().cast(), 2);
                libc::_exit(0);
            }
        }
        drop(w);
        let mut out = [0u8; 2];
        // SAFETY: blocking read of 2 bytes into a valid buffer; then reap.
        unsafe {
            let mut pfd = libc::pollfd {
                fd: r.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            assert!(libc::poll(&mut pfd, 1, 20_000) > 0);
            assert_eq!(libc::read(r.as_raw_fd(), out.as_mut_ptr().cast(), 2), 2);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_eq!(
            out[0] as u16,
            RejectReason::CONTROL_DENIED.0,
            "reload by uid 65534"
        );
        assert_eq!(
            out[1] as u16,
            RejectReason::CONTROL_DENIED.0,
            "set-class by uid 65534"
        );
        d.wait_log("uid 65534");
        assert_eq!(d.snapshot().totals.control_denied, 2);
        assert_eq!(
            d.client(id).unwrap().class,
            "training",
            "denied set-class changed nothing"
        );
    }
    // root (or tandemd's own user) may
    let t = Duration::from_secs(5);
    let (st, msg) = client::control(&d.socket, ControlOp::Reload, 0, ClientClass::Auto, t).unwrap();
    assert_eq!(st, 0, "{msg}");
    let (st, msg) = client::control(
        &d.socket,
        ControlOp::SetClass,
        id,
        ClientClass::Inference,
        t,
    )
    .unwrap();
    assert_eq!(st, 0, "{msg}");
    let c = d.client(id).unwrap();
    assert_eq!(c.class, "inference");
    assert!(c.class_reason.contains("operator"), "{}", c.class_reason);
    let (st, msg) = client::control(
        &d.socket,
        ControlOp::SetClass,
        9999,
        ClientClass::Inference,
        t,
    )
    .unwrap();
    assert_eq!(st, RejectReason::NO_SUCH_CLIENT.0, "{msg}");
    assert!(msg.contains("9999"), "{msg}");
    // tandemctl drives the same path
    let out = std::process::Command::new(tandemctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(["set-class", &id.to_string(), "training"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.client(id).unwrap().class, "training");
}

#[test]
fn config_errors_defaults_and_sighup_reload() {
    // a bad key: exit 2, one message naming file and key
    let dir = TestDir::new("cfgbad");
    let cfg = dir.path("bad.toml");
    std::fs::write(
        &cfg,
        "ring_capacity = 64\n[policy]\nauto_clas = \"training\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(tandemd_bin())
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(dir.path("x.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(cfg.to_str().unwrap()) && err.contains("auto_clas"),
        "{err}"
    );
    assert!(!dir.path("x.sock").exists());

    // a missing file named by --config: exit 2, naming it and --no-config
    let missing = dir.path("missing.toml");
    let out = std::process::Command::new(tandemd_bin())
        .arg("--config")
        .arg(&missing)
        .arg("--socket")
        .arg(dir.path("x.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(missing.to_str().unwrap()) && err.contains("--no-config"),
        "{err}"
    );
    assert!(!dir.path("x.sock").exists());

    // an empty file: the defaults
    let d = Tandemd::start("cfgempty", None);
    let p = Peer::connect(&d.socket, ClientClass::Auto);
    assert_eq!(
        p.welcome.ring_capacity,
        tandem_proto::ring::DEFAULT_CAPACITY
    );
    drop(p);

    // SIGHUP after the file was deleted keeps the running configuration
    std::fs::write(&d.config, "ring_capacity = 64\n").unwrap();
    d.signal(libc::SIGHUP);
    d.wait_stats("reload counted", |s| s.totals.reloads == 1);
    std::fs::remove_file(&d.config).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_stats("failed reload counted", |s| s.totals.reload_failures == 1);
    d.wait_log("the running configuration is kept");
    let p = Peer::connect(&d.socket, ClientClass::Auto);
    assert_eq!(p.welcome.ring_capacity, 64, "not reset to the defaults");
    drop(p);
    drop(d);

    // SIGHUP with a bad file keeps the old configuration
    let d = Tandemd::start("cfghup", Some("ring_capacity = 64\n"));
    std::fs::write(&d.config, "ring_capacity = 1000\n").unwrap();
    d.signal(libc::SIGHUP);
    d.wait_stats("failed reload counted", |s| s.totals.reload_failures == 1);
    d.wait_log("keeping the running configuration");
    let p = Peer::connect(&d.socket, ClientClass::Auto);
    assert_eq!(p.welcome.ring_capacity, 64, "old configuration kept");
    std::fs::write(
        &d.config,
        "ring_capacity = 128\n[policy]\nauto_class = \"inference\"\n",
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_stats("reload counted", |s| s.totals.reloads == 1);
    let q = Peer::connect(&d.socket, ClientClass::Auto);
    assert_eq!(q.welcome.ring_capacity, 128);
    assert_eq!(q.welcome.class, ClientClass::Inference);
    // the earlier client's class was re-decided under the new policy
    let c = d.client(p.id()).unwrap();
    assert_eq!(c.class, "inference", "{c:?}");
}

#[test]
fn stats_json_and_prometheus_are_well_formed() {
    let d = Tandemd::start("stats", None);
    let mut p = Peer::connect(&d.socket, ClientClass::Inference);
    p.launches(7, 0xABCDEF);
    p.func_name(0xABCDEF, b"weird \"kernel\"\\name");
    p.device(UUID_A, b"Fake GPU");
    let id = p.id();
    wait_for("records + name + gpu", || {
        d.client(id).filter(|c| {
            c.launches == 7
                && c.gpu.is_some()
                && c.top_kernels.first().is_some_and(|k| k.name.is_some())
        })
    });
    let r = client::http_get(&d.stats, "/stats", Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    for &k in tandem_e2e::coord::STATS_KEYS {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["pid"].as_u64(), Some(u64::from(d.pid())));
    let g = &v["gpus"][0];
    for k in ["uuid", "name", "clients", "launches"] {
        assert!(g.get(k).is_some(), "gpu missing {k}");
    }
    assert_eq!(g["clients"][0].as_u64(), Some(id));
    let c = &v["clients"][0];
    for k in [
        "id",
        "pid",
        "uid",
        "exe",
        "cgroup",
        "class",
        "class_claimed",
        "class_reason",
        "gpu",
        "connected_s",
        "launches",
        "launches_ex",
        "graph_launches",
        "graph_kernels",
        "launch_rate_hz",
        "records",
        "dropped",
        "bad_records",
        "bytes_allocated",
        "allocs",
        "frees",
        "h2d_bytes",
        "syncs",
        "gate_wait_ns",
        "top_kernels",
    ] {
        assert!(c.get(k).is_some(), "client missing {k}");
    }
    assert!(c["id"].is_u64() && c["launches"].is_u64());
    assert_eq!(c["class_claimed"], "inference");
    assert_eq!(
        c["class"], "inference",
        "root (or tandemd's user) may claim inference"
    );
    assert_eq!(c["top_kernels"][0]["func_id"], "0xabcdef");
    assert_eq!(c["top_kernels"][0]["name"], "weird \"kernel\"\\name");
    assert_eq!(c["top_kernels"][0]["launches"], 7);
    for k in [
        "clients",
        "launches",
        "dropped",
        "clients_reclaimed",
        "rejected",
    ] {
        assert!(v["totals"][k].is_u64(), "totals missing {k}");
    }

    let r = client::http_get(&d.stats, "/metrics", Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, 200);
    assert!(r
        .content_type
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    // The strict exposition checker the system tests use too.
    let ex = tandem_e2e::coord::parse_prometheus(&r.body)
        .unwrap_or_else(|e| panic!("bad Prometheus text: {e}\n{}", r.body));
    for n in [
        "tandem_clients",
        "tandem_launches_total",
        "tandem_dropped_records_total",
        "tandem_bytes_allocated",
        "tandem_launch_rate_hz",
        "tandem_gate_wait_seconds_total",
        "tandem_clients_reclaimed_total",
        "tandem_rejected_total",
    ] {
        assert!(!ex.get(n).is_empty(), "metrics lack {n}:\n{}", r.body);
    }
    let l = ex.get("tandem_launches_total")[0];
    assert_eq!(l.value, 7.0);
    let id_label = id.to_string();
    assert_eq!(l.labels.get("client"), Some(&id_label), "{l:?}");
    assert_eq!(
        l.labels.get("class").map(String::as_str),
        Some("inference"),
        "{l:?}"
    );

    // anything else: 404 with help; junk: 400; huge: 431; wrong method: 405
    let r = client::http_get(&d.stats, "/nope", Duration::from_secs(5)).unwrap();
    assert_eq!(r.status, 404);
    assert!(r.body.contains("/metrics"));
    assert!(raw_http(&d.stats, b"BLAH\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(raw_http(&d.stats, b"POST /stats HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    let mut huge = b"GET /stats HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 20_000));
    assert!(raw_http(&d.stats, &huge).starts_with("HTTP/1.1 431"));
    // a stats client that never sends does not block others
    let _idle = std::os::unix::net::UnixStream::connect(&d.stats).unwrap();
    assert_eq!(
        client::http_get(&d.stats, "/stats", Duration::from_secs(5))
            .unwrap()
            .status,
        200
    );
}

#[test]
fn second_tandemd_refuses_and_sd_notify_ready() {
    let dir = TestDir::new("notify");
    let nsock = dir.path("notify.sock");
    let rx = std::os::unix::net::UnixDatagram::bind(&nsock).unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let d = Tandemd::start("second", None);
    // a second daemon on the same socket refuses with a clear message
    let out = d.command().output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already running"), "{err}");
    assert!(
        client::snapshot(&d.stats, Duration::from_secs(5)).is_ok(),
        "first one unaffected"
    );
    // a stale socket file is replaced; READY=1 goes to NOTIFY_SOCKET
    let stale_dir = TestDir::new("stale");
    let stale = stale_dir.path("d.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap()); // leaves the file
    let mut child = std::process::Command::new(tandemd_bin())
        .arg("--no-config")
        .arg("--socket")
        .arg(&stale)
        .env("NOTIFY_SOCKET", &nsock)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let n = rx.recv(&mut buf).expect("READY=1 datagram");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.contains("READY=1"), "{msg}");
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let mut stopping = false;
    while let Ok(n) = rx.recv(&mut buf) {
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(stopping, "STOPPING=1 sent at stop");
    assert!(child.wait().unwrap().success());
    assert!(!stale.exists());
}

#[test]
fn committed_default_config_is_the_printed_one() {
    let out = std::process::Command::new(tandemd_bin())
        .arg("--print-default-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/tandemd.toml"
    ))
    .expect("scripts/tandemd.toml");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        committed,
        "scripts/tandemd.toml is stale: regenerate it with `tandemd --print-default-config > scripts/tandemd.toml`"
    );
}

#[test]
fn tandemctl_run_starts_and_stops_only_its_own_tandemd() {
    let dir = TestDir::new("run");
    let socket = dir.path("d.sock");
    // any loadable library stands in for libtandem.so here
    let shim = [
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
        "/lib64/libm.so.6",
        "/usr/lib/libm.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists());
    let Some(shim) = shim else {
        println!("note: no libm.so.6 found; skipping tandemctl run test");
        return;
    };
    let run = |sock: &std::path::Path| {
        std::process::Command::new(tandemctl_bin())
            .arg("--socket")
            .arg(sock)
            .args([
                "run",
                "--class",
                "training",
                "--",
                "sh",
                "-c",
                "test \"$TANDEM_CLASS\" = training && test -n \"$LD_PRELOAD\" && exit 7",
            ])
            .env("TANDEM_SHIM", shim)
            .output()
            .unwrap()
    };
    let out = run(&socket);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("never registered"));
    assert!(!socket.exists(), "the tandemd it started was stopped");
    // with a coordinator already running, it is used and left running
    let d = Tandemd::start("run2", None);
    let out = run(&d.socket);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        client::snapshot(&d.stats, Duration::from_secs(5)).is_ok(),
        "existing tandemd left running"
    );
    // a missing shim is a clear one-line error
    let out = std::process::Command::new(tandemctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(["run", "--", "true"])
        .env("TANDEM_SHIM", "/nonexistent/libtandem.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TANDEM_SHIM"));
}

#[test]
fn auto_is_inference_until_a_training_kernel_shows() {
    // Default config: auto_class = "detect". The test's uid is the daemon's, so
    // both peers may claim inference.
    let d = Tandemd::start("autoclass", None);
    let mut serve = Peer::connect(&d.socket, ClientClass::Auto);
    let train = Peer::connect(&d.socket, ClientClass::Auto);
    assert_eq!(serve.welcome.class, ClientClass::Inference);
    assert_eq!(train.welcome.class, ClientClass::Inference);
    serve.func_name(1, b"_Z20softmax_warp_forwardIfEvv");
    serve.func_name(2, b"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n");
    train.func_name(1, b"_Z20softmax_warp_forwardIfEvv");
    train.func_name(3, b"_ZN2at6native27native_layer_norm_backward_kernelIfEEvv");
    let t = wait_for("the trainer reclassified", || {
        d.client(train.id()).filter(|c| c.class == "training")
    });
    assert!(
        t.class_reason.contains("native_layer_norm_backward") && t.class_reason.contains("auto"),
        "{}",
        t.class_reason
    );
    // The server's names were read (they label its launches) and it stays
    // inference.
    serve.launches(10, 2);
    let s = wait_for("the server's kernel names arrived", || {
        d.client(serve.id()).filter(|c| {
            c.top_kernels
                .iter()
                .any(|k| k.name.as_deref() == Some("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"))
        })
    });
    assert_eq!(s.class, "inference", "{}", s.class_reason);
    assert!(
        s.class_reason.contains("until a training kernel"),
        "{}",
        s.class_reason
    );

    // With auto_class = "training" nothing is detected: training from the start.
    let d2 = Tandemd::start(
        "autoclass-fixed",
        Some("[policy]\nauto_class = \"training\"\n"),
    );
    let p = Peer::connect(&d2.socket, ClientClass::Auto);
    assert_eq!(p.welcome.class, ClientClass::Training);
}

#[test]
fn capture_marks_reach_inference_clients_only_while_capture_is_on() {
    let on = "[trace]\nmark_every_ns = 1000000\n";
    let d = Tandemd::start("marks-capture-on", Some(on));
    let serve = Peer::connect(&d.socket, ClientClass::Inference);
    let train = Peer::connect(&d.socket, ClientClass::Training);
    assert_eq!(serve.control().mark_every_ns(), 1_000_000);
    assert_eq!(train.control().mark_every_ns(), 500_000, "the scheduler's");
    let d = Tandemd::start(
        "marks-capture-off",
        Some("[trace]\nwindow = 0\nmark_every_ns = 1000000\n"),
    );
    let serve = Peer::connect(&d.socket, ClientClass::Inference);
    assert_eq!(serve.welcome.class, ClientClass::Inference);
    assert_eq!(serve.control().mark_every_ns(), 0);
    let r = client::http_get(
        &d.stats,
        &format!("/trace?id={}", serve.id()),
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("capture is off"), "{}", r.body);
}

#[test]
fn training_clients_are_asked_for_completion_marks_and_marks_are_measured() {
    let d = Tandemd::start("marks", None);
    let mut train = Peer::connect(&d.socket, ClientClass::Training);
    let serve = Peer::connect(&d.socket, ClientClass::Inference);
    assert_eq!(train.welcome.class, ClientClass::Training);
    assert_eq!(serve.welcome.class, ClientClass::Inference);
    // Set at registration, before the Welcome: no waiting needed.
    assert_eq!(train.control().mark_every_ns(), 500_000);
    assert_eq!(
        serve.control().mark_every_ns(),
        1_000_000,
        "the capture's ([trace] mark_every_ns, on by default)"
    );
    // What the shim does: launches, a mark after them, its completion; the
    // control block's counters.
    train.launches(3, 0x42);
    train.push(EventKind::MARK, 1, 1, 3, 0);
    std::thread::sleep(Duration::from_millis(2));
    train.push(EventKind::MARK_DONE, 1, 1, 0, 0);
    let cb = train.control();
    cb.count_mark(false);
    cb.count_mark(true);
    let id = train.id();
    let c = wait_for("the mark measured and counted", || {
        d.client(id).filter(|c| {
            c.marks_done == 1 && c.sched.as_ref().is_some_and(|s| s.marks_measured == 1)
        })
    });
    assert_eq!(c.marks_placed, 1);
    assert_eq!(c.bad_records, 0, "MARK and MARK_DONE are known records");
    let s = c.sched.unwrap();
    assert_eq!(s.mark_every_ns, 500_000);
    assert_eq!(
        d.client(serve.id())
            .and_then(|c| c.sched)
            .map(|s| s.mark_every_ns),
        Some(0)
    );
    // Made inference by the operator: no more of the scheduler's marks,
    // only the capture's (`[trace] mark_every_ns`, 1 ms by default).
    let (status, msg) = client::control(
        &d.socket,
        ControlOp::SetClass,
        id,
        ClientClass::Inference,
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(status, 0, "{msg}");
    assert_eq!(train.control().mark_every_ns(), 1_000_000);
    let r = client::http_get(&d.stats, "/metrics", Duration::from_secs(5)).unwrap();
    let ex = tandem_e2e::coord::parse_prometheus(&r.body)
        .unwrap_or_else(|e| panic!("bad Prometheus text: {e}\n{}", r.body));
    for n in [
        "tandem_marks_placed_total",
        "tandem_marks_done_total",
        "tandem_marks_measured_total",
    ] {
        assert!(
            ex.get(n).iter().any(|m| m.value == 1.0),
            "{n} lacks the client's 1:\n{}",
            r.body
        );
    }
}
