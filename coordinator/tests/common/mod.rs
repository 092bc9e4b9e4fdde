//! Test support: a temp directory, the tandemd binary on a temp socket, and a
//! fake peer that speaks the protocol like the shim does.
#![allow(dead_code)]

pub mod dedup;
pub mod follow;

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tandem_coordinator::client;
use tandem_coordinator::sock;
use tandem_coordinator::state::{ClientSnapshot, Snapshot};
use tandem_proto::ring::{Producer, RingLayout};
use tandem_proto::shm::{self, Mapping};
use tandem_proto::wire::{
    self, ClientClass, Device, FuncName, Hello, Message, Welcome, MAX_MESSAGE_LEN,
};
use tandem_proto::{EventKind, Record};

/// Generous deadline for conditions polled through the stats endpoint.
pub const DEADLINE: Duration = Duration::from_secs(20);

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under /tmp (short paths: sockaddr_un holds 107 bytes),
/// mode 0755 so an unprivileged child can reach the sockets; removed on drop.
pub struct TestDir(pub PathBuf);

impl TestDir {
    pub fn new(tag: &str) -> TestDir {
        use std::os::unix::fs::DirBuilderExt;
        let p = PathBuf::from(format!(
            "/tmp/tdc-{}-{}-{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::DirBuilder::new().mode(0o755).create(&p).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        TestDir(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Poll `f` until it returns Some, or panic with `what` after [`DEADLINE`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The tandemd binary, running on a socket in a temp dir; SIGTERMed on drop.
pub struct Tandemd {
    pub dir: TestDir,
    pub socket: PathBuf,
    pub stats: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

pub fn tandemd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tandemd"))
}

pub fn tandemctl_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tandemctl"))
}

impl Tandemd {
    /// Start with `config` as the file's text (None: an empty file, i.e.
    /// the defaults; a reload reads what the test writes there later).
    pub fn start(tag: &str, config: Option<&str>) -> Tandemd {
        let dir = TestDir::new(tag);
        let socket = dir.path("d.sock");
        let cfg = dir.path("tandemd.toml");
        std::fs::write(&cfg, config.unwrap_or("")).unwrap();
        let log = dir.path("log");
        let mut t = Tandemd {
            stats: tandem_proto::paths::stats_socket(&socket),
            socket,
            config: cfg,
            log,
            child: None,
            dir,
        };
        t.child = Some(t.spawn());
        t.wait_ready();
        t
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(tandemd_bin());
        c.arg("--config")
            .arg(&self.config)
            .arg("--socket")
            .arg(&self.socket)
            .env("TANDEM_LOG", "debug")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null());
        c
    }

    fn spawn(&self) -> Child {
        let log = std::fs::File::create(&self.log).unwrap();
        self.command()
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start tandemd")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Wait until GET /stats answers.
    pub fn wait_ready(&mut self) {
        let stats = self.stats.clone();
        let end = Instant::now() + DEADLINE;
        loop {
            if client::snapshot(&stats, Duration::from_secs(2)).is_ok() {
                return;
            }
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("tandemd exited early ({st}): {}", self.log_text());
            }
            assert!(
                Instant::now() < end,
                "tandemd never listened: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        client::snapshot(&self.stats, Duration::from_secs(5)).expect("GET /stats")
    }

    pub fn client(&self, id: u64) -> Option<ClientSnapshot> {
        self.snapshot().clients.into_iter().find(|c| c.id == id)
    }

    /// Poll the stats until `f` holds for the snapshot.
    pub fn wait_stats(&self, what: &str, mut f: impl FnMut(&Snapshot) -> bool) -> Snapshot {
        wait_for(what, || {
            let s = self.snapshot();
            f(&s).then_some(s)
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn wait_log(&self, needle: &str) {
        wait_for(&format!("log line containing {needle:?}"), || {
            self.log_text().contains(needle).then_some(())
        });
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        let end = Instant::now() + DEADLINE;
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            if Instant::now() > end {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Tandemd {
    fn drop(&mut self) {
        self.stop();
    }
}

// ---------------------------------------------------------------------------
// Fake peer
// ---------------------------------------------------------------------------

/// A client speaking the protocol like the shim: connect, Hello, Welcome +
/// memfd, map, push records, FuncName/Device, hang up.
pub struct Peer {
    pub sock: OwnedFd,
    pub welcome: Welcome,
    pub map: Mapping,
    pub layout: RingLayout,
    pub pushed: u64,
    pub dropped: u64,
}

/// Connect a raw SEQPACKET socket (5 s timeouts).
pub fn connect(socket: &Path) -> OwnedFd {
    sock::connect_seqpacket(socket, Duration::from_secs(5)).expect("connect to tandemd")
}

pub fn send_msg(fd: &OwnedFd, m: &Message<'_>) {
    let mut buf = [0u8; MAX_MESSAGE_LEN];
    let n = m.encode(&mut buf).unwrap();
    wire::send(fd.as_fd(), &buf[..n], None).unwrap();
}

/// Receive one message (owned bytes; empty = peer closed).
pub fn recv_raw(fd: &OwnedFd) -> (Vec<u8>, Option<OwnedFd>) {
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let got = wire::recv(fd.as_fd(), &mut buf).expect("recv");
    buf.truncate(got.len);
    (buf, got.fd)
}

pub fn hello(class: ClientClass) -> Hello<'static> {
    Hello {
        pid: std::process::id(),
        class,
        flags: 0,
        exe: b"/usr/bin/fake-peer",
        cgroup: b"/fake.slice",
    }
}

impl Peer {
    pub fn connect(socket: &Path, class: ClientClass) -> Peer {
        Peer::connect_flags(socket, class, 0)
    }

    /// Register with these Hello flags (`HELLO_FLAG_*`).
    pub fn connect_flags(socket: &Path, class: ClientClass, flags: u8) -> Peer {
        let sock = connect(socket);
        send_msg(
            &sock,
            &Message::Hello(Hello {
                flags,
                ..hello(class)
            }),
        );
        let (bytes, fd) = recv_raw(&sock);
        let welcome = match Message::decode(&bytes) {
            Ok(Message::Welcome(w)) => w,
            other => panic!("expected Welcome, got {other:?}"),
        };
        let fd = fd.expect("Welcome carries the region fd");
        let map = shm::map_received(fd.as_fd(), welcome.region_len as usize).unwrap();
        let layout = welcome.layout().unwrap();
        Peer {
            sock,
            welcome,
            map,
            layout,
            pushed: 0,
            dropped: 0,
        }
    }

    pub fn id(&self) -> u64 {
        self.welcome.client_id
    }

    /// Push `n` records of `kind` (func_id, bytes, addr as given); counts
    /// pushed and dropped like the shim does.
    pub fn push(&mut self, kind: EventKind, n: u64, func_id: u64, bytes: u64, addr: u64) {
        let mut p = Producer::attach(&self.map, self.layout).unwrap();
        for _ in 0..n {
            let r = Record {
                func_id,
                bytes,
                addr,
                ..Record::new(kind, tandem_proto::monotonic_ns())
            };
            if p.push(&r) {
                self.pushed += 1;
            } else {
                self.dropped += 1;
            }
        }
    }

    pub fn launches(&mut self, n: u64, func_id: u64) {
        self.push(EventKind::LAUNCH, n, func_id, 0, 0);
    }

    pub fn func_name(&self, func_id: u64, name: &[u8]) {
        send_msg(
            &self.sock,
            &Message::FuncName(FuncName {
                func_id,
                name,
                attrs: None,
            }),
        );
    }

    pub fn device(&self, uuid: [u8; 16], name: &[u8]) {
        self.device_shaped(uuid, name, None);
    }

    /// [`Self::device`], with the SMs' shape tail.
    pub fn device_shaped(
        &self,
        uuid: [u8; 16],
        name: &[u8],
        shape: Option<tandem_proto::wire::DeviceShape>,
    ) {
        send_msg(
            &self.sock,
            &Message::Device(Device {
                ordinal: 0,
                uuid,
                name,
                shape,
            }),
        );
    }

    /// The control block in this peer's region (what the shim's gate reads).
    pub fn control(&self) -> &tandem_proto::ControlBlock {
        tandem_proto::ring::control_block(&self.map, self.layout).unwrap()
    }

    /// Scribble over the ring header's magic (a misbehaving client).
    pub fn corrupt_ring_magic(&self) {
        let p = self.map.as_ptr().cast::<AtomicU64>();
        // SAFETY: the region starts with the ring header, whose first field
        // is an 8-byte aligned AtomicU64 (the magic); the mapping is live.
        unsafe { &*p }.store(0xDEAD_BEEF_DEAD_BEEF, Ordering::Relaxed);
    }
}

/// Read a whole file descriptor-less HTTP exchange on a raw stream.
pub fn raw_http(stats: &Path, request: &[u8]) -> String {
    use std::io::Write;
    let mut s = std::os::unix::net::UnixStream::connect(stats).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(request);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The daemon's memory maps (to prove a region was unmapped).
pub fn maps_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

/// Whether the raw fd would report EOF/closed right now or within `d`.
pub fn closed_within(fd: &OwnedFd, d: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, d.as_millis() as i32) };
    r > 0
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn check_labels(labels: &str, n: usize, line: &str) {
    // name="value" pairs separated by commas, values with \\ \" \n escapes
    let b = labels.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        assert!(i > start, "line {n}: bad label name: {line}");
        assert!(
            b.get(i) == Some(&b'=') && b.get(i + 1) == Some(&b'"'),
            "line {n}: {line}"
        );
        i += 2;
        loop {
            match b.get(i) {
                Some(b'\\') => {
                    assert!(
                        matches!(b.get(i + 1), Some(b'\\' | b'"' | b'n')),
                        "line {n}: bad escape: {line}"
                    );
                    i += 2;
                }
                Some(b'"') => {
                    i += 1;
                    break;
                }
                Some(_) => i += 1,
                None => panic!("line {n}: unterminated label value: {line}"),
            }
        }
        if i < b.len() {
            assert_eq!(b[i], b',', "line {n}: {line}");
            i += 1;
        }
    }
}
