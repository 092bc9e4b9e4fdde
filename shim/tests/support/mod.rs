//! A minimal in-test coordinator written with tandem-proto, and a runner for the
//! test host `tests/hosts/client_host.c` under the real libtandem.so (built by
//! the tandem-e2e harness, over the fake driver).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem_proto::dedup::Dedup;
use tandem_proto::wire::{self, Message, RejectReason};
use tandem_proto::{ring, ClientClass, Consumer, ControlBlock, EventKind, Record, RingLayout};

/// How the coordinator answers a Hello.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Welcome with a real sealed memfd ring.
    Welcome,
    /// Reject with this reason, the header carrying this protocol version.
    Reject(RejectReason, u16),
    /// Accept the connection, never read or answer.
    Stall,
}

/// What the coordinator saw of one client.
#[derive(Clone, Debug, Default)]
pub struct ClientView {
    pub id: u64,
    pub hello_pid: u32,
    pub peer_pid: u32,
    pub class: Option<ClientClass>,
    pub exe: Vec<u8>,
    pub records: Vec<Record>,
    pub func_names: Vec<(u64, Vec<u8>)>,
    pub devices: Vec<(u32, [u8; 16], Vec<u8>)>,
    pub hung_up: bool,
    /// Drop counters from the ring header (the client's claim).
    pub ring_dropped: u64,
    pub bad_messages: usize,
    /// Records received (kept in `records` unless the coordinator counts only).
    pub received: u64,
    /// The control block's `spatial_state` and `masked_launches` (the
    /// client's claims), as of the last pass.
    pub spatial_state: u64,
    pub masked_launches: u64,
}

impl ClientView {
    fn take(&mut self, r: &Record, keep: bool) {
        self.received += 1;
        if keep {
            self.records.push(*r);
        }
    }

    pub fn count(&self, kind: EventKind) -> u64 {
        self.records.iter().filter(|r| r.kind == kind.raw()).count() as u64
    }

    /// Kernels reported: launch records plus the kernel nodes of graph launches.
    pub fn kernels(&self) -> u64 {
        self.count(EventKind::LAUNCH)
            + self.count(EventKind::LAUNCH_EX)
            + self
                .records
                .iter()
                .filter(|r| r.kind == EventKind::GRAPH_LAUNCH.raw())
                .map(|r| r.bytes)
                .sum::<u64>()
    }

    pub fn kinds(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for r in &self.records {
            let name = EventKind::from_raw(r.kind).map_or("unknown", |k| k.name());
            *m.entry(name).or_insert(0) += 1;
        }
        m
    }
}

#[derive(Default)]
struct Shared {
    connections: usize,
    clients: Vec<ClientView>,
    /// Flags every Welcome carries (e.g. `WELCOME_FLAG_SHARE_WEIGHTS`).
    welcome_flags: u8,
    /// `mark_every_ns` stored in every new client's control block.
    mark_every_ns: u64,
    /// When set, stored in every live client's control block at each pass
    /// (the launch benchmark turns marks on and off between rounds).
    live_mark_every_ns: Option<u64>,
    /// Dedup messages received: (client id, message, attached fd).
    dedup_in: Vec<(u64, Dedup, Option<Arc<OwnedFd>>)>,
    /// Dedup messages to send: (client id, message, fd to attach).
    dedup_out: Vec<(u64, Dedup, Option<Arc<OwnedFd>>)>,
    /// When set, what every live client is made at each pass (the launch
    /// benchmark's training client and SM reservation).
    live_training: Option<Training>,
}

/// What [`Coordinator::set_live_training`] makes every live client whose
/// GPU it knows: a training client with `budgets`, asked `spatial`, on a
/// GPU board (sent read-only once) whose slot for that GPU counts one
/// request open while `inference_active`, none otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Training {
    pub budgets: tandem_proto::inflight::Budgets,
    pub spatial: tandem_proto::spatial::Spatial,
    pub inference_active: bool,
}

pub struct Coordinator {
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
    thread: Option<JoinHandle<()>>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A fresh, short socket path (sockaddr_un holds 107 bytes).
pub fn socket_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(format!(
        "/tmp/tandem-shim-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("mkdir socket dir");
    dir.join("c.sock")
}

/// A bound, listening, non-blocking SEQPACKET socket at `path`.
pub fn listen(path: &Path) -> OwnedFd {
    let _ = std::fs::remove_file(path);
    // SAFETY: plain socket(2).
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    assert!(raw >= 0, "socket: {}", errno());
    // SAFETY: fresh fd.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: zeroed sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
    let b = c.as_bytes();
    assert!(b.len() < addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + b.len() + 1) as libc::socklen_t;
    // SAFETY: valid sockaddr_un of `len` bytes.
    let r = unsafe { libc::bind(raw, (&addr as *const libc::sockaddr_un).cast(), len) };
    assert_eq!(r, 0, "bind {}: {}", path.display(), errno());
    // SAFETY: bound socket.
    assert_eq!(unsafe { libc::listen(raw, 64) }, 0);
    fd
}

fn peer_pid(fd: i32) -> u32 {
    // SAFETY: zeroed ucred is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED into a ucred of the stated size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r == 0 {
        cred.pid as u32
    } else {
        0
    }
}

struct Live {
    sock: OwnedFd,
    consumer: Consumer<'static>,
    control: &'static ControlBlock,
    view: usize,
    /// The board slot of its GPU, once the board was sent.
    slot: Option<usize>,
}

/// The GPU board of [`Training`]: its memfd and mapping.
struct TestBoard {
    fd: OwnedFd,
    map: tandem_proto::Mapping,
}

impl TestBoard {
    fn new() -> TestBoard {
        use tandem_proto::board::{Board, BOARD_LEN};
        let (fd, map) = tandem_proto::shm::create(c"tandem-test-board", BOARD_LEN).expect("memfd");
        // SAFETY: a fresh writable shared mapping of BOARD_LEN bytes, kept in
        // the TestBoard, accessed only through atomics.
        unsafe { Board::init(map.as_ptr(), map.len()).expect("board") };
        TestBoard { fd, map }
    }

    fn board(&self) -> &tandem_proto::board::Board {
        // SAFETY: as in `new`, for as long as `self`.
        unsafe { tandem_proto::board::Board::from_raw(self.map.as_ptr(), self.map.len()) }
            .expect("board")
    }
}

/// Applies `t` to live client `l` of GPU `uuid`: class, reservation, the
/// board (sent once) and its slot's open request.
fn make_training(l: &mut Live, t: Training, uuid: &[u8; 16], board: &TestBoard, buf: &mut [u8]) {
    use tandem_proto::inflight::CLASS_TRAINING;
    l.control.set_class(CLASS_TRAINING);
    l.control.set_budgets(t.budgets);
    l.control.set_spatial(t.spatial);
    let b = board.board();
    let slot = match l.slot {
        Some(i) => i,
        None => {
            let i = b
                .claim(tandem_proto::board::gpu_key(uuid))
                .expect("a board slot");
            let fd = tandem_proto::shm::reopen_read_only(board.fd.as_fd()).expect("read-only fd");
            let n = Message::Board(wire::BoardMsg { flags: 0 })
                .encode(buf)
                .expect("encode board");
            wire::send(l.sock.as_fd(), &buf[..n], Some(fd.as_fd())).expect("send board");
            l.slot = Some(i);
            i
        }
    };
    let s = b.slot(slot).expect("slot");
    if t.inference_active && s.open() == 0 {
        s.begin_request();
    } else if !t.inference_active && s.open() > 0 {
        s.end_request();
    }
}

impl Coordinator {
    pub fn start(path: &Path, mode: Mode) -> Coordinator {
        Self::start_with(path, mode, 4096, true)
    }

    /// With rings of `capacity` records; `keep` false counts records
    /// (`ClientView::received`) without keeping them (benchmarks).
    pub fn start_with(path: &Path, mode: Mode, capacity: u32, keep: bool) -> Coordinator {
        let listener = listen(path);
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (s2, sh2) = (stop.clone(), shared.clone());
        let thread = std::thread::spawn(move || serve(listener, mode, capacity, keep, s2, sh2));
        Coordinator {
            path: path.to_path_buf(),
            stop,
            shared,
            thread: Some(thread),
        }
    }

    /// Flags the next Welcomes carry.
    pub fn set_welcome_flags(&self, flags: u8) {
        self.shared.lock().unwrap().welcome_flags = flags;
    }

    /// Dedup messages received so far (client id, message, fd).
    /// Ask every client that registers from now on for completion marks at
    /// most every `ns` (0: none).
    pub fn set_mark_every_ns(&self, ns: u64) {
        self.shared.lock().unwrap().mark_every_ns = ns;
    }

    /// Ask every live client for completion marks at most every `ns`
    /// (0: none) from the next pass on.
    pub fn set_live_mark_every_ns(&self, ns: u64) {
        self.shared.lock().unwrap().live_mark_every_ns = Some(ns);
    }

    /// Make every live client whose GPU is known a training client as `t`
    /// says, from the next pass on (every millisecond).
    pub fn set_live_training(&self, t: Training) {
        self.shared.lock().unwrap().live_training = Some(t);
    }

    pub fn dedup_received(&self) -> Vec<(u64, Dedup, Option<Arc<OwnedFd>>)> {
        self.shared.lock().unwrap().dedup_in.clone()
    }

    /// Queues a Dedup message (and fd) for client `id`; sent within a few ms.
    pub fn send_dedup(&self, id: u64, d: Dedup, fd: Option<Arc<OwnedFd>>) {
        self.shared.lock().unwrap().dedup_out.push((id, d, fd));
    }

    /// Polls until a received Dedup message satisfies `f`; returns it.
    pub fn wait_dedup(
        &self,
        what: &str,
        f: impl Fn(u64, &Dedup) -> bool,
    ) -> (u64, Dedup, Option<Arc<OwnedFd>>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(m) = self
                .dedup_received()
                .into_iter()
                .find(|(id, d, _)| f(*id, d))
            {
                return m;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn connections(&self) -> usize {
        self.shared.lock().unwrap().connections
    }

    pub fn clients(&self) -> Vec<ClientView> {
        self.shared.lock().unwrap().clients.clone()
    }

    /// Records received so far, over every client (without copying them).
    pub fn records_received(&self) -> u64 {
        let sh = self.shared.lock().unwrap();
        sh.clients.iter().map(|c| c.received).sum()
    }

    /// Polls until `f` holds (bounded: a hung client fails the test, not the suite).
    pub fn wait_for(&self, what: &str, f: impl Fn(&[ClientView]) -> bool) -> Vec<ClientView> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let c = self.clients();
            if f(&c) {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {c:#?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops serving: every client socket and the listener close, the socket
    /// file goes. Returns what was seen.
    pub fn kill(mut self) -> Vec<ClientView> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().expect("coordinator thread");
        }
        let _ = std::fs::remove_file(&self.path);
        self.clients()
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn poll_in(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

fn serve(
    listener: OwnedFd,
    mode: Mode,
    capacity: u32,
    keep: bool,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
) {
    let mut live: Vec<Live> = Vec::new();
    let mut stalled: Vec<OwnedFd> = Vec::new();
    let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
    let mut beat_at = Instant::now();
    let mut board: Option<TestBoard> = None;
    while !stop.load(Ordering::Acquire) {
        // Accept everything pending.
        loop {
            // SAFETY: accept4 on our listening socket; no address wanted.
            let raw = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if raw < 0 {
                break;
            }
            // SAFETY: fresh fd from accept4.
            let sock = unsafe { OwnedFd::from_raw_fd(raw) };
            shared.lock().unwrap().connections += 1;
            match mode {
                Mode::Stall => stalled.push(sock),
                Mode::Reject(reason, version) => {
                    if poll_in(raw, 1000) {
                        let _ = wire::recv(sock.as_fd(), &mut buf);
                    }
                    let m = Message::Reject(wire::Reject {
                        reason,
                        peer_version: version,
                        message: "this tandemd speaks another protocol",
                    });
                    let n = m.encode(&mut buf).expect("encode reject");
                    buf[4..6].copy_from_slice(&version.to_le_bytes());
                    let _ = wire::send(sock.as_fd(), &buf[..n], None);
                }
                Mode::Welcome => {
                    if !poll_in(raw, 1000) {
                        continue;
                    }
                    let Ok(got) = wire::recv(sock.as_fd(), &mut buf) else {
                        continue;
                    };
                    let Ok(Message::Hello(h)) = Message::decode(&buf[..got.len]) else {
                        continue;
                    };
                    // Ids unique across every coordinator of the test process.
                    static NEXT_ID: AtomicU64 = AtomicU64::new(100);
                    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                    let view = ClientView {
                        id,
                        hello_pid: h.pid,
                        peer_pid: peer_pid(raw),
                        class: Some(h.class),
                        exe: h.exe.to_vec(),
                        ..ClientView::default()
                    };
                    let layout = RingLayout::new(capacity).expect("layout");
                    let (memfd, map) =
                        tandem_proto::shm::create(c"tandem-test-ring", layout.region_len())
                            .expect("memfd");
                    let map: &'static tandem_proto::Mapping = Box::leak(Box::new(map));
                    let consumer = Consumer::init(map, layout, id).expect("init ring");
                    let control = ring::control_block(map, layout).expect("control");
                    control.set_mark_every_ns(shared.lock().unwrap().mark_every_ns);
                    let w = Message::Welcome(wire::Welcome {
                        client_id: id,
                        region_len: layout.region_len() as u64,
                        ring_capacity: layout.capacity(),
                        heartbeat_interval_ms: 100,
                        class: h.class,
                        flags: shared.lock().unwrap().welcome_flags,
                        mps: None,
                    });
                    let n = w.encode(&mut buf).expect("encode welcome");
                    if wire::send(sock.as_fd(), &buf[..n], Some(memfd.as_fd())).is_err() {
                        continue;
                    }
                    let mut sh = shared.lock().unwrap();
                    sh.clients.push(view);
                    live.push(Live {
                        sock,
                        consumer,
                        control,
                        view: sh.clients.len() - 1,
                        slot: None,
                    });
                }
            }
        }
        // Rings, messages, hang-ups.
        {
            let mut guard = shared.lock().unwrap();
            let Shared {
                clients,
                dedup_in,
                dedup_out,
                live_mark_every_ns,
                live_training,
                ..
            } = &mut *guard;
            let mut gone = Vec::new();
            for (i, l) in live.iter_mut().enumerate() {
                if let Some(ns) = *live_mark_every_ns {
                    l.control.set_mark_every_ns(ns);
                }
                let v = &mut clients[l.view];
                if let (Some(t), Some(d)) = (*live_training, v.devices.first()) {
                    let b = board.get_or_insert_with(TestBoard::new);
                    make_training(l, t, &d.1, b, &mut buf);
                }
                let _ = l.consumer.drain(|r| v.take(r, keep));
                loop {
                    match wire::recv(l.sock.as_fd(), &mut buf) {
                        Ok(got) if got.len == 0 => {
                            let _ = l.consumer.drain(|r| v.take(r, keep));
                            v.hung_up = true;
                            gone.push(i);
                            break;
                        }
                        Ok(got) => match Message::decode(&buf[..got.len]) {
                            Ok(Message::FuncName(f)) => {
                                v.func_names.push((f.func_id, f.name.to_vec()))
                            }
                            Ok(Message::Device(d)) => {
                                v.devices.push((d.ordinal, d.uuid, d.name.to_vec()))
                            }
                            Ok(Message::Dedup(d)) => {
                                dedup_in.push((v.id, d, got.fd.map(Arc::new)));
                            }
                            _ => v.bad_messages += 1,
                        },
                        Err(_) => break,
                    }
                }
                for (id, d, fd) in std::mem::take(dedup_out) {
                    if id != v.id {
                        dedup_out.push((id, d, fd));
                        continue;
                    }
                    let n = Message::Dedup(d).encode(&mut buf).expect("encode dedup");
                    wire::send(l.sock.as_fd(), &buf[..n], fd.as_deref().map(|f| f.as_fd()))
                        .expect("send dedup");
                }
                let st = l.consumer.stats();
                v.ring_dropped = st.dropped_full + st.dropped_busy;
                let k = l.control.client_counters();
                (v.spatial_state, v.masked_launches) = (k.spatial_state, k.masked_launches);
            }
            for i in gone.into_iter().rev() {
                live.swap_remove(i);
            }
        }
        if beat_at.elapsed() >= Duration::from_millis(20) {
            for l in &live {
                l.control.beat();
            }
            beat_at = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Final drain, then everything closes (clients see the hang-up).
    let mut sh = shared.lock().unwrap();
    for l in &mut live {
        let v = &mut sh.clients[l.view];
        let _ = l.consumer.drain(|r| v.take(r, keep));
    }
    drop(live);
    drop(stalled);
    drop(listener);
}

// ---------------------------------------------------------------- the host

/// The compiled `client_host` (built once per test process).
pub fn client_host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(|| {
        let a = tandem_e2e::artifacts();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hosts/client_host.c");
        let dir = a.profile_dir.join("shim-tests");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let out = dir.join(format!("client_host-{}", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let o = Command::new(&cc)
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"])
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .arg("-L")
            .arg(&a.lib_dir)
            .args(["-Wl,--no-as-needed", "-lcuda", "-ldl"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
        assert!(
            o.status.success(),
            "compiling client_host failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

pub struct HostRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl HostRun {
    #[track_caller]
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(self.code, Some(0), "host failed:\n{self}");
        self
    }

    /// `STATE <role> key=value...` -> the values.
    #[track_caller]
    pub fn state(&self, role: &str) -> BTreeMap<String, String> {
        let prefix = format!("STATE {role} ");
        let line = self
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no STATE {role} line:\n{self}"));
        kv(line)
    }

    #[track_caller]
    pub fn state_u64(&self, role: &str, key: &str) -> u64 {
        let s = self.state(role);
        s.get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {key} in STATE {role}:\n{self}"))
    }

    pub fn lines(&self, prefix: &str) -> Vec<&str> {
        self.stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }
}

pub fn kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl std::fmt::Display for HostRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `client_host args` under the shim with TANDEM_SOCKET=`socket` and the
/// extra variables; killed (and reported) after 60 s.
pub fn run_client_host(socket: &Path, args: &[&str], vars: &[(&str, &str)]) -> HostRun {
    spawn_client_host(socket, args, vars).wait()
}

pub struct Running {
    child: std::process::Child,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn wait(self) -> HostRun {
        let pid = self.child.id() as libc::pid_t;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let dog = std::thread::spawn(move || {
            if rx.recv_timeout(Duration::from_secs(60)).is_err() {
                // SAFETY: kill(2) on our unreaped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        let out = self.child.wait_with_output().expect("wait for host");
        let _ = tx.send(());
        let _ = dog.join();
        HostRun {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

pub fn spawn_client_host(socket: &Path, args: &[&str], vars: &[(&str, &str)]) -> Running {
    let a = tandem_e2e::artifacts();
    let mut cmd = Command::new(client_host());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("TANDEM_") || k.starts_with("FAKECUDA_") || k == "LD_PRELOAD" {
            cmd.env_remove(&*k);
        }
    }
    cmd.env("LD_LIBRARY_PATH", &a.lib_dir)
        .env("TANDEM_SOCKET", socket);
    tandem_e2e::preload_shim(&mut cmd, &a.shim);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    Running {
        child: cmd.spawn().expect("start client_host"),
    }
}
