#!/usr/bin/env python3
"""Issue 5: follow mode on a real GPU (an inference job maps a training job's live weights).

1. Starts tandemd (carried binary) on a private socket, built-in defaults.
2. A trainer (TANDEM_FOLLOW=on, TANDEM_CLASS=training) builds a seeded MLP with
   a BatchNorm layer, shares it (python/tandem_follow.py: share(model,
   "follow-check", include_buffers=True), before its optimizer), and trains
   on fixed random data. After steps 5, 10 and 20 it stops, computes its eval
   output on a fixed input and reports the output's SHA-256; it goes on only
   once the followers have answered.
3. A follower (TANDEM_CLASS=inference) builds the same architecture from
   another seed and follows the region: at every stop its output must equal
   the trainer's bit for bit. A control job (same, but not following) must
   differ, so the comparison is not vacuous.
4. Memory: device memory used (NVML via pynvml, else nvidia-smi) before and
   after the control, then the follower, start. The follower's extra memory
   must be below 0.5 x the region beyond what the control needed besides its
   own copy of the weights (its CUDA context, workspace and activations).
5. Writes: at step 10 a writer job follows and adds 1 to a followed weight
   in a kernel (p.data.add_(1)), another copies into one from the host: each
   must fail (exit code and stderr reported; the kernel writer's stderr should
   name TANDEM_FOLLOW or read-only), and the trainer's and the follower's
   outputs must be unchanged.
6. The trainer exits: the follower must still produce step 20's output
   (frozen). After every job has exited, device memory must be back at the
   baseline (within 64 MiB).

Usage (on the GPU machine; .carry holds libtandem.so and tandemd built here):
    python3 scripts/gpu/follow.py --bin .carry --out "$OUT"

Test seam (tests and `prove --dry-run` only, never for numbers):
TANDEM_GPU_FAKE=1 runs the parent as it is (tandemd, the children, every wait,
check and record) with children that import no PyTorch: the "weights" are a
step number in a file the trainer writes and a follower reads, outputs are
digests of it, and each child's device memory is a number in a folder that
stands in for NVML. It proves the orchestration, not follow mode.
Writes follow.json under --out; exit 1 if a check fails, 2 if a binary is
missing. Children print `EVENT <json>` lines and read one JSON command per line
on stdin; every wait is bounded, and the whole run by --time-limit.
"""

import argparse
import collections
import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "python"))
import tandemd as td  # noqa: E402  (tandemd start, /stats)
import interposition as ip  # noqa: E402  (device info, output digests)

FAKE_ENV = "TANDEM_GPU_FAKE"
FAKE_DIR_ENV = "TANDEM_GPU_FAKE_FOLLOW_DIR"
FAKE_REGION_MIB, FAKE_CONTEXT_MIB, FAKE_BASE_MIB = 300, 500, 1000
REGION = "follow-check"
STOPS = (5, 10, 20)
WRITE_STOP = 10
IN, HIDDEN, DEPTH, OUT = 1024, 4096, 4, 1024  # ~75.5M parameters, ~302 MiB in fp32
BATCH, EVAL_BATCH = 512, 256
MiB = 1 << 20
BASELINE_SLACK_MIB = 64
CAUSE_WORDS = ("TANDEM_FOLLOW", "read-only", "read only")


# ---------------------------------------------------------------- child side


def emit(event, **fields):
    print("EVENT " + json.dumps({"event": event, **fields}), flush=True)


def command():
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("follow: the parent hung up")
    return json.loads(line)


def setup_torch():
    import torch

    # The same kernels in every process, so equal weights give equal bits.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    return torch


def build_model(torch, seed, device="cuda"):
    """`device` other than cuda: tests only (so are eval_input's and train_until's)."""
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(IN, HIDDEN), torch.nn.BatchNorm1d(HIDDEN), torch.nn.GELU()]
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU()]
    layers.append(torch.nn.Linear(HIDDEN, OUT))
    return torch.nn.Sequential(*layers).to(device)


def eval_input(torch, device="cuda"):
    g = torch.Generator().manual_seed(7)
    return torch.randn(EVAL_BATCH, IN, generator=g).to(device)


def eval_sha(torch, model, x):
    training = model.training
    model.eval()
    with torch.no_grad():
        out = model(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    model.train(training)
    return ip.digest([out])


def train_data(torch, device="cuda"):
    """The trainer's fixed random (data, target)."""
    g = torch.Generator().manual_seed(1)
    data = torch.randn(BATCH, IN, generator=g).to(device)
    target = torch.randn(BATCH, OUT, generator=g).to(device)
    return data, target


def train_until(torch, model, opt, data, target, step, until):
    """Optimizer steps until `until` steps are done: (step, last loss tensor or None)."""
    loss = None
    while step < until:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        opt.step()
        step += 1
    return step, loss


def weights_bytes(model):
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def child_trainer():
    torch = setup_torch()
    import tandem_follow as tf

    model = build_model(torch, seed=0)
    region = tf.share(model, REGION, include_buffers=True)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)  # after share(), as it must be
    data, target = train_data(torch)
    x = eval_input(torch)
    emit("ready", pid=os.getpid(), code=region.code, shared=region.shared, reason=region.reason,
         region_bytes=region.nbytes, shared_bytes=tf.shared_bytes(),
         detached=region.detached(model), weights_bytes=weights_bytes(model))
    step, loss = 0, None
    while True:
        cmd = command()
        if cmd["cmd"] == "train":
            step, last = train_until(torch, model, opt, data, target, step, cmd["until"])
            loss = last if last is not None else loss
            torch.cuda.synchronize()  # every update has landed before anyone reads
            emit("eval", step=step, sha=eval_sha(torch, model, x), loss=float(loss),
                 detached=region.detached(model))
        elif cmd["cmd"] == "eval":
            emit("eval", step=step, sha=eval_sha(torch, model, x), detached=region.detached(model))
        elif cmd["cmd"] == "exit":
            emit("bye")
            return
        else:
            raise SystemExit(f"trainer: unknown command {cmd}")


def child_follower(follows):
    torch = setup_torch()
    import tandem_follow as tf

    model = build_model(torch, seed=1234).eval()
    x = eval_input(torch)
    info = {"pid": os.getpid(), "follows": follows, "own_weights_bytes": weights_bytes(model)}
    region = None
    if follows:
        t0 = time.monotonic()
        region = tf.follow(model, REGION, timeout_s=30, include_buffers=True)
        info.update(follow_s=round(time.monotonic() - t0, 3), region_bytes=region.nbytes,
                    mapped_bytes=tf.mapped_bytes(), detached=region.detached(model))
    # One forward before measuring, so both jobs hold the same workspaces;
    # then the caching allocator hands back what is free (the follower's old weights).
    info["sha"] = eval_sha(torch, model, x)
    torch.cuda.empty_cache()
    info.update(torch_allocated=torch.cuda.memory_allocated(),
                torch_reserved=torch.cuda.memory_reserved())
    emit("ready", **info)
    while True:
        cmd = command()
        if cmd["cmd"] == "eval":
            extra = {}
            if region is not None:
                extra = {"mapped_bytes": tf.mapped_bytes(), "detached": region.detached(model)}
            emit("eval", sha=eval_sha(torch, model, x), **extra)
        elif cmd["cmd"] == "exit":
            emit("bye")
            return
        else:
            raise SystemExit(f"follower: unknown command {cmd}")


def child_writer(mode):
    """Follows, then writes into a followed weight. Not caught: the process
    must fail the way a careless inference job would."""
    torch = setup_torch()
    import tandem_follow as tf

    model = build_model(torch, seed=99).eval()
    tf.follow(model, REGION, timeout_s=30, include_buffers=True)
    emit("followed", pid=os.getpid())
    p = model[0].weight
    if mode == "kernel":
        p.data.add_(1)
    else:
        p.data.copy_(torch.ones(tuple(p.shape)))  # host to device, a driver copy
    torch.cuda.synchronize()
    emit("wrote")  # the write was not stopped


def fake():
    return os.environ.get(FAKE_ENV) == "1"


def fake_file(name):
    return os.path.join(os.environ[FAKE_DIR_ENV], name)


def fake_hold_mib(mib):
    """The child's simulated device memory, removed when it exits."""
    path = fake_file(f"mem-{os.getpid()}")
    with open(path, "w") as f:
        f.write(str(mib))
    import atexit

    atexit.register(lambda: os.path.exists(path) and os.remove(path))


def fake_sha(step):
    import hashlib

    return hashlib.sha256(f"weights after step {step}".encode()).hexdigest()


def fake_child(role, writer_mode):
    """The test seam's children (see the module's doc)."""
    region = fake_file("region")
    nbytes = FAKE_REGION_MIB * MiB
    if role == "writer":
        emit("followed", pid=os.getpid())
        if writer_mode == "kernel":
            print("tandem: a kernel wrote into followed (read-only) memory; TANDEM_FOLLOW=off "
                  "in this job gives it its own copy", file=sys.stderr, flush=True)
        raise SystemExit(1)
    if role == "trainer":
        fake_hold_mib(FAKE_CONTEXT_MIB + FAKE_REGION_MIB)
        step = 0
        with open(region, "w") as f:
            f.write("0")
        emit("ready", pid=os.getpid(), code=0, shared=True, reason=None, region_bytes=nbytes,
             shared_bytes=nbytes, detached=[], weights_bytes=nbytes)
        while True:
            cmd = command()
            if cmd["cmd"] == "train":
                step = max(step, cmd["until"])
                with open(region + ".tmp", "w") as f:
                    f.write(str(step))
                os.replace(region + ".tmp", region)
                emit("eval", step=step, sha=fake_sha(step), loss=1.0 / (1 + step), detached=[])
            elif cmd["cmd"] == "eval":
                emit("eval", step=step, sha=fake_sha(step), detached=[])
            elif cmd["cmd"] == "exit":
                emit("bye")
                return
    follows = role == "follower"
    # TANDEM_GPU_FAKE_FOLLOW_COPY=1: a follower that holds a second copy (tests of the check)
    copy = not follows or os.environ.get(FAKE_ENV + "_FOLLOW_COPY") == "1"
    fake_hold_mib(FAKE_CONTEXT_MIB + (FAKE_REGION_MIB if copy else 0))
    info = {"pid": os.getpid(), "follows": follows, "own_weights_bytes": nbytes,
            "torch_allocated": 0 if follows else nbytes, "torch_reserved": 0 if follows else nbytes}
    if follows:
        info.update(follow_s=0.0, region_bytes=nbytes, mapped_bytes=nbytes, detached=[])

    def sha():
        if not follows:
            return fake_sha("control")
        with open(region) as f:
            return fake_sha(int(f.read()))

    info["sha"] = sha()
    emit("ready", **info)
    while True:
        cmd = command()
        if cmd["cmd"] == "eval":
            extra = {"mapped_bytes": nbytes, "detached": []} if follows else {}
            emit("eval", sha=sha(), **extra)
        elif cmd["cmd"] == "exit":
            emit("bye")
            return


def child_main(args):
    if fake():
        try:
            fake_child(args.child, args.writer_mode)
        except BaseException as e:
            if args.child != "writer":
                emit("error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
            raise
        return 0
    try:
        if args.child == "trainer":
            child_trainer()
        elif args.child in ("follower", "control"):
            child_follower(args.child == "follower")
        elif args.child == "writer":
            child_writer(args.writer_mode)
            return 0
        else:
            raise SystemExit(f"unknown child {args.child}")
    except BaseException as e:
        if args.child != "writer":
            emit("error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        raise
    return 0


# --------------------------------------------------------------- parent side


class Failed(Exception):
    """A step could not complete (a child died, timed out or reported an error)."""


class Clock:
    def __init__(self, limit_s):
        self.end = time.monotonic() + limit_s

    def bound(self, timeout_s):
        left = self.end - time.monotonic()
        if left <= 0:
            raise Failed("the run's time limit (--time-limit) is spent")
        return min(timeout_s, left)


class Child:
    """A child process: EVENT lines from its stdout, commands to its stdin,
    stderr to a file."""

    def __init__(self, role, argv, env, logdir, clock):
        self.role, self.clock = role, clock
        self.stderr_path = os.path.join(logdir, f"{role}.stderr")
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=env, text=True)
        self.events = queue.Queue()
        self.other = collections.deque(maxlen=40)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("EVENT "):
                try:
                    self.events.put(json.loads(line[len("EVENT "):]))
                    continue
                except ValueError:
                    pass
            self.other.append(line.rstrip("\n"))
        self.events.put(None)

    def stderr_lines(self):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return [ln.rstrip("\n") for ln in f if ln.strip()]
        except OSError:
            return []

    def tail(self, n=12):
        return "\n".join(self.stderr_lines()[-n:] + list(self.other)[-4:])

    def send(self, **cmd):
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise Failed(f"{self.role} is gone (exit {self.proc.poll()}); stderr:\n{self.tail()}")

    def wait(self, event, timeout_s):
        bound = self.clock.bound(timeout_s)
        deadline = time.monotonic() + bound
        while True:
            try:
                ev = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise Failed(f"{self.role}: no '{event}' within {bound:.0f} s; "
                             f"stderr:\n{self.tail()}")
            if ev is None:
                rc = self.proc.wait(timeout=10)
                raise Failed(f"{self.role} exited ({rc}) before '{event}'; stderr:\n{self.tail()}")
            if ev.get("event") == "error":
                raise Failed(f"{self.role}: {ev.get('error')}\n{ev.get('traceback', '')}")
            if ev.get("event") == event:
                return ev

    def wait_exit(self, timeout_s):
        bound = self.clock.bound(timeout_s)
        try:
            return self.proc.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failed(f"{self.role} did not exit within {bound:.0f} s (killed); "
                         f"stderr:\n{self.tail()}")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def gpu_memory_mib(index):
    """(MiB used on GPU `index`, source): NVML via pynvml if importable, else nvidia-smi."""
    if fake():
        d = os.environ[FAKE_DIR_ENV]
        total = FAKE_BASE_MIB
        for n in os.listdir(d):
            if n.startswith("mem-"):
                with contextlib.suppress(OSError, ValueError), open(os.path.join(d, n)) as f:
                    total += int(f.read())
        return float(total), "fake"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            return pynvml.nvmlDeviceGetMemoryInfo(h).used / MiB, "nvml"
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no pynvml, or NVML refused: nvidia-smi below
        pass
    p = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0 or not p.stdout.strip():
        raise Failed(f"nvidia-smi could not read memory.used: {p.stderr.strip()}")
    return float(p.stdout.strip().splitlines()[0]), "nvidia-smi"


def process_memory_mib(index):
    """{pid: MiB} of the compute processes on GPU `index`, for the record; {} if unknown."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            return {p.pid: (p.usedGpuMemory or 0) / MiB
                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    try:
        p = subprocess.run(["nvidia-smi", f"--id={index}", "--query-compute-apps=pid,used_memory",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=30)
        rows = [r.split(",") for r in p.stdout.strip().splitlines() if "," in r]
        return {int(pid): float(mib) for pid, mib in rows}
    except Exception:  # noqa: BLE001
        return {}


def settled_memory_mib(index, tries=6, pause_s=0.5):
    """Memory used once two readings in a row agree within 2 MiB."""
    if fake():
        pause_s = 0.05
    last, source = gpu_memory_mib(index)
    for _ in range(tries):
        time.sleep(pause_s)
        now, source = gpu_memory_mib(index)
        if abs(now - last) <= 2:
            return now, source
        last = now
    return last, source


def judge_memory(before, with_control, with_follower, control_reserved, region):
    """The follower's memory check, all in MiB.

    before: device memory used with the trainer up; with_control: after the
    control started (its context, workspace, its own weights); with_follower:
    after the follower started too. The control's extra memory less what its
    caching allocator holds (its weights, after empty_cache) is what a job
    needs besides weights; the follower may exceed that by less than half the
    region (it maps the trainer's weights, it must not hold a copy).
    """
    control_extra = with_control - before
    follower_extra = with_follower - with_control
    besides_weights = control_extra - control_reserved
    beyond = follower_extra - besides_weights
    limit = 0.5 * region
    return {
        "control_extra_mib": round(control_extra, 1),
        "follower_extra_mib": round(follower_extra, 1),
        "job_besides_weights_mib": round(besides_weights, 1),
        "follower_beyond_mib": round(beyond, 1),
        "limit_mib": round(limit, 1),
        "ok": beyond < limit,
    }


def names_cause(lines):
    return any(w.lower() in ln.lower() for ln in lines for w in CAUSE_WORDS)


def child_env(args, shim, sock, tandem_class):
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=os.path.abspath(shim),
        TANDEM_SOCKET=sock,
        TANDEM_FOLLOW="on",
        TANDEM_CLASS=tandem_class,
        CUBLAS_WORKSPACE_CONFIG=":4096:8",  # before CUDA starts: deterministic cuBLAS
        CUDA_DEVICE_ORDER="PCI_BUS_ID",  # CUDA's device = NVML's index
        PYTHONDONTWRITEBYTECODE="1",
    )
    # A device the machine already chose (a MIG instance, say) is kept.
    env.setdefault("CUDA_VISIBLE_DEVICES", str(args.gpu))
    env.setdefault("TANDEM_LOG", "warn")
    return env


def run_writer(args, shim, sock, logdir, clock, mode, children):
    argv = [sys.executable, os.path.abspath(__file__), "--child", "writer", "--writer-mode", mode]
    w = Child(f"writer-{mode}", argv, child_env(args, shim, sock, "inference"), logdir, clock)
    children.append(w)
    row = {"mode": mode, "followed": False, "wrote": False}
    try:
        rc = w.wait_exit(180)
        row["exit_code"] = rc
    except Failed as e:
        row["exit_code"], row["error"] = None, str(e)
    while True:
        try:
            ev = w.events.get(timeout=5)
        except queue.Empty:
            break
        if ev is None:
            break
        row["followed"] |= ev.get("event") == "followed"
        row["wrote"] |= ev.get("event") == "wrote"
    lines = w.stderr_lines()
    row["last_stderr_line"] = lines[-1] if lines else ""
    row["cause_lines"] = [ln for ln in lines if names_cause([ln])][:5]
    row["names_cause"] = names_cause(lines)
    # Failed as it must: it mapped the region, then the write stopped it.
    row["failed"] = row["followed"] and not row["wrote"] and row["exit_code"] not in (0, None)
    return row


def run_checks(args, shim, sock, stats_sock, logdir, clock, result):
    checks = result["checks"]
    gpu = args.gpu
    me = [sys.executable, os.path.abspath(__file__), "--child"]
    children = result.setdefault("_children", [])

    def start(role, tandem_class):
        c = Child(role, me + [role], child_env(args, shim, sock, tandem_class), logdir, clock)
        children.append(c)
        return c

    base, source = settled_memory_mib(gpu)
    mem = result["memory"] = {"source": source, "baseline_mib": base}

    trainer = start("trainer", "training")
    t = trainer.wait("ready", 300)
    region_bytes = t["region_bytes"]
    result["region"] = {k: t.get(k) for k in ("code", "shared", "reason", "region_bytes",
                                              "shared_bytes", "weights_bytes")}
    checks["trainer_shared"] = t["code"] == 0 and t["shared"] is True
    checks["trainer_shared_bytes_is_the_region"] = t["shared_bytes"] == region_bytes
    stays = [t["detached"] == []]

    mem["with_trainer_mib"], _ = settled_memory_mib(gpu)
    control = start("control", "inference")
    c = control.wait("ready", 300)
    mem["with_control_mib"], _ = settled_memory_mib(gpu)
    follower = start("follower", "inference")
    f = follower.wait("ready", 300)
    mem["with_follower_mib"], _ = settled_memory_mib(gpu)
    mem["per_process_mib"] = process_memory_mib(gpu)
    mem["control"] = {k: c.get(k) for k in ("own_weights_bytes", "torch_allocated", "torch_reserved")}
    mem["follower"] = {k: f.get(k) for k in ("own_weights_bytes", "torch_allocated",
                                             "torch_reserved", "mapped_bytes", "follow_s")}
    mem.update(judge_memory(mem["with_trainer_mib"], mem["with_control_mib"],
                            mem["with_follower_mib"], c["torch_reserved"] / MiB, region_bytes / MiB))
    checks["follower_holds_no_second_copy"] = mem["ok"]
    checks["follower_mapped_bytes_is_the_region"] = f.get("mapped_bytes") == region_bytes
    stays.append(f.get("detached") == [])
    try:
        result["tandemd_stats_live"] = td.stats(stats_sock)
    except Exception as e:  # noqa: BLE001 - for the record only
        result["tandemd_stats_live"] = {"error": repr(e)}

    stops = result["stops"]
    for k in STOPS:
        trainer.send(cmd="train", until=k)
        te = trainer.wait("eval", 300)
        follower.send(cmd="eval")
        control.send(cmd="eval")
        fe, ce = follower.wait("eval", 120), control.wait("eval", 120)
        row = {"step": te["step"], "loss": te.get("loss"), "trainer": te["sha"],
               "follower": fe["sha"], "control": ce["sha"],
               "identical": fe["sha"] == te["sha"], "control_differs": ce["sha"] != te["sha"]}
        stays += [te["detached"] == [], fe.get("detached") == []]
        stops.append(row)
        print(json.dumps(row), flush=True)
        if k == WRITE_STOP:
            writers = result["writers"]
            for mode in ("kernel", "copy"):
                writers[mode] = run_writer(args, shim, sock, logdir, clock, mode, children)
                print(json.dumps(writers[mode]), flush=True)
            trainer.send(cmd="eval")
            follower.send(cmd="eval")
            ta, fa = trainer.wait("eval", 120), follower.wait("eval", 120)
            row["after_writers"] = {"trainer": ta["sha"], "follower": fa["sha"]}
            checks["writes_changed_nothing"] = ta["sha"] == te["sha"] and fa["sha"] == te["sha"]
            checks["kernel_writer_fails"] = writers["kernel"]["failed"]
            checks["kernel_writer_names_cause"] = writers["kernel"]["names_cause"]
            checks["copy_writer_fails"] = writers["copy"]["failed"]
    checks["outputs_track_training"] = all(r["identical"] for r in stops)
    checks["weights_change_between_stops"] = len({r["trainer"] for r in stops}) == len(STOPS)
    checks["control_differs"] = all(r["control_differs"] for r in stops)

    trainer.send(cmd="exit")
    trainer.wait("bye", 60)
    checks["trainer_exits_cleanly"] = trainer.wait_exit(60) == 0
    follower.send(cmd="eval")
    fz = follower.wait("eval", 120)
    result["frozen"] = {"follower": fz["sha"], "last_trainer": stops[-1]["trainer"],
                        "mapped_bytes": fz.get("mapped_bytes")}
    checks["frozen_after_trainer_exit"] = fz["sha"] == stops[-1]["trainer"]
    stays.append(fz.get("detached") == [])
    checks["parameters_stay_in_the_region"] = all(stays)

    for child in (follower, control):
        child.send(cmd="exit")
    for child in (follower, control):
        child.wait("bye", 60)
        child.wait_exit(60)
    deadline = time.monotonic() + clock.bound(30)
    while True:
        after, _ = gpu_memory_mib(gpu)
        if abs(after - base) <= BASELINE_SLACK_MIB or time.monotonic() > deadline:
            break
        time.sleep(1)
    mem["after_all_exit_mib"] = after
    checks["memory_back_to_baseline"] = abs(after - base) <= BASELINE_SLACK_MIB


def parent_main(args):
    shim = os.path.join(args.bin, "libtandem.so")
    for path in (shim, os.path.join(args.bin, "tandemd")):
        if not os.path.exists(path):
            print(f"follow: {path} missing; build with `cargo build --release -p tandem-shim "
                  "-p tandem-coordinator` and carry both", file=sys.stderr)
            return 2
    clock = Clock(args.time_limit)
    t0 = time.monotonic()
    if fake():
        os.environ[FAKE_DIR_ENV] = tempfile.mkdtemp(prefix="tandem-follow-fake-")
    result = {**ip.device_info(), "region_name": REGION, "checks": {}, "stops": [],
              "writers": {}, "errors": []}
    logdir = tempfile.mkdtemp(prefix="tandem-follow-")
    tandemd, sock, stats_sock = td.start_tandemd(args.bin, logdir)
    try:
        run_checks(args, shim, sock, stats_sock, logdir, clock, result)
    except Failed as e:
        result["errors"].append(str(e))
        print(f"follow: {e}", file=sys.stderr)
    except Exception:  # noqa: BLE001 - a bug here: recorded, and the run fails
        result["errors"].append(traceback.format_exc())
        print(traceback.format_exc(), file=sys.stderr)
    finally:
        for child in result.pop("_children", []):
            child.kill()
        tandemd.terminate()
        try:
            tandemd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tandemd.kill()
        result["wall_s"] = round(time.monotonic() - t0, 1)
        result["logs"] = {}
        for name in sorted(os.listdir(logdir)):
            if name.endswith((".stderr", ".log")):
                with open(os.path.join(logdir, name), errors="replace") as f:
                    result["logs"][name] = f.read()[-4000:]
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "follow.json"), "w") as f:
            json.dump(result, f, indent=2)
        shutil.rmtree(logdir, ignore_errors=True)  # its logs are in follow.json
        if fake():
            shutil.rmtree(os.environ[FAKE_DIR_ENV], ignore_errors=True)
    failed = [k for k, v in result["checks"].items() if v is not True]
    print(json.dumps({"checks": result["checks"], "errors": result["errors"]}, indent=2), flush=True)
    return 0 if result["checks"] and not failed and not result["errors"] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release", help="folder with libtandem.so and tandemd")
    ap.add_argument("--out", default="follow-results", help="folder for follow.json")
    ap.add_argument("--gpu", type=int, default=0,
                    help="GPU index (NVML order) to run on and measure; the jobs run on it "
                    "unless CUDA_VISIBLE_DEVICES is set")
    ap.add_argument("--time-limit", type=float, default=540,
                    help="seconds for the whole run (default 540)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--writer-mode", choices=("kernel", "copy"), default="kernel",
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
