//! Jobs placed as a container runtime places them: each in its own pid and
//! mount namespaces (`unshare -p -m -f --mount-proc`) and its own cgroup v2
//! directory laid out as the kubelet's systemd driver and containerd lay
//! them out (`kubepods.slice/…-pod<uid>.slice/cri-containerd-<id>.scope`),
//! running as root inside. tandemd runs on the host with `[kubernetes]
//! pod_info_dir` holding the records the injector would write.
//!
//! Shown: the jobs register across the namespace boundary (SO_PEERCRED gives
//! their host pid, the job itself sees pid 1), tandemd derives each one's pod
//! and container from the cgroup it reads in /proc, the two "root" pods get
//! separate trust groups (dedup and follow), root in a container may not
//! claim inference by being root nor run control operations (reload,
//! set-class) while the host's root may, and the metrics carry the pod's
//! labels. Skips, saying why, where the machine forbids namespaces or cgroups.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;
use tandem_e2e::coord::{
    client_by_id, client_env, command_at, default_config, output_of_failing, poll, ready_client_id,
    tandemctl, tandemctl_ok, Proc, Tandemd, TestDir, SETTLE,
};
use tandem_e2e::host;

/// Why this machine cannot place jobs in containers, if it cannot.
fn forbidden() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: creating cgroups and pid namespaces needs root".into());
    }
    if cgroup2_root().is_none() {
        return Some("no writable cgroup v2 hierarchy (none mounted, or mkdir in it fails)".into());
    }
    let ok = Command::new("unshare")
        .args(["-p", "-m", "-f", "--mount-proc", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Some("`unshare -p -m -f --mount-proc true` fails (no namespaces here)".into());
    }
    None
}

/// The mount point of the cgroup v2 hierarchy, if one is mounted and a
/// directory can be made in it.
fn cgroup2_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mnt = info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next() == Some("cgroup2"))
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })?;
    let probe = mnt.join(format!("tandem-e2e-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    let _ = std::fs::remove_dir(&probe);
    Some(mnt)
}

/// A pod's cgroup tree, removed (leaves first) on drop.
struct PodCgroup {
    dirs: Vec<PathBuf>,
    leaf: PathBuf,
}

impl PodCgroup {
    /// `<root>/tandem-e2e-<pid>/kubepods.slice/kubepods-burstable.slice/
    /// kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`.
    fn new(root: &Path, uid: &str, id: &str) -> PodCgroup {
        let base = root.join(format!("tandem-e2e-{}-{}", std::process::id(), &uid[..8]));
        let parts = [
            "kubepods.slice".to_string(),
            "kubepods-burstable.slice".to_string(),
            format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_")),
            format!("cri-containerd-{id}.scope"),
        ];
        let mut dirs = vec![base.clone()];
        let mut p = base;
        for part in parts {
            p = p.join(part);
            dirs.push(p.clone());
        }
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
        PodCgroup { leaf: p, dirs }
    }

    /// `cmd`, started in this cgroup (it moves itself before exec).
    fn enter(&self, cmd: &mut Command) {
        let procs = std::ffi::CString::new(
            self.leaf
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .expect("path has no NUL");
        // SAFETY: the closure only calls open, write and close (async-signal-
        // safe) on memory allocated before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if n != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

struct Pod {
    uid: &'static str,
    id: String,
    name: &'static str,
    namespace: &'static str,
}

/// What the injector records for `pod` (owner root, mode 0644).
fn record(dir: &Path, pod: &Pod) {
    let body = serde_json::json!({
        "namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
        "labels": {"app": pod.name}, "annotations": {},
        "containers": {pod.id.clone(): "main"},
    });
    let path = dir.join(format!("{}.json", pod.uid));
    let mut f = std::fs::File::create(&path).expect("write pod record");
    f.write_all(body.to_string().as_bytes())
        .expect("write pod record");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}

/// `unshare -p -m -f --mount-proc -- ARGS` in `cg`, with the shim over the
/// fake driver registering on `socket`, and `vars`.
fn in_container(cg: &PodCgroup, socket: &Path, vars: &[(&str, &str)], args: &[&str]) -> Command {
    let mut env = client_env(socket);
    for (k, v) in vars {
        env = env.var(k, v);
    }
    let mut a = vec!["-p", "-m", "-f", "--mount-proc", "--"];
    a.extend_from_slice(args);
    let mut cmd = command_at(Path::new("unshare"), &a, &env);
    cg.enter(&mut cmd);
    cmd
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_str()
        .unwrap_or_else(|| panic!("no string at {path:?} in {v}"))
}

#[test]
fn containers_get_pod_identity_pod_trust_groups_and_no_privilege() {
    if let Some(why) = forbidden() {
        eprintln!(
            "SKIPPED fleet_containers: this machine forbids placing jobs in containers: {why}"
        );
        return;
    }
    let root = cgroup2_root().expect("checked");
    let dir = TestDir::new("fleet");
    let pods_dir = dir.path().join("pods");
    std::fs::create_dir_all(&pods_dir).expect("mkdir pods");
    let pods = [
        Pod {
            uid: "7c1a2b3c-0001-11e9-b385-42010a80018d",
            id: "a1".repeat(32),
            name: "llm-serve-0",
            namespace: "serving",
        },
        Pod {
            uid: "9d4e5f6a-0002-11e9-b385-42010a80018d",
            id: "b2".repeat(32),
            name: "trainer-0",
            namespace: "batch",
        },
    ];
    for p in &pods {
        record(&pods_dir, p);
    }
    let config = default_config().replacen(
        "\npod_info_dir = \"/run/tandem-pods\"\n",
        &format!("\npod_info_dir = \"{}\"\n", pods_dir.display()),
        1,
    );
    assert_ne!(
        config,
        default_config(),
        "the default config has pod_info_dir"
    );
    let d = Tandemd::start_with_config(&dir, &config);
    let cgs: Vec<PodCgroup> = pods
        .iter()
        .map(|p| PodCgroup::new(&root, p.uid, &p.id))
        .collect();

    // Both jobs run as root in their containers and claim inference; both
    // ask to share weights and to follow.
    let launcher = host("launcher");
    let launcher = launcher.to_str().expect("UTF-8 path");
    let mut jobs: Vec<Proc> = cgs
        .iter()
        .map(|cg| {
            let cmd = in_container(
                cg,
                d.socket(),
                &[
                    ("TANDEM_CLASS", "inference"),
                    ("TANDEM_SHARE_WEIGHTS", "on"),
                    ("TANDEM_FOLLOW", "on"),
                ],
                &[
                    launcher,
                    "--path",
                    "linked",
                    "--rate",
                    "200",
                    "--until-stdin",
                    "--hold",
                ],
            );
            Proc::spawn("launcher-in-container", cmd)
        })
        .collect();
    let ids: Vec<u64> = jobs.iter_mut().map(ready_client_id).collect();
    for j in &jobs {
        let ready = j.lines("READY ").join("\n");
        assert!(
            ready.contains("pid=1 "),
            "the job is pid 1 of its own namespace: {ready}"
        );
    }
    let st = poll(SETTLE, "both containers' clients in the stats", || {
        let st = d.try_stats()?;
        if ids.iter().all(|id| client_by_id(&st, *id).is_some()) {
            Ok(st)
        } else {
            Err(st.to_string())
        }
    });
    let mut groups = Vec::new();
    for ((id, pod), job) in ids.iter().zip(&pods).zip(&jobs) {
        let c = client_by_id(&st, *id).expect("listed");
        // Across the boundary: tandemd knows the job by its host pid, a
        // child of the `unshare` we started, whose innermost pid is 1.
        let pid = c["pid"].as_u64().expect("pid") as u32;
        assert_ne!(pid, 1);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let nspid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .expect("NSpid line");
        let nspid: Vec<&str> = nspid.split_whitespace().collect();
        assert_eq!(nspid, [pid.to_string().as_str(), "1"], "{status}");
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .expect("PPid");
        assert_eq!(ppid.trim(), job.pid().to_string(), "child of our unshare");
        // Its pod and container, from the cgroup tandemd read in /proc.
        assert!(
            str_at(c, &["cgroup"]).ends_with(&format!("cri-containerd-{}.scope", pod.id)),
            "{c}"
        );
        assert_eq!(str_at(c, &["pod", "uid"]), pod.uid, "{c}");
        assert_eq!(str_at(c, &["pod", "container_id"]), pod.id, "{c}");
        assert_eq!(str_at(c, &["pod", "runtime"]), "containerd", "{c}");
        assert_eq!(str_at(c, &["pod", "namespace"]), pod.namespace, "{c}");
        assert_eq!(str_at(c, &["pod", "name"]), pod.name, "{c}");
        assert_eq!(str_at(c, &["pod", "container"]), "main", "{c}");
        // uid 0 in a container is not root: its inference claim is refused.
        assert_eq!(c["uid"].as_u64(), Some(0));
        assert_eq!(str_at(c, &["class"]), "training", "{c}");
        assert!(
            str_at(c, &["class_reason"])
                .contains(&format!("uid 0 in pod {}/{}", pod.namespace, pod.name)),
            "{c}"
        );
        // Per-pod trust groups, for dedup and for follow mode.
        let want = format!("pod:{}", pod.uid);
        assert_eq!(str_at(c, &["dedup", "trust_group"]), want, "{c}");
        assert_eq!(str_at(c, &["follow", "group"]), want, "{c}");
        groups.push(want);
    }
    assert_ne!(groups[0], groups[1], "two root pods share no trust group");

    // The metrics carry the pod's namespace, name and container.
    let metrics = d.get("/metrics").expect("GET /metrics").body;
    for (id, pod) in ids.iter().zip(&pods) {
        let want = format!(
            "tandem_launches_total{{client=\"{id}\",pid=\"{}\",class=\"training\",exe=\"{launcher}\",namespace=\"{}\",pod=\"{}\",container=\"main\"",
            client_by_id(&st, *id).expect("listed")["pid"],
            pod.namespace,
            pod.name
        );
        assert!(metrics.contains(&want), "no {want} in\n{metrics}");
    }

    // Control operations from root in a container are refused; the same
    // commands from the host's root are not.
    let ctl = tandemctl(d.socket(), &[]);
    let tandemctl_bin = ctl.get_program().to_str().expect("UTF-8").to_string();
    let id0 = ids[0].to_string();
    for args in [vec!["reload"], vec!["set-class", id0.as_str(), "inference"]] {
        let mut a = vec![tandemctl_bin.as_str()];
        a.extend_from_slice(&args);
        let text = output_of_failing(
            &mut in_container(&cgs[0], d.socket(), &[], &a),
            &format!("tandemctl {args:?} from a container"),
        );
        assert!(text.contains("container"), "{args:?}: {text}");
        tandemctl_ok(d.socket(), &args);
    }
    let st = d.stats();
    assert_eq!(
        st["totals"]["control_denied"].as_u64(),
        Some(2),
        "{}",
        st["totals"]
    );
    let c = client_by_id(&st, ids[0]).expect("listed");
    assert_eq!(
        str_at(c, &["class"]),
        "inference",
        "the host's set-class applied: {c}"
    );

    for j in &mut jobs {
        j.close_stdin();
    }
    for j in &mut jobs {
        let s = j.wait_exit(tandem_e2e::coord::EXIT);
        assert!(s.success(), "{j}");
    }
}

/// The TCP listener serves `/metrics` and, unless configured, not `/stats`.
#[test]
fn tcp_listener_serves_only_metrics_unless_configured() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let get = |path: &str| -> (u16, String) {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read");
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (code, text)
    };
    for (serves_stats, stats_code) in [(false, 404), (true, 200)] {
        let dir = TestDir::new("tcp");
        let config = default_config()
            .replacen(
                "\ntcp_listen = \"\"\n",
                &format!("\ntcp_listen = \"127.0.0.1:{port}\"\n"),
                1,
            )
            .replacen(
                "\ntcp_serves_stats = false\n",
                &format!("\ntcp_serves_stats = {serves_stats}\n"),
                1,
            );
        let d = Tandemd::start_with_config(&dir, &config);
        let (code, text) = get("/metrics");
        assert_eq!(code, 200, "{text}");
        assert!(text.contains("tandem_build_info{"), "{text}");
        let (code, text) = get("/stats");
        assert_eq!(
            code, stats_code,
            "tcp_serves_stats = {serves_stats}: {text}"
        );
        if !serves_stats {
            assert!(text.contains("tcp_serves_stats"), "{text}");
        }
        // The unix socket still serves both.
        assert_eq!(d.get("/stats").expect("stats over unix").status, 200);
        drop(d);
    }
}
