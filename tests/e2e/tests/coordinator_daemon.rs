//! tandemd as a daemon: the stats socket's HTTP endpoints (JSON, Prometheus
//! text, 404), one daemon per socket, a bad config, graceful stop.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};

use tandem_e2e::coord::{
    client_by_pid, clients, coordinator_bins, default_config, hello_bytes, http_get, kv_u64, num,
    parse_prometheus, poll, ready_client_id, spawn_launchers, tandemctl_ok, total, warn_lines,
    Peer, Tandemd, TestDir, EXIT, SETTLE,
};

/// The metric families the contract lists, with their Prometheus types.
const FAMILIES: &[(&str, &str)] = &[
    ("tandem_sharing_mode", "gauge"),
    ("tandem_clients", "gauge"),
    ("tandem_launches_total", "counter"),
    ("tandem_dropped_records_total", "counter"),
    ("tandem_bytes_allocated", "gauge"),
    ("tandem_launch_rate_hz", "gauge"),
    ("tandem_gate_wait_seconds_total", "counter"),
    ("tandem_clients_reclaimed_total", "counter"),
    ("tandem_rejected_total", "counter"),
    ("tandem_dedup_saved_bytes", "gauge"),
    ("tandem_dedup_shared_copies", "gauge"),
    ("tandem_dedup_merges_total", "counter"),
    ("tandem_dedup_cow_breaks_total", "counter"),
    ("tandem_dedup_protocol_errors_total", "counter"),
];

/// /stats is JSON with the contract's top-level fields; /metrics is valid
/// Prometheus text whose numbers agree with /stats (tandem_clients, and
/// tandem_launches_total per client pid); any other path is a 404 with a
/// help text; every answer closes the connection.
#[test]
fn stats_socket_serves_json_prometheus_and_404() {
    let dir = TestDir::new("metrics");
    let d = Tandemd::start(&dir);
    let mut ls = spawn_launchers(
        d.socket(),
        2,
        &["--rate", "4000", "--count", "2000", "--hold"],
    );
    for l in &mut ls {
        ready_client_id(l);
    }
    let done: Vec<String> = ls.iter_mut().map(|l| l.wait_line("DONE ", EXIT)).collect();
    let st = poll(SETTLE, "both clients counted", || {
        let st = d.try_stats()?;
        for (l, line) in ls.iter().zip(&done) {
            let c = client_by_pid(&st, l.pid()).ok_or_else(|| st.to_string())?;
            if num(c, "launches") != kv_u64(line, "launched") {
                return Err(c.to_string());
            }
        }
        Ok(st)
    });

    let r = d.get("/stats").expect("GET /stats");
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    for &key in tandem_e2e::coord::STATS_KEYS {
        assert!(st.get(key).is_some(), "/stats lacks {key:?}: {st}");
    }
    assert_eq!(num(&st, "pid"), u64::from(d.pid()));
    assert_eq!(
        st["socket"].as_str(),
        d.socket().to_str(),
        "socket in /stats: {st}"
    );
    assert_eq!(
        num(&st, "protocol"),
        u64::from(tandem_proto::PROTOCOL_VERSION)
    );

    let r = d.get("/metrics").expect("GET /metrics");
    assert_eq!(r.status, 200, "{}", r.body);
    let ct = r.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("text/plain") && ct.contains("version=0.0.4"),
        "content-type {ct:?}"
    );
    let ex = parse_prometheus(&r.body)
        .unwrap_or_else(|e| panic!("/metrics is not valid Prometheus text: {e}\n{}", r.body));
    for (fam, ty) in FAMILIES {
        assert_eq!(
            ex.types.get(*fam).map(String::as_str),
            Some(*ty),
            "TYPE of {fam}:\n{}",
            r.body
        );
        assert!(
            ex.help.get(*fam).is_some_and(|h| !h.is_empty()),
            "no HELP for {fam}:\n{}",
            r.body
        );
    }
    let c = ex.get("tandem_clients");
    assert_eq!(c.len(), 1, "{}", r.body);
    assert_eq!(c[0].value, clients(&st).len() as f64, "{}", r.body);
    assert_eq!(c[0].value, 2.0);
    for (l, line) in ls.iter().zip(&done) {
        let pid = l.pid().to_string();
        let s = ex
            .get("tandem_launches_total")
            .into_iter()
            .find(|s| s.labels.get("pid") == Some(&pid))
            .unwrap_or_else(|| panic!("no tandem_launches_total{{pid=\"{pid}\"}}:\n{}", r.body));
        assert_eq!(s.value, kv_u64(line, "launched") as f64, "{}", r.body);
        for label in ["client", "class", "exe"] {
            assert!(s.labels.contains_key(label), "no {label} label: {s:?}");
        }
    }
    let rec = ex.get("tandem_clients_reclaimed_total");
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0].value, total(&st, "clients_reclaimed") as f64);

    // curl --unix-socket must work too, where curl exists.
    if let Ok(out) = Command::new("curl")
        .arg("-sS")
        .arg("--fail")
        .arg("--unix-socket")
        .arg(d.stats_socket())
        .arg("http://localhost/metrics")
        .stdin(Stdio::null())
        .output()
    {
        assert!(out.status.success(), "curl: {out:?}");
        parse_prometheus(&String::from_utf8_lossy(&out.stdout)).expect("curl's /metrics");
    } else {
        eprintln!("note: curl not installed; skipped the curl --unix-socket check");
    }

    let r = d.get("/no/such/page").expect("GET unknown");
    assert_eq!(r.status, 404);
    assert!(
        r.body.contains("/stats") && r.body.contains("/metrics"),
        "the 404 should name the endpoints: {:?}",
        r.body
    );

    for l in &mut ls {
        l.close_stdin();
        assert!(l.wait_exit(EXIT).success(), "{l}");
    }
}

/// The Prometheus checker itself rejects broken text (so the test above can fail).
#[test]
fn prometheus_checker_rejects_broken_text() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\",y=\"a\\\"b\"} 3\n\
                a_total{x=\"2\"} 4 1700000000000\n# TYPE b gauge\nb NaN\n";
    let ex = parse_prometheus(good).expect("valid text");
    assert_eq!(ex.samples.len(), 3);
    assert_eq!(ex.samples[0].labels["y"], "a\"b");
    for bad in [
        "a 1",                                // no trailing newline
        "a{x=1} 2\n",                         // unquoted label value
        "a{x=\"1\" 2\n",                      // unterminated label set
        "a{1x=\"1\"} 2\n",                    // bad label name
        "1a 2\n",                             // bad metric name
        "a one\n",                            // bad value
        "a 1\n# TYPE a counter\n",            // TYPE after samples
        "# TYPE a counter\n# TYPE a gauge\n", // second TYPE
        "# TYPE a bogus\n",                   // unknown type
        "a 1\nb 1\na{x=\"1\"} 2\n",           // family not contiguous
        "a{x=\"1\"} 1\na{x=\"1\"} 2\n",       // duplicate series
        "a{x=\"\\q\"} 1\n",                   // bad escape
    ] {
        assert!(parse_prometheus(bad).is_err(), "accepted {bad:?}");
    }
}

/// A second tandemd on a socket where one answers refuses to start and the
/// first keeps serving.
#[test]
fn second_tandemd_on_the_same_socket_refuses_to_start() {
    let dir = TestDir::new("second");
    let d = Tandemd::start(&dir);
    let mut second = Tandemd::spawn(&dir, default_config());
    let st = second.wait_exit(SETTLE);
    assert!(
        !st.success(),
        "a second tandemd started on a live socket:\n{}",
        second.log()
    );
    assert!(!second.log().trim().is_empty(), "it must say why");
    assert!(
        dir.socket().exists(),
        "the refusing daemon removed the live socket"
    );
    let s = d.stats();
    assert_eq!(num(&s, "pid"), u64::from(d.pid()));
}

/// A config with an unknown key: exit 2 with one message naming the file
/// and the key.
#[test]
fn bad_config_exits_2_naming_the_file_and_the_key() {
    let dir = TestDir::new("badcfg");
    let cfg = dir.path().join("bad.toml");
    let text = format!("bogus_key_for_the_test = 1\n{}", default_config());
    std::fs::write(&cfg, text).expect("write config");
    let out = Command::new(&coordinator_bins().tandemd)
        .arg("--config")
        .arg(&cfg)
        .arg("--socket")
        .arg(dir.socket())
        .arg("--foreground")
        .env_remove("TANDEM_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run tandemd");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(cfg.to_str().expect("utf-8")) && err.contains("bogus_key_for_the_test"),
        "the message must name the file and the key: {err}"
    );
    assert!(!dir.socket().exists(), "it must not have started listening");
}

/// SIGTERM: a graceful stop that exits 0 and removes both socket files.
#[test]
fn sigterm_stops_gracefully_and_removes_the_sockets() {
    let dir = TestDir::new("sigterm");
    let mut d = Tandemd::start(&dir);
    assert!(dir.socket().exists() && dir.stats_socket().exists());
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(SETTLE);
    assert!(st.success(), "exit after SIGTERM: {st}\n{}", d.log());
    assert!(!dir.socket().exists(), "main socket left behind");
    assert!(!dir.stats_socket().exists(), "stats socket left behind");
    assert!(http_get(&dir.stats_socket(), "/stats").is_err());
}

/// sd_notify: READY=1 once both sockets listen (and they do answer by
/// then), STOPPING=1 on SIGTERM; datagrams to $NOTIFY_SOCKET.
#[test]
fn sd_notify_ready_and_stopping() {
    let dir = TestDir::new("notify");
    let nsock = dir.path().join("notify.sock");
    let rx = UnixDatagram::bind(&nsock).expect("bind notify socket");
    rx.set_read_timeout(Some(SETTLE)).expect("timeout");
    let mut d = Tandemd::spawn_with_env(&dir, default_config(), &[("NOTIFY_SOCKET", &nsock)]);
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while !got.lines().any(|l| l == "READY=1") {
        let n = rx
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no READY=1 ({e}); got {got:?}\n{}", d.log()));
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
        got.push('\n');
    }
    // READY means listening: both sockets answer now, without waiting.
    assert!(
        dir.socket().exists(),
        "READY=1 before the main socket exists"
    );
    http_get(&dir.stats_socket(), "/stats").expect("stats answer right after READY=1");
    d.signal(libc::SIGTERM);
    while !got.lines().any(|l| l == "STOPPING=1") {
        let n = rx
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no STOPPING=1 ({e}); got {got:?}\n{}", d.log()));
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
        got.push('\n');
    }
    assert!(d.wait_exit(SETTLE).success(), "{}", d.log());
}

/// The ring capacity a fresh raw client is given (from its Welcome).
fn welcome_capacity(d: &Tandemd) -> u32 {
    let p = Peer::connect(d.socket()).expect("connect");
    p.send(&hello_bytes()).expect("Hello");
    let (buf, _fd) = p.recv(SETTLE).expect("Welcome");
    match tandem_proto::Message::decode(&buf) {
        Ok(tandem_proto::Message::Welcome(w)) => w.ring_capacity,
        other => panic!("want a Welcome, got {other:?}"),
    }
}

/// SIGHUP and `tandemctl reload` re-read the config: a bad new file is
/// reported (naming the file) and the running config kept; a good one takes
/// effect for clients that connect afterwards (their ring capacity).
#[test]
fn reload_applies_a_good_config_and_keeps_the_old_one_on_a_bad_one() {
    let dir = TestDir::new("reload");
    let mut d = Tandemd::start(&dir);
    let cfg = d.config_path();
    let cap0 = welcome_capacity(&d);
    let small = if cap0 == 1024 { 2048 } else { 1024 };

    let cfg_s = cfg.to_str().expect("utf-8").to_string();
    let before = warn_lines(&d.log(), &cfg_s).len();
    std::fs::write(&cfg, "ring_capacity = \"lots\"\n").expect("write bad config");
    d.signal(libc::SIGHUP);
    poll(SETTLE, "a warning naming the bad config file", || {
        let log = d.log();
        if warn_lines(&log, &cfg_s).len() > before {
            Ok(())
        } else {
            Err(log)
        }
    });
    assert_eq!(
        welcome_capacity(&d),
        cap0,
        "a bad config replaced the running one"
    );
    assert!(d.try_wait().is_none(), "a bad reload stopped the daemon");

    let good = default_config().replace(
        &format!("ring_capacity = {cap0}"),
        &format!("ring_capacity = {small}"),
    );
    assert_ne!(
        good,
        default_config(),
        "default config has no `ring_capacity = {cap0}` line"
    );
    std::fs::write(&cfg, &good).expect("write config");
    d.signal(libc::SIGHUP);
    poll(
        SETTLE,
        "SIGHUP to apply the new ring capacity",
        || match welcome_capacity(&d) {
            c if c == small => Ok(()),
            c => Err(format!("capacity still {c}")),
        },
    );

    std::fs::write(&cfg, default_config()).expect("write config");
    tandemctl_ok(d.socket(), &["reload"]);
    poll(
        SETTLE,
        "tandemctl reload to apply",
        || match welcome_capacity(&d) {
            c if c == cap0 => Ok(()),
            c => Err(format!("capacity still {c}")),
        },
    );
}
