//! What an operator meets with tandemd: monitoring that idle connections
//! cannot take down, two daemons in one directory, missing configuration
//! files, refusals that say what happened, a bounded log.

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use tandem_e2e::coord::{
    coordinator_bins, default_config, hello_bytes, http_get, Peer, Tandemd, TestDir,
};

/// Raises this process's soft open-file limit to at least `want` (children
/// inherit it); `false` if the hard limit does not allow it.
fn raise_nofile(want: u64) -> bool {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `l`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 || l.rlim_max < want {
        return false;
    }
    if l.rlim_cur < want {
        l.rlim_cur = want;
        // SAFETY: setrlimit reads one rlimit; the soft limit is within the hard one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) } != 0 {
            return false;
        }
    }
    true
}

/// The address `http://ADDR/metrics` named in the startup line.
fn metrics_addr(d: &Tandemd) -> String {
    let log = d.log();
    log.split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no TCP address in the startup log:\n{log}"))
        .to_string()
}

/// `GET path` over TCP.
fn tcp_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::Read;
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).map_err(|e| e.to_string())?;
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad response {raw:?}"))?;
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

fn with_tcp(config: &str) -> String {
    let c = config.replacen(
        "\ntcp_listen = \"\"\n",
        "\ntcp_listen = \"127.0.0.1:0\"\n",
        1,
    );
    assert!(c != config, "the default config sets tcp_listen = \"\"");
    c
}

/// 1,000 idle connections (half on the stats socket, half on TCP) are held
/// open; `tandemctl status`, `GET /metrics` on both and `GET /healthz`
/// still answer, each within a second (the bound). Before, 16 idle
/// connections took every slot for 2 s: tandemctl read "Connection reset by
/// peer" and /metrics 503.
#[test]
fn a_thousand_idle_connections_do_not_keep_status_or_metrics_from_answering() {
    if !raise_nofile(4096) {
        eprintln!("skipped: the hard RLIMIT_NOFILE is below 4096");
        return;
    }
    let dir = TestDir::new("flood");
    let d = Tandemd::start_with_config(&dir, &with_tcp(default_config()));
    let addr = metrics_addr(&d);
    let mut idle_unix = Vec::new();
    let mut idle_tcp = Vec::new();
    for _ in 0..500 {
        idle_unix.push(UnixStream::connect(d.stats_socket()).expect("connect stats socket"));
        idle_tcp.push(TcpStream::connect(&addr).expect("connect TCP"));
    }
    let within = Duration::from_secs(1);
    let t = Instant::now();
    let out = Command::new(&coordinator_bins().tandemctl)
        .arg("--socket")
        .arg(d.socket())
        .arg("status")
        .env_remove("TANDEM_SOCKET")
        .output()
        .expect("run tandemctl");
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "tandemctl status under 1,000 idle connections: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < within, "tandemctl status took {took:?}");

    let t = Instant::now();
    let r = http_get(d.stats_socket(), "/metrics").expect("GET /metrics on the stats socket");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        t.elapsed() < within,
        "GET /metrics (unix) took {:?}",
        t.elapsed()
    );

    for path in ["/metrics", "/healthz"] {
        let t = Instant::now();
        let (status, body) = tcp_get(&addr, path).expect("GET over TCP");
        assert_eq!(status, 200, "GET {path} over TCP: {body}");
        assert!(
            t.elapsed() < within,
            "GET {path} (TCP) took {:?}",
            t.elapsed()
        );
        if path == "/healthz" {
            assert_eq!(body, "ok\n");
        }
    }
    assert_eq!(
        idle_unix.len() + idle_tcp.len(),
        1000,
        "all held to the end"
    );
}

/// Two tandemds in one directory, on `tandemd.sock` and `b.sock`: each has
/// its own stats socket (`stats.sock`, `b.stats.sock`), answers with its own
/// pid, and stopping either leaves the other's sockets in place. A third
/// whose main socket would be the first one's stats socket refuses to start
/// and deletes nothing. Before, the second took over `stats.sock` and
/// deleted it when it stopped.
#[test]
fn two_daemons_in_one_directory_keep_their_own_sockets() {
    let dir = TestDir::new("two");
    let mut a = Tandemd::start(&dir);
    let b_sock = dir.path().join("b.sock");
    let mut b = Tandemd::spawn_on(&dir, default_config(), &b_sock, &[]);
    b.wait_ready();
    assert_eq!(b.stats_socket(), dir.path().join("b.stats.sock"));
    let pid_of = |stats: &std::path::Path| {
        let r = http_get(stats, "/stats").expect("GET /stats");
        let v: serde_json::Value = serde_json::from_str(&r.body).expect("JSON");
        v["pid"].as_u64().expect("pid")
    };
    assert_eq!(pid_of(a.stats_socket()), u64::from(a.pid()));
    assert_eq!(pid_of(b.stats_socket()), u64::from(b.pid()));
    // tandemctl finds b's stats socket from b's main socket.
    let out = Command::new(&coordinator_bins().tandemctl)
        .arg("--socket")
        .arg(&b_sock)
        .args(["status", "--json"])
        .output()
        .expect("run tandemctl");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json");
    assert_eq!(v["pid"].as_u64(), Some(u64::from(b.pid())));

    // A daemon whose main socket is a's stats socket: refused, nothing removed.
    let mut c = Tandemd::spawn_on(&dir, default_config(), a.stats_socket(), &[]);
    let st = c.wait_exit(Duration::from_secs(20));
    assert!(
        !st.success(),
        "it started on a's stats socket:\n{}",
        c.log()
    );
    assert_eq!(
        pid_of(a.stats_socket()),
        u64::from(a.pid()),
        "a still serves"
    );

    b.signal(libc::SIGTERM);
    assert!(
        b.wait_exit(Duration::from_secs(20)).success(),
        "{}",
        b.log()
    );
    assert!(!b_sock.exists() && !dir.path().join("b.stats.sock").exists());
    assert!(
        dir.socket().exists() && dir.stats_socket().exists(),
        "a's sockets are gone"
    );
    assert_eq!(pid_of(a.stats_socket()), u64::from(a.pid()));
    a.signal(libc::SIGTERM);
    assert!(
        a.wait_exit(Duration::from_secs(20)).success(),
        "{}",
        a.log()
    );
}

/// Runs `cmd` with its output in `log`, killing it if it still runs after
/// 20 s (a tandemd that started when it should have refused): (exit code,
/// output).
fn bounded(cmd: &mut Command, log: &std::path::Path) -> (Option<i32>, String) {
    bounded_until(cmd, log, None)
}

/// [`bounded`], also stopping it once its output contains `until`.
fn bounded_until(
    cmd: &mut Command,
    log: &std::path::Path,
    until: Option<&str>,
) -> (Option<i32>, String) {
    let f = std::fs::File::create(log).expect("log file");
    let mut child = cmd
        .stdout(f.try_clone().expect("dup"))
        .stderr(f)
        .spawn()
        .expect("spawn");
    let end = Instant::now() + Duration::from_secs(20);
    let st = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st.code();
        }
        let done =
            until.is_some_and(|u| std::fs::read_to_string(log).unwrap_or_default().contains(u));
        if done || Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (st, std::fs::read_to_string(log).unwrap_or_default())
}

/// `tandemctl ARGS` on `d`: (exit code, stdout and stderr).
fn tandemctl(d: &Tandemd, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(&coordinator_bins().tandemctl)
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .env_remove("TANDEM_SOCKET")
        .output()
        .expect("run tandemctl");
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `tandemd --config` of a file that does not exist is an error naming it
/// and `--no-config`; a reload after the file was deleted keeps the running
/// configuration, says so, and `tandemctl reload` fails. Before, both were
/// an INFO line and the built-in defaults.
#[test]
fn a_missing_config_file_is_an_error_and_a_reload_of_one_keeps_the_running_config() {
    let dir = TestDir::new("missingcfg");
    let missing = dir.path().join("missing.toml");
    let (code, err) = bounded(
        Command::new(&coordinator_bins().tandemd)
            .arg("--config")
            .arg(&missing)
            .arg("--socket")
            .arg(dir.path().join("m.sock"))
            .env_remove("TANDEM_SOCKET"),
        &dir.path().join("m.log"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(missing.to_str().expect("utf-8")) && err.contains("--no-config"),
        "{err}"
    );
    assert!(!dir.path().join("m.sock").exists(), "it did not start");

    let config =
        default_config().replacen("\nring_capacity = 32768\n", "\nring_capacity = 128\n", 1);
    assert!(
        config != default_config(),
        "the default config sets ring_capacity = 32768"
    );
    let d = Tandemd::start_with_config(&dir, &config);
    let capacity = |d: &Tandemd| {
        let p = Peer::connect(d.socket()).expect("connect");
        p.send(&hello_bytes()).expect("Hello");
        let (buf, _fd) = p.recv(Duration::from_secs(20)).expect("Welcome");
        match tandem_proto::Message::decode(&buf) {
            Ok(tandem_proto::Message::Welcome(w)) => w.ring_capacity,
            other => panic!("want a Welcome, got {other:?}"),
        }
    };
    assert_eq!(capacity(&d), 128);
    std::fs::remove_file(d.config_path()).expect("delete the config");
    let (code, text) = tandemctl(&d, &["reload"]);
    assert_ne!(code, Some(0), "tandemctl reload of a deleted file: {text}");
    assert!(
        text.contains("does not exist") && text.contains("running configuration is kept"),
        "{text}"
    );
    assert!(text.contains("(configuration not applied)"), "{text}");
    assert_eq!(capacity(&d), 128, "not reset to the defaults");
}

/// Each control refusal carries a code that fits it, which tandemctl names:
/// an unknown client id, a reload of a bad file. Before: "(malformed hello)"
/// and "(coordinator internal error)".
#[test]
fn control_refusals_are_labelled_by_what_happened() {
    let dir = TestDir::new("labels");
    let d = Tandemd::start(&dir);
    let (code, text) = tandemctl(&d, &["set-class", "99", "inference"]);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("no client with id 99"), "{text}");
    assert!(text.contains("(no such client)"), "{text}");
    assert!(!text.contains("hello"), "{text}");

    std::fs::write(d.config_path(), "bogus_key = 1\n").expect("write a bad config");
    let (code, text) = tandemctl(&d, &["reload"]);
    assert_ne!(code, Some(0), "{text}");
    assert!(
        text.contains("bogus_key") && text.contains("kept"),
        "{text}"
    );
    assert!(text.contains("(configuration not applied)"), "{text}");
    assert!(!text.contains("internal error"), "{text}");
}

/// 5,000 connections that send garbage and 20 that send nothing give a
/// bounded number of WARN lines (a burst per cause per window), then one
/// line per cause saying how many more were suppressed. Before: one line
/// each, 5,000 lines in half a second, from a socket anyone can open.
#[test]
fn a_flood_of_bad_connections_gives_a_bounded_log() {
    let dir = TestDir::new("logflood");
    let config = default_config().replacen(
        "\nhandshake_timeout_ms = 1000\n",
        "\nhandshake_timeout_ms = 300\n",
        1,
    );
    assert!(
        config != default_config(),
        "the default sets handshake_timeout_ms = 1000"
    );
    let d = Tandemd::start_with_config(&dir, &config);
    let silent: Vec<Peer> = (0..20)
        .map(|_| Peer::connect(d.socket()).expect("connect"))
        .collect();
    for _ in 0..5000 {
        let p = Peer::connect(d.socket()).expect("connect");
        let _ = p.send(b"garbage");
    }
    let all_suppressed = |log: &str| {
        ["garbage peer", "silent peer"]
            .iter()
            .all(|c| log.contains(&format!("more \"{c}\" warnings suppressed")))
    };
    let end = Instant::now() + Duration::from_secs(30);
    while !all_suppressed(&d.log()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = d.log();
    let warns = log.lines().filter(|l| l.contains("WARN")).count();
    assert!(all_suppressed(&log), "no suppressed-count lines:\n{log}");
    assert!(warns < 100, "{warns} WARN lines for 5,020 bad connections");
    drop(silent);
}

/// A tandemd with 64 open files at most (soft and hard): jobs past what
/// its descriptors allow are refused with TOO_MANY_CLIENTS and a message
/// naming the limit, never left waiting or told "internal error", and the
/// failed accepts are a bounded number of log lines. Before: "accept
/// failed" once per wake-up and no answer, or "coordinator internal error
/// ... memfd_create failed: Too many open files".
#[test]
fn running_out_of_descriptors_is_refused_as_the_client_limit() {
    let dir = TestDir::new("nofile");
    let config = default_config().replacen(
        "\nhandshake_timeout_ms = 1000\n",
        "\nhandshake_timeout_ms = 60000\n",
        1,
    );
    assert!(
        config != default_config(),
        "the default sets handshake_timeout_ms = 1000"
    );
    let mut d = Tandemd::spawn_with_nofile(&dir, &config, 64);
    d.wait_ready();
    let refused = |p: &Peer, what: &str| -> String {
        let (buf, _fd) = p
            .recv(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}\n{}", d.log()));
        match tandem_proto::Message::decode(&buf) {
            Ok(tandem_proto::Message::Reject(r)) => {
                assert_eq!(
                    r.reason,
                    tandem_proto::RejectReason::TOO_MANY_CLIENTS,
                    "{what}: {r}"
                );
                r.message.to_string()
            }
            other => panic!("{what}: {other:?}"),
        }
    };
    // Connections that say nothing take every descriptor: a job that comes
    // now cannot even be accepted, and is told why.
    let silent: Vec<Peer> = (0..80)
        .map(|_| Peer::connect(d.socket()).expect("connect"))
        .collect();
    for i in 0..5 {
        let p = Peer::connect(d.socket()).expect("connect");
        let _ = p.send(&hello_bytes());
        let m = refused(&p, &format!("job {i} past the accept limit"));
        assert!(
            m.contains("tandemd is at its client limit (64 open files)"),
            "{m}"
        );
    }
    drop(silent);
    // Jobs that register take descriptors too, until there is none left
    // for the next one's region.
    let mut peers = Vec::new();
    let mut refusals = Vec::new();
    for i in 0..120 {
        let p = Peer::connect(d.socket()).expect("connect");
        p.send(&hello_bytes()).expect("Hello");
        let (buf, _fd) = p
            .recv(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("peer {i}: no answer: {e}\n{}", d.log()));
        match tandem_proto::Message::decode(&buf) {
            Ok(tandem_proto::Message::Welcome(_)) => peers.push(p),
            Ok(tandem_proto::Message::Reject(r)) => {
                assert_eq!(
                    r.reason,
                    tandem_proto::RejectReason::TOO_MANY_CLIENTS,
                    "peer {i}: {r}"
                );
                refusals.push(r.message.to_string());
            }
            other => panic!("peer {i}: {other:?}"),
        }
    }
    assert!(!peers.is_empty(), "some registered");
    assert!(
        !refusals.is_empty(),
        "{} registered, none refused",
        peers.len()
    );
    assert!(
        refusals
            .iter()
            .all(|m| m.contains("tandemd is at its client limit (64 open files)")),
        "{refusals:?}"
    );
    let log = d.log();
    let accept_lines = log.lines().filter(|l| l.contains("accept failed")).count();
    assert!(
        accept_lines <= 20,
        "{accept_lines} accept-failed lines:\n{log}"
    );
    assert!(!log.contains("internal error"), "{log}");
}

/// Under journald (JOURNAL_STREAM names tandemd's stderr) log lines carry
/// no timestamp of their own and the startup line does not repeat the pid
/// the journal records; elsewhere both are there.
#[test]
fn under_journald_lines_carry_no_timestamp_and_the_pid_once() {
    use std::os::unix::fs::MetadataExt;
    let dir = TestDir::new("journal");
    for journald in [true, false] {
        let log = dir.path().join(format!("journal-{journald}.log"));
        let f = std::fs::File::create(&log).expect("log file");
        let m = f.metadata().expect("stat");
        let mut cmd = Command::new(&coordinator_bins().tandemd);
        cmd.arg("--no-config")
            .arg("--socket")
            .arg(dir.path().join(format!("j-{journald}.sock")))
            .env_remove("TANDEM_SOCKET")
            .env("TANDEM_LOG", "info")
            .stdout(f.try_clone().expect("dup"))
            .stderr(f);
        if journald {
            cmd.env("JOURNAL_STREAM", format!("{}:{}", m.dev(), m.ino()));
        } else {
            cmd.env_remove("JOURNAL_STREAM");
        }
        let mut child = cmd.spawn().expect("spawn tandemd");
        let end = Instant::now() + Duration::from_secs(20);
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("listening") || Instant::now() > end {
                break text;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = child.kill();
        let _ = child.wait();
        let line = text
            .lines()
            .find(|l| l.contains("listening"))
            .unwrap_or_else(|| panic!("no startup line:\n{text}"));
        let stamped = text.lines().all(|l| l.starts_with("20"));
        let pid = format!("pid {}", child.id());
        if journald {
            assert!(text.lines().all(|l| !l.starts_with("20")), "{text}");
            assert!(
                line.starts_with(" INFO") || line.starts_with("INFO"),
                "{line}"
            );
            assert!(!line.contains(&pid), "the journal has the pid: {line}");
        } else {
            assert!(stamped, "{text}");
            assert!(line.contains(&pid), "{line}");
        }
    }
}

/// A user's default socket directory without XDG_RUNTIME_DIR,
/// /tmp/tandem-<uid>, is used only if it is the user's own and closed to
/// others' writes: one made first by someone else (here root, mode 0777) is
/// refused with what to do; otherwise tandemd makes it, mode 0700. Before,
/// the root-owned 0777 directory was used. Needs root (to be another user).
#[test]
fn the_tmp_socket_directory_must_be_the_users_own() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run tandemd as another user");
        return;
    }
    let uid = 64999;
    let tmp = std::path::PathBuf::from(format!("/tmp/tandem-{uid}"));
    let _ = std::fs::remove_dir_all(&tmp);
    let dir = TestDir::new("tmpdir");
    let run = |log: &str| {
        bounded_until(
            Command::new(&coordinator_bins().tandemd)
                .arg("--no-config")
                .env_remove("TANDEM_SOCKET")
                .env_remove("XDG_RUNTIME_DIR")
                .env_remove("JOURNAL_STREAM")
                .env("TANDEM_LOG", "info")
                .uid(uid)
                .gid(uid),
            &dir.path().join(log),
            Some("listening"),
        )
    };
    std::fs::create_dir(&tmp).expect("mkdir");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (code, text) = run("planted.log");
    assert!(code.is_some() && code != Some(0), "started: {text}");
    assert!(
        text.contains(tmp.to_str().expect("utf-8")) && text.contains("not safe"),
        "{text}"
    );
    assert!(!tmp.join("tandemd.sock").exists(), "{text}");
    std::fs::remove_dir_all(&tmp).expect("rm");

    // Not there: tandemd makes it, the user's own, mode 0700 (and runs
    // until it is stopped once listening).
    let (_, text) = run("own.log");
    let m = std::fs::metadata(&tmp).expect("made");
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(text.contains("listening"), "{text}");
    assert_eq!((m.uid(), m.mode() & 0o777), (uid, 0o700));
}

/// Past its connection cap (a quarter of the open-file limit: 64 here) the
/// stats server closes the connection that waited longest, telling it so in
/// a 503 that a client reads (not "Connection reset by peer"), and still
/// answers the newcomer.
#[test]
fn past_the_stats_cap_the_oldest_connection_is_told_why_and_new_ones_are_answered() {
    use std::io::Read;
    let dir = TestDir::new("statscap");
    let mut d = Tandemd::spawn_with_nofile(&dir, default_config(), 256);
    d.wait_ready();
    let mut idle: Vec<UnixStream> = (0..150)
        .map(|_| UnixStream::connect(d.stats_socket()).expect("connect"))
        .collect();
    let (code, text) = tandemctl(&d, &["status"]);
    assert_eq!(code, Some(0), "{text}");
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut answer = String::new();
    first
        .read_to_string(&mut answer)
        .expect("the oldest connection's answer");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("at its limit of 64 open connections"),
        "{answer}"
    );
}
