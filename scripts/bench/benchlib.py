"""Shared parts of the GPU benchmarks in scripts/bench/ (colocation.py, dedup.py).

Stdlib only, and nothing here imports torch: the drivers stay free of CUDA
(their own context would distort NVML's memory figures and MPS), and
`--dry-run` and the unit tests (test_bench.py) run on machines without a GPU.

What lives here:
- statistics (percentile, spread) and JSON/markdown helpers;
- the line protocol with worker processes (`Child`): a worker prints
  `TAG {json}` lines on stdout and reads commands from stdin; when its stdin
  reaches EOF before it was told to stop, its driver is gone and it exits;
- tandemd (reusing scripts/gpu/tandemd.py's start_tandemd and stats), an
  MPS control daemon on private directories, and cleanup of both on any exit
  (Ctrl-C and SIGTERM unwind through `with` blocks);
- removal of processes left behind by an earlier invocation that was killed
  outright (SIGKILL at a command's time limit): every process a driver starts
  carries TANDEM_BENCH_OWNER=<driver pid> in its environment.

The test seam TANDEM_BENCH_FAKE=1 (tests only, never for numbers) makes the
workers simulate their GPU work with sleeps, so the orchestration runs in
test_bench.py without a GPU; rows then say device "fake".
"""

import contextlib
import datetime
import json
import math
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
import tandemd as td  # noqa: E402  (start_tandemd, stats over the stats socket)
import interposition as ip  # noqa: E402  (device_info, spread)

FAKE_ENV = "TANDEM_BENCH_FAKE"
OWNER_ENV = "TANDEM_BENCH_OWNER"
MPS_CONTROL = "nvidia-cuda-mps-control"
MIB = 1 << 20
# Variables a worker must not inherit from the driver's environment: each mode
# sets exactly the ones it needs.
MODE_ENV_PREFIXES = ("CUDA_MPS_", "TANDEM_")
MODE_ENV_KEYS = ("LD_PRELOAD",)


def fake():
    return os.environ.get(FAKE_ENV) == "1"


class BenchError(Exception):
    """A cell failed (a worker died, timed out, a daemon did not start)."""


# ------------------------------------------------------------------ statistics


def percentile(xs, q):
    """q-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default method); None for an empty list."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def spread(xs):
    """{median, min, max, n} of the values that are not None; None if none."""
    xs = [x for x in xs if x is not None]
    return ip.spread(xs) if xs else None


def fmt_s(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# ------------------------------------------------------------------ files


def write_json(path, obj):
    """Atomic: a reader (or a command killed mid-write) never sees half a file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def find_file(name, dirs):
    """The first DIR/name that exists, else None."""
    for d in dirs:
        if d and os.path.isfile(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


def input_files(paths, prefix, exclude):
    """JSON files named prefix*.json in the given folders (or the files given
    directly), sorted, without the merged output file `exclude`."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            for n in sorted(os.listdir(p)):
                if n.startswith(prefix) and n.endswith(".json") and n != exclude:
                    out.append(os.path.join(p, n))
        elif os.path.isfile(p):
            out.append(p)
        else:
            print(f"report: {p} does not exist; skipped", file=sys.stderr)
    return out


def md_table(header, rows):
    """A markdown table; None prints as an empty cell."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join("" if c is None else str(c) for c in r) + " |")
    return "\n".join(lines) + "\n"


def fnum(x, fmt=".3g"):
    return None if x is None else format(x, fmt)


def frange(lo, hi, fmt=".3g"):
    return None if lo is None or hi is None else f"{lo:{fmt}}–{hi:{fmt}}"


def machines(rows):
    """'device, driver D, date' for each distinct machine in the rows."""
    seen = []
    for r in rows:
        m = f"{r.get('device')}, driver {r.get('driver')}, {r.get('date')}"
        if m not in seen:
            seen.append(m)
    return seen


# ------------------------------------------------------------------ device


def device_info(gpu_index=0):
    """device, driver and date: nvidia-smi (scripts/gpu's device_info), else
    pynvml."""
    if fake():
        return {"date": datetime.date.today().isoformat(), "device": "fake (test seam, no GPU)",
                "driver": "none", "torch": None}
    info = ip.device_info()
    if info.get("device") == "unknown":
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
            name = pynvml.nvmlDeviceGetName(h)
            drv = pynvml.nvmlSystemGetDriverVersion()
            info["device"] = name.decode() if isinstance(name, bytes) else name
            info["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        except Exception as e:  # noqa: BLE001 - reported in the rows
            info["driver"] = f"{info.get('driver')}; pynvml: {e}"
    return info


# ------------------------------------------------------------------ processes


def clean_env(base=None, **extra):
    """The driver's environment without any mode-specific variable (LD_PRELOAD,
    CUDA_MPS_*, TANDEM_* except the benchmarks' own TANDEM_BENCH_*), plus `extra`."""
    env = dict(os.environ if base is None else base)
    for k in list(env):
        if k.startswith("TANDEM_BENCH_"):
            continue
        if k in MODE_ENV_KEYS or k.startswith(MODE_ENV_PREFIXES):
            del env[k]
    env.update({k: str(v) for k, v in extra.items()})
    return env


def show_cmd(argv, env_extra):
    """One shell line: the variables that differ from the driver's, then the command."""
    pre = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(env_extra.items()))
    return (pre + " " if pre else "") + shlex.join(str(a) for a in argv)


PROTOCOL_TAGS = ("READY", "RESULT", "LOADED", "WROTE", "ERROR")


def parse_line(line):
    """('TAG', payload) for a protocol line `TAG {json}`, else None."""
    tag, _, rest = line.rstrip("\n").partition(" ")
    if tag not in PROTOCOL_TAGS:
        return None
    try:
        return tag, json.loads(rest) if rest.strip() else {}
    except ValueError:
        return tag, {"unparsed": rest[:500]}


def emit(tag, payload):
    """Worker side: one protocol line."""
    print(f"{tag} {json.dumps(payload)}", flush=True)


class Child:
    """A worker process in its own session (so one killpg ends it and anything
    it started), stdout parsed for protocol lines, stderr into a log file."""

    def __init__(self, name, argv, env, log_path):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.events = queue.Queue()
        self.p = subprocess.Popen(
            [str(a) for a in argv], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, text=True, bufsize=1, start_new_session=True,
        )
        self.pid = self.p.pid
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            ev = parse_line(line)
            if ev:
                self.events.put(ev)
        self.events.put(("EOF", None))

    def send(self, line):
        try:
            self.p.stdin.write(line + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def wait_for(self, tag, timeout):
        """The payload of the next `tag` line; BenchError when the process ends
        first or the time runs out. An ERROR line from the worker is raised too."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise BenchError(f"{self.name}: no {tag} within {timeout:.0f} s; "
                                 f"stderr: {self.stderr_tail(1500)}")
            try:
                got, payload = self.events.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if got == tag:
                return payload
            if got == "ERROR":
                raise BenchError(f"{self.name}: {payload}; stderr: {self.stderr_tail(1500)}")
            if got == "EOF":
                self.events.put(("EOF", None))  # later waits see it too
                rc = self.wait(10)
                raise BenchError(f"{self.name} exited with {rc} before {tag}; "
                                 f"stderr: {self.stderr_tail(1500)}")

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stderr_tail(self, n=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self, grace=10.0):
        """Close stdin (a worker exits at EOF), wait `grace`, then SIGKILL its
        process group. Returns the exit status."""
        if self.p.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self.p.stdin.close()
            self.wait(grace)
        if self.p.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            self.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # anything the worker left in its group
        self._reader.join(timeout=5)
        for pipe in (self.p.stdin, self.p.stdout):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()
        self._log.close()
        return self.p.returncode


def stdin_commands(on_line):
    """Worker side: a daemon thread calling on_line(line) per stdin line and
    on_line(None) at EOF."""

    def loop():
        for line in sys.stdin:
            on_line(line.strip())
        on_line(None)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


_interrupted = [False]


def exit_on_signals():
    """SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C, so `with`
    blocks and `finally` clauses clean up; a second signal during cleanup is
    ignored."""

    def handler(signum, _frame):
        if _interrupted[0]:
            return
        _interrupted[0] = True
        raise KeyboardInterrupt(f"signal {signum}")

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)


# ------------------------------------------------------------- /proc scanning


def parse_environ(data):
    """/proc/PID/environ bytes -> dict."""
    env = {}
    for item in data.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def proc_entries():
    """(pid, environ dict, cmdline string) of every process we may read."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = parse_environ(f.read())
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        yield int(name), env, cmd


def pids_with_env(key, value, entries=None):
    return [pid for pid, env, _ in (proc_entries() if entries is None else entries)
            if env.get(key) == value]


def bench_driver_alive(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "colocation.py" in cmd or "dedup.py" in cmd


def stale_entries(entries, alive):
    """Processes carrying an owner marker whose owner (a driver) is gone:
    left behind by an invocation that was killed outright."""
    out = []
    for pid, env, cmd in entries:
        owner = env.get(OWNER_ENV)
        if not owner or not owner.isdigit():
            continue
        if int(owner) == os.getpid() or alive(int(owner)):
            continue
        out.append((pid, env, cmd))
    return out


def kill_stale():
    """Stops what an earlier, killed invocation left: its MPS daemons (by
    `quit` on their own pipe directory, then SIGKILL), its tandemd and workers
    (SIGKILL by pid). Returns the pids it ended."""
    stale = stale_entries(list(proc_entries()), bench_driver_alive)
    pipes = {env["CUDA_MPS_PIPE_DIRECTORY"] for _, env, cmd in stale
             if MPS_CONTROL in cmd and env.get("CUDA_MPS_PIPE_DIRECTORY")}
    for pipe in pipes:
        stop_mps(clean_env(CUDA_MPS_PIPE_DIRECTORY=pipe), pipe, quiet=True)
    ended = []
    for pid, _, cmd in stale:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            ended.append(pid)
            print(f"removed a process left by a killed run: {pid} {cmd[:120]}", flush=True)
    return ended


def claim_owner():
    """Marks every process this driver starts from now on."""
    os.environ[OWNER_ENV] = str(os.getpid())


# ------------------------------------------------------------------ daemons


class Tandemd:
    def __init__(self, proc, sock, stats_sock, log_path):
        self.proc, self.sock, self.stats_sock, self.log_path = proc, sock, stats_sock, log_path
        self.stats_error = None

    def stats(self):
        return td.stats(self.stats_sock)

    def try_stats(self):
        """The /stats snapshot, or None (with the reason kept in `stats_error`)."""
        try:
            return self.stats()
        except Exception as e:  # noqa: BLE001 - a missing snapshot is reported, not fatal
            self.stats_error = repr(e)
            return None

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""


def tandemd_paths(bin_dir, sock_dir):
    """(shim, tandemd binary, socket) for a tandemd on a private socket in sock_dir."""
    return (os.path.join(os.path.abspath(bin_dir), "libtandem.so"),
            os.path.join(os.path.abspath(bin_dir), "tandemd"),
            os.path.join(sock_dir, "tandemd.sock"))


def check_bin(bin_dir):
    """None, or what is missing from --bin."""
    for f in tandemd_paths(bin_dir, "")[:2]:
        if not os.path.exists(f):
            return (f"{f} missing; build with `cargo build --release -p tandem-shim "
                    "-p tandem-coordinator` and carry libtandem.so, tandemd (and tandemctl) "
                    "in the folder given as --bin")
    return None


@contextlib.contextmanager
def tandemd(bin_dir, sock_dir, config=None):
    """tandemd from bin_dir with built-in defaults (or the TOML text
    `config`) on a private socket in sock_dir (scripts/gpu/tandemd.py's
    start_tandemd); stopped on exit."""
    os.makedirs(sock_dir, exist_ok=True)
    try:
        proc, sock, stats_sock = td.start_tandemd(os.path.abspath(bin_dir), sock_dir, config)
    except SystemExit as e:  # its way of saying "did not answer"
        raise BenchError(str(e)) from None
    t = Tandemd(proc, sock, stats_sock, os.path.join(sock_dir, "tandemd.log"))
    try:
        yield t
    except BenchError as e:  # a failure under tandem: its log may say why
        raise BenchError(f"{e}; tandemd log: {t.log_tail(1500)}") from None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


class StatsPoller:
    """Fetches tandemd's /stats every `interval` s in a thread; `last` is the
    newest snapshot. After the clients exit, `client_views(pids)` takes each
    one's final entry (the "departed" list), else its last live entry."""

    def __init__(self, td, interval=1.0):
        self.td, self.interval = td, interval
        self.last = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=5)

    @property
    def error(self):
        return self.td.stats_error

    def _loop(self):
        while not self._stop.is_set():
            self.last = self.td.try_stats() or self.last
            self._stop.wait(self.interval)

    def client_views(self, pids, wait_s=5.0):
        deadline = time.time() + wait_s
        snap = None
        while time.time() < deadline:
            snap = self.td.try_stats()
            if snap is None:
                break
            if set(pids) <= {c.get("pid") for c in snap.get("departed", [])}:
                break
            time.sleep(0.2)
        return client_views(snap or self.last, self.last, pids)


CLIENT_VIEW_KEYS = ("id", "pid", "class", "class_claimed", "class_reason", "launches",
                    "records", "dropped", "gate_waits", "gate_wait_ns", "gate_timeouts",
                    "syncs", "sched", "mps_priority", "spatial")


def client_views(final, live, pids):
    """pid -> the coordinator's view of that client: from `final`'s departed
    list when there, else from `live`'s clients; keys CLIENT_VIEW_KEYS plus
    every dedup* key."""
    out = {}
    for pid in pids:
        entry, source = None, None
        for snap, lst, src in ((final, "departed", "departed"), (final, "clients", "live"),
                               (live, "clients", "live")):
            for c in reversed((snap or {}).get(lst, [])):
                if c.get("pid") == pid:
                    entry, source = c, src
                    break
            if entry:
                break
        if entry is None:
            out[pid] = None
            continue
        view = {k: entry.get(k) for k in CLIENT_VIEW_KEYS if k in entry}
        view.update({k: v for k, v in entry.items() if k.startswith("dedup")})
        view["source"] = source
        out[pid] = view
    return out


def dedup_view(snap):
    """Every dedup* key of a /stats snapshot, wherever tandemd puts it: top
    level, totals, each GPU, each client (live and departed)."""
    if not snap:
        return None

    def pick(d):
        return {k: v for k, v in d.items() if k.lower().startswith("dedup")} if isinstance(d, dict) else {}

    view = {"top": pick(snap), "totals": pick(snap.get("totals", {})),
            "gpus": [], "clients": [], "departed": []}
    for key, ident in (("gpus", "uuid"), ("clients", "pid"), ("departed", "pid")):
        for item in snap.get(key, []) or []:
            p = pick(item)
            if p:
                view[key].append({ident: item.get(ident), **p})
    return view


def stop_mps(env, pipe_dir, quiet=False, wait_s=15.0):
    """`quit` to the control daemon on pipe_dir, then SIGKILL whatever still
    runs with that pipe directory (the daemon, its server) after wait_s."""
    try:
        subprocess.run([MPS_CONTROL], input="quit\n", env=env, text=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        if not quiet:
            print(f"mps: quit failed: {e}", file=sys.stderr)
    deadline = time.time() + wait_s
    left = pids_with_env("CUDA_MPS_PIPE_DIRECTORY", pipe_dir)
    while left and time.time() < deadline:
        time.sleep(0.2)
        left = pids_with_env("CUDA_MPS_PIPE_DIRECTORY", pipe_dir)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            print(f"mps: killed {pid} (still running {wait_s:.0f} s after quit)", file=sys.stderr)


def mps_dirs(work_dir):
    return {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(work_dir, "mps-pipe"),
            "CUDA_MPS_LOG_DIRECTORY": os.path.join(work_dir, "mps-log")}


@contextlib.contextmanager
def mps_daemon(work_dir, stop_wait_s=15.0):
    """An MPS control daemon on private pipe/log directories under work_dir;
    yields the variables its clients need; stopped (and waited for) on exit,
    also when starting it failed half-way."""
    dirs = mps_dirs(work_dir)
    for d in dirs.values():
        os.makedirs(d, exist_ok=True)
    env = clean_env(**dirs)
    pipe = dirs["CUDA_MPS_PIPE_DIRECTORY"]
    out_path = os.path.join(work_dir, "mps-start.out")
    try:
        # Output to a file, not a pipe: the daemon it forks might keep a pipe open.
        with open(out_path, "w") as out:
            try:
                rc = subprocess.run([MPS_CONTROL, "-d"], env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, timeout=30).returncode
            except (OSError, subprocess.TimeoutExpired) as e:
                raise BenchError(f"{MPS_CONTROL} -d: {e}") from None
        if rc != 0:
            with open(out_path, errors="replace") as f:
                raise BenchError(f"{MPS_CONTROL} -d exited {rc}: {f.read()[-1000:]}")
        deadline = time.time() + 10
        while not (os.path.exists(os.path.join(pipe, "control"))
                   and pids_with_env("CUDA_MPS_PIPE_DIRECTORY", pipe)):
            if time.time() > deadline:
                raise BenchError(f"MPS control daemon: no {pipe}/control or no daemon after 10 s")
            time.sleep(0.1)
        yield dirs
    finally:
        stop_mps(env, pipe, wait_s=stop_wait_s)


def work_dir(prefix):
    """A short private folder (Unix socket paths must stay under 108 bytes)."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


class Budget:
    """Stops before a cell that would not finish within the command's time:
    estimates are scaled by how long finished cells took against theirs."""

    def __init__(self, seconds, start=None):
        self.seconds = seconds
        self.start = time.time() if start is None else start
        self.ratios = []

    def record(self, estimated, actual):
        if estimated > 0:
            self.ratios.append(actual / estimated)

    def scale(self):
        """Median actual/estimated so far, kept within 0.5..3."""
        if not self.ratios:
            return 1.0
        return min(3.0, max(0.5, sorted(self.ratios)[len(self.ratios) // 2]))

    def fits(self, estimated, now=None):
        now = time.time() if now is None else now
        return (now - self.start) + estimated * self.scale() <= self.seconds
