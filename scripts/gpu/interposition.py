#!/usr/bin/env python3
"""Issue 3, acceptance 2: libtandem.so on a real GPU, without a coordinator.

For each workload (PyTorch eager, cuBLAS, torch.compile/Triton, CUDA-graph
replay, a deterministic ResNet training step, a JAX jitted training loop):

  (a) outputs: SHA-256 of the result tensors, run plain twice (the control: is
      the workload itself deterministic?) and once under the shim; the shim run
      must equal the plain runs bit for bit;
  (b) completeness: in the shim run, the kernels the shim counted in a measured
      region (tandem_kernels_launched() delta) against the kernels the PyTorch
      profiler (CUPTI) recorded in the same region; graph replays included;
  (c) overhead: an empty-kernel launch loop compiled in C (tests/hosts/
      launch_loop.c: cuLaunchKernel called directly, so the loop costs far
      less than the ~5 us a Python launch costs and the shim's ~0.1 us is
      visible; synchronised every --sync-every launches so the queue never
      fills, the figure is the time inside the launch calls) and a ResNet-50 bf16 training step (ms/step); plain and shim
      processes interleaved (and shim + tandemd when --bin holds tandemd),
      median and min-max over the repetitions, the ratio shim/plain.

Usage (on the GPU machine; build libtandem.so here and carry it):
    python3 scripts/gpu/interposition.py --shim .carry/libtandem.so --out "$OUT"
Writes interposition.json (rows; rewritten after every row, so a run killed
half-way keeps what it measured) and interposition.md (tables) under --out.
Each child process prints one `RESULT <json>` line; nothing else is parsed. A
child that outlives --child-timeout is killed (with anything it started) and
recorded as an error; the run goes on.

Test seam (tests and `prove --dry-run` only, never for numbers):
TANDEM_GPU_FAKE=1 makes the children skip PyTorch/JAX and drive libcuda.so.1
(the fake driver, found through LD_LIBRARY_PATH) through ctypes: each
workload launches a known number of add_u32 kernels, the "profiler" count is
the number launched, and the digest is of the device memory read back. The
launch loop then loads the fake driver's module format.
TANDEM_GPU_FAKE_HANG=<workload> (with the seam) makes that child hang.
"""

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = ["eager", "cublas", "compile", "cudagraph", "train", "jax"]
REGION_ITERS = 20
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCH_LOOP_SRC = os.path.join(ROOT, "tests", "hosts", "launch_loop.c")
FAKE_ENV = "TANDEM_GPU_FAKE"
# Fake seam: kernels per region iteration of each workload (any distinct counts).
FAKE_KERNELS_PER_ITER = {"eager": 6, "cublas": 2, "compile": 3, "cudagraph": 4, "train": 9,
                         "jax": 5}
FAKE_STEP_S = 0.005


def fake():
    return os.environ.get(FAKE_ENV) == "1"


# ---------------------------------------------------------------- child side


def shim_u64(name):
    """The shim's exported counter `name` (e.g. tandem_kernels_launched) when
    libtandem.so is preloaded, else None."""
    import ctypes

    try:
        f = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    f.restype = ctypes.c_uint64
    return int(f())


def shim_kernels():
    return shim_u64("tandem_kernels_launched")


def shim_totals():
    """Process-wide shim counters, read after all CUDA work: what a coordinator
    must have seen of this process. The shim's watcher thread may still push
    the last completion marks' MARK_DONE records after the work is done
    (it polls every 200 us), so the records are read once they stop moving
    (bounded: 1 s)."""
    pushed, deadline = shim_u64("tandem_records_pushed"), time.monotonic() + 1.0
    while pushed is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # unchanged over 10 ms: 50 of the watcher's polls
        again = shim_u64("tandem_records_pushed")
        if again == pushed:
            break
        pushed = again
    return {
        "pid": os.getpid(),
        "shim_kernels_total": shim_u64("tandem_kernels_launched"),
        "shim_records_pushed": shim_u64("tandem_records_pushed"),
        "shim_records_dropped": shim_u64("tandem_records_dropped"),
        "shim_client_id": shim_u64("tandem_client_id"),
    }


def digest(tensors):
    import torch

    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().contiguous().cpu()
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def cupti_kernels(prof):
    """Kernel records of a torch.profiler run (CUDA device events that are not
    memcpy/memset)."""
    import torch

    n = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name.lower()
        if name.startswith("memcpy") or name.startswith("memset"):
            continue
        n += 1
    return n


def torch_workload(name, device="cuda"):
    """Builds workload `name` on `device` (other than cuda: tests only; the
    cudagraph workload needs CUDA) and returns its step closure: step()
    runs one iteration of the measured region and returns tensors."""
    import torch

    torch.manual_seed(0)
    # warn_only: some backward kernels have no deterministic form; the plain-vs-
    # plain control run tells whether a workload is deterministic at all.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    dev = device

    if name == "eager":
        x = torch.randn(4096, 1024, device=dev)
        w = torch.randn(1024, device=dev)

        def step():
            nonlocal x
            y = torch.nn.functional.layer_norm(x * w + 1.0, (1024,))
            x = torch.softmax(y, dim=-1).exp().clamp(max=3.0) + x.mean(0)
            return [x]

        return step

    if name == "cublas":
        a = torch.randn(2048, 2048, device=dev)
        b = torch.randn(2048, 2048, device=dev, dtype=torch.bfloat16)

        def step():
            nonlocal a, b
            a = torch.tanh(a @ a / 2048)
            b = torch.addmm(b, b, b.t() / 2048).tanh()
            return [a, b]

        return step

    if name == "compile":
        w1 = torch.randn(1024, 4096, device=dev) / 32
        w2 = torch.randn(4096, 1024, device=dev) / 64

        @torch.compile
        def mlp(x):
            return torch.nn.functional.layer_norm(
                torch.nn.functional.gelu(x @ w1) @ w2 + x, (1024,)
            )

        x = torch.randn(512, 1024, device=dev)
        mlp(x)  # compile outside the region

        def step():
            nonlocal x
            x = mlp(x)
            return [x]

        return step

    if name == "cudagraph":
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
        ).to(dev)
        static_in = torch.randn(256, 1024, device=dev)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)

        def step():
            g.replay()
            static_in.copy_(torch.tanh(static_out))
            return [static_out]

        return step

    if name == "train":
        import torchvision

        model = torchvision.models.resnet18(num_classes=100).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        data = torch.randn(32, 3, 128, 128, device=dev)
        target = torch.randint(0, 100, (32,), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(torch.device(dev).type, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(data), target)
            loss.backward()
            opt.step()
            return [loss.float()] + [p for p in model.parameters()][:4]

        step()  # warm-up outside the region
        return step

    raise SystemExit(f"unknown torch workload {name}")


def child_fake_driver(name, profile):
    """The test seam's workload: add_u32 kernels on the fake driver through
    ctypes, so the shim (when preloaded) sees real driver calls."""
    import ctypes as C

    cu = C.CDLL("libcuda.so.1")
    sigs = {
        "cuInit": [C.c_uint], "cuDeviceGet": [C.POINTER(C.c_int), C.c_int],
        "cuDevicePrimaryCtxRetain": [C.POINTER(C.c_void_p), C.c_int],
        "cuCtxSetCurrent": [C.c_void_p], "cuCtxSynchronize": [],
        "cuModuleLoadData": [C.POINTER(C.c_void_p), C.c_char_p],
        "cuModuleGetFunction": [C.POINTER(C.c_void_p), C.c_void_p, C.c_char_p],
        "cuMemAlloc_v2": [C.POINTER(C.c_uint64), C.c_size_t],
        "cuMemsetD32_v2": [C.c_uint64, C.c_uint, C.c_size_t],
        "cuMemcpyDtoH_v2": [C.c_void_p, C.c_uint64, C.c_size_t],
        "cuLaunchKernel": [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p, C.c_void_p, C.c_void_p],
    }
    fn = {}
    for k, argtypes in sigs.items():
        f = getattr(cu, k)
        f.argtypes, f.restype = argtypes, C.c_int
        fn[k] = f

    def ck(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    dev, ctx, mod, func, ptr = C.c_int(), C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_uint64()
    n = 256
    ck("cuInit", fn["cuInit"](0))
    ck("cuDeviceGet", fn["cuDeviceGet"](C.byref(dev), 0))
    ck("cuDevicePrimaryCtxRetain", fn["cuDevicePrimaryCtxRetain"](C.byref(ctx), dev))
    ck("cuCtxSetCurrent", fn["cuCtxSetCurrent"](ctx))
    ck("cuModuleLoadData", fn["cuModuleLoadData"](
        C.byref(mod), b"tandem-fake-module v1\nkernel add 0 add_u32\n"))
    ck("cuModuleGetFunction", fn["cuModuleGetFunction"](C.byref(func), mod, b"add"))
    ck("cuMemAlloc_v2", fn["cuMemAlloc_v2"](C.byref(ptr), n * 4))
    ck("cuMemsetD32_v2", fn["cuMemsetD32_v2"](ptr, 1, n))
    before = shim_kernels()
    launched = 0
    for it in range(REGION_ITERS):
        for k in range(FAKE_KERNELS_PER_ITER[name]):
            args = (C.c_uint64(ptr.value), C.c_uint(n), C.c_uint(it * 7 + k + 1))
            params = (C.c_void_p * 3)(*[C.cast(C.pointer(a), C.c_void_p) for a in args])
            ck("cuLaunchKernel", fn["cuLaunchKernel"](func, 1, 1, 1, 1, 1, 1, 0, None,
                                                      C.cast(params, C.c_void_p), None))
            launched += 1
    ck("cuCtxSynchronize", fn["cuCtxSynchronize"]())
    after = shim_kernels()
    buf = (C.c_uint32 * n)()
    ck("cuMemcpyDtoH_v2", fn["cuMemcpyDtoH_v2"](buf, ptr, n * 4))
    return {
        "digest": hashlib.sha256(bytes(buf)).hexdigest(),
        "shim_kernels": None if before is None else after - before,
        "cupti_kernels": launched if profile else None,
    }


def child_torch(name, profile, device="cuda"):
    import torch

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    step = torch_workload(name, device)
    step()
    sync()
    before = shim_kernels()
    prof = None
    if profile:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        prof.__enter__()
    for _ in range(REGION_ITERS):
        out = step()
    sync()
    if prof is not None:
        prof.__exit__(None, None, None)
    after = shim_kernels()
    return {
        "digest": digest(out),
        "shim_kernels": None if before is None else after - before,
        "cupti_kernels": cupti_kernels(prof) if prof is not None else None,
    }


def child_jax():
    os.environ.setdefault("XLA_FLAGS", "--xla_gpu_deterministic_ops=true")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    import numpy as np

    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    params = {
        "w1": jax.random.normal(k1, (512, 1024)) / 23,
        "w2": jax.random.normal(k2, (1024, 10)) / 32,
    }
    x = jax.random.normal(k3, (256, 512))
    y = jax.nn.one_hot(jnp.arange(256) % 10, 10)

    def loss(p):
        logits = jax.nn.gelu(x @ p["w1"]) @ p["w2"]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))

    @jax.jit
    def update(p):
        g = jax.grad(loss)(p)
        return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)

    params = update(params)
    jax.block_until_ready(params)
    before = shim_kernels()
    for _ in range(REGION_ITERS):
        params = update(params)
    jax.block_until_ready(params)
    after = shim_kernels()
    h = hashlib.sha256()
    for k in sorted(params):
        h.update(np.asarray(params[k]).tobytes())
    return {
        "digest": h.hexdigest(),
        "shim_kernels": None if before is None else after - before,
        "cupti_kernels": None,
    }


def child_train_step(steps, device="cuda", batch=64, warmup=10):
    """`device` other than cuda, `batch` and `warmup`: tests only."""
    import torch
    import torchvision

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    target = torch.randint(0, 1000, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return {"ms_per_step": (time.perf_counter() - t0) * 1000 / steps}


def child_fake_train_step(steps):
    time.sleep(FAKE_STEP_S * 3)  # "warm-up"
    t0 = time.perf_counter()
    for _ in range(steps):
        time.sleep(FAKE_STEP_S)
    return {"ms_per_step": (time.perf_counter() - t0) * 1000 / steps}


def child_main(args):
    # Before CUDA initialises: deterministic cuBLAS reductions.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.child == "hang" or (fake() and os.environ.get(FAKE_ENV + "_HANG") == args.child):
        # tests only: a child that outlives any timeout
        print(f"started pid {os.getpid()}", flush=True)
        time.sleep(3600)
    if fake() and args.child in WORKLOADS:
        r = child_fake_driver(args.child, args.profile)
    elif fake() and args.child == "train_step":
        r = child_fake_train_step(args.steps)
    elif args.child in ("eager", "cublas", "compile", "cudagraph", "train"):
        r = child_torch(args.child, args.profile)
    elif args.child == "jax":
        r = child_jax()
    elif args.child == "train_step":
        r = child_train_step(args.steps)
    else:
        raise SystemExit(f"unknown child {args.child}")
    r.update(shim_totals())
    print("RESULT " + json.dumps(r), flush=True)


# --------------------------------------------------------------- parent side


def run_cmd(cmd, env, timeout):
    """Runs `cmd` in its own session; its `RESULT <json>` line as a dict (with
    wall_s), else {"error", "output_tail"}. A process that outlives `timeout`
    is killed with everything it started and reported as an error: a child
    that hangs costs its own row, never the run's results."""
    t0 = time.time()
    try:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as e:
        return {"error": f"could not start {cmd[0]}: {e}", "output_tail": ""}
    error = None
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        error = f"timeout: killed after {timeout:g} s"
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a grandchild in another session holds the pipes
            p.kill()
            out, err = "", ""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)  # anything the child left in its group
    out, err = out or "", err or ""
    if error is None:
        for line in out.splitlines():
            if line.startswith("RESULT "):
                try:
                    r = json.loads(line[len("RESULT "):])
                except ValueError as e:
                    error = f"unparsable RESULT line ({e})"
                    break
                r["wall_s"] = round(time.time() - t0, 1)
                return r
        error = f"exit {p.returncode}"
    return {"error": error, "output_tail": (out + err)[-3000:], "wall_s": round(time.time() - t0, 1)}


def child_env(shim, use_shim, socket=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if use_shim:
        env["LD_PRELOAD"] = os.path.abspath(shim)
        env.setdefault("TANDEM_LOG", "warn")
        if socket:
            env["TANDEM_SOCKET"] = socket
    return env


def run_child(shim, name, extra=(), use_shim=False, timeout=300, socket=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, *extra]
    return run_cmd(cmd, child_env(shim, use_shim, socket), timeout)


def build_launch_loop(work):
    """Compiles tests/hosts/launch_loop.c into `work` (cc, else gcc, else nvcc)
    and, on a GPU machine with nvcc, an empty kernel's PTX for this toolkit.
    Returns {"binary", "image", "compiler", ...} or {"error"}."""
    info = {}
    binary = os.path.join(work, "launch_loop")
    tried = []
    for cc in ("cc", "gcc", "nvcc"):
        if not shutil.which(cc):
            continue
        cmd = [cc, "-O2", "-I", os.path.dirname(LAUNCH_LOOP_SRC), "-o", binary]
        cmd += (["-x", "c"] if cc == "nvcc" else []) + [LAUNCH_LOOP_SRC, "-ldl"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            tried.append(f"{cc}: {e}")
            continue
        if p.returncode == 0:
            info.update(binary=binary, compiler=cc)
            break
        tried.append(f"{cc}: exit {p.returncode}: {p.stderr[-1000:]}")
    else:
        return {"error": "no C compiler built tests/hosts/launch_loop.c: " + "; ".join(tried)}
    info["image"] = "fake" if fake() else "ptx"
    if not fake() and shutil.which("nvcc"):
        cu = os.path.join(work, "empty.cu")
        with open(cu, "w") as f:
            f.write('extern "C" __global__ void tandem_empty() {}\n')
        ptx = os.path.join(work, "empty.ptx")
        try:
            p = subprocess.run(["nvcc", "-ptx", "-o", ptx, cu], capture_output=True, text=True,
                               timeout=120)
            if p.returncode == 0:
                info["image"] = ptx
            else:
                info["nvcc_ptx_error"] = p.stderr[-1000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            info["nvcc_ptx_error"] = str(e)
    return info


def device_info():
    info = {"date": datetime.date.today().isoformat()}
    if fake():
        info.update(device="fake (test seam, no GPU)", driver="fake libcuda.so.1", torch=None)
        return info
    try:
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip().splitlines()[0]
        info["device"], info["driver"] = [s.strip() for s in q.split(",")]
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        info["device"], info["driver"] = "unknown", f"unknown ({e})"
    try:
        import torch

        info["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        info["torch"] = None
    return info


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def write_json(path, obj):
    """Atomic, so a run killed while writing leaves the previous version."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def overhead_row(name, key, modes, runs, info, extra=None):
    """Row of an overhead benchmark: `runs` maps mode -> list of results
    (dicts with `key`, or with "error"). Cost of each mode against plain as a
    fraction, slower positive."""
    row = {"benchmark": name, "metric": key, "errors": [], **(extra or {}), **info}
    vals = {}
    for mode in modes:
        ok = [r[key] for r in runs.get(mode, []) if "error" not in r]
        row["errors"] += [{"mode": mode, **r} for r in runs.get(mode, []) if "error" in r]
        if ok:
            vals[mode] = ok
            row[mode] = spread(ok)
    if "plain" in vals:
        base = statistics.median(vals["plain"])
        for mode in modes[1:]:
            if mode in vals:
                ratio = statistics.median(vals[mode]) / base
                row[f"{mode}_ratio"] = ratio
                # lower is better for ns and ms, higher for launches/s
                row[f"{mode}_slowdown"] = (1 / ratio - 1) if key == "launches_per_s" else ratio - 1
    if "shim_slowdown" in row:
        row["slowdown"] = row["shim_slowdown"]
    return row


def launch_loop_overhead(args, info, tandemd_sock):
    """The compiled empty-kernel loop: plain, shim (no coordinator) and, with a
    tandemd, shim attached to it; processes interleaved per repetition."""
    work = tempfile.mkdtemp(prefix="tandem-loop-")
    try:
        built = build_launch_loop(work)
        if "error" in built:
            return {"benchmark": "launch_loop", "metric": "total_ns_per_launch",
                    "errors": [built], **info}
        cmd = [built["binary"], "--count", str(args.launches), "--rounds", str(args.loop_rounds),
               "--sync-every", str(args.sync_every), "--image", built["image"]]
        modes = ["plain", "shim"] + (["shim_tandemd"] if tandemd_sock else [])
        runs = {m: [] for m in modes}
        no_coordinator = os.path.join(work, "no-tandemd.sock")  # nothing listens there
        for _ in range(args.reps):
            for mode in modes:
                env = child_env(args.shim, mode != "plain",
                                tandemd_sock if mode == "shim_tandemd" else no_coordinator)
                if mode == "shim_tandemd":
                    env.setdefault("TANDEM_CLASS", "training")
                r = run_cmd(cmd, env, args.child_timeout)
                if "error" not in r and mode != "plain":
                    expected = args.launches * args.loop_rounds
                    if r.get("shim_kernels") != expected:
                        r = {"error": f"the shim counted {r.get('shim_kernels')} of {expected} "
                                      "launches (not loaded, or launches missed)", **r}
                runs[mode].append(r)
        extra = {"loop": "compiled C (tests/hosts/launch_loop.c)", "compiler": built["compiler"],
                 "image": "ptx (nvcc)" if built["image"] not in ("ptx", "fake") else built["image"],
                 "launches_per_round": args.launches, "rounds": args.loop_rounds,
                 "sync_every": args.sync_every, "reps": args.reps}
        if "nvcc_ptx_error" in built:
            extra["nvcc_ptx_error"] = built["nvcc_ptx_error"]
        # The time inside cuLaunchKernel (the queue never fills between syncs):
        # what the shim adds per launch. Beside it the whole round, syncs included.
        row = overhead_row("launch_loop", "submit_ns_per_launch", modes, runs, info, extra)
        total = overhead_row("launch_loop", "total_ns_per_launch", modes, runs, {})
        row["total_ns_per_launch"] = {k: v for k, v in total.items()
                                      if k in modes or k.endswith(("_ratio", "_slowdown"))}
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def train_step_overhead(args, info):
    runs = {"plain": [], "shim": []}
    for _ in range(args.train_reps):  # interleaved: plain, shim, plain, shim, ...
        for mode in runs:
            runs[mode].append(run_child(args.shim, "train_step", ["--steps", str(args.steps)],
                                        use_shim=mode == "shim", timeout=args.child_timeout))
    return overhead_row("train_step", "ms_per_step", ["plain", "shim"], runs, info,
                        {"steps": args.steps, "reps": args.train_reps})


def write_md(path, info, rows, overhead):
    with open(path, "w") as f:
        f.write(f"# libtandem.so on {info['device']}, driver {info['driver']}, "
                f"torch {info['torch']}, {info['date']}\n\n")
        f.write("| workload | control identical | shim output identical | shim kernels | CUPTI kernels |\n")
        f.write("| --- | --- | --- | --- | --- |\n")
        for r in rows:
            f.write(f"| {r['workload']} | {r['control_identical']} | {r['outputs_identical']} "
                    f"| {r['shim_kernels']} | {r['cupti_kernels']} |\n")
        f.write("\n| benchmark | mode | median (min-max) | against plain |\n")
        f.write("| --- | --- | --- | --- |\n")
        for r in overhead:
            shown = False
            for mode in ("plain", "shim", "shim_tandemd"):
                if mode in r:
                    m = r[mode]
                    slow = r.get(f"{mode}_slowdown")
                    f.write(f"| {r['benchmark']} ({r['metric']}) | {mode} | {m['median']:.4g} "
                            f"({m['min']:.4g}-{m['max']:.4g}) | "
                            f"{'' if slow is None else f'{100 * slow:+.2f}%'} |\n")
                    shown = True
            if not shown:
                f.write(f"| {r['benchmark']} | | failed: see json | |\n")


def parent_main(args):
    info = device_info()
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "interposition.json")
    rows, overhead = [], []

    def save(complete=False):
        write_json(json_path, {"rows": rows, "overhead": overhead, "complete": complete, **info})

    save()
    names = [] if args.skip_workloads else (args.only.split(",") if args.only else WORKLOADS)
    for name in names:
        if name not in WORKLOADS:
            continue
        extra = ["--profile"]
        t = args.child_timeout
        plain1 = run_child(args.shim, name, timeout=t)
        plain2 = run_child(args.shim, name, timeout=t)
        shim = run_child(args.shim, name, extra, use_shim=True, timeout=t)
        row = {
            "workload": name,
            "plain_digest": plain1.get("digest"),
            "control_identical": plain1.get("digest") is not None
            and plain1.get("digest") == plain2.get("digest"),
            "shim_digest": shim.get("digest"),
            "outputs_identical": plain1.get("digest") is not None
            and plain1.get("digest") == shim.get("digest"),
            "shim_kernels": shim.get("shim_kernels"),
            "cupti_kernels": shim.get("cupti_kernels"),
            "errors": {k: r["error"] + ": " + r["output_tail"]
                       for k, r in (("plain1", plain1), ("plain2", plain2), ("shim", shim))
                       if "error" in r},
            **info,
        }
        if row["cupti_kernels"] is not None and row["shim_kernels"] is not None:
            row["counts_equal"] = row["cupti_kernels"] == row["shim_kernels"]
        rows.append(row)
        save()
        print(json.dumps(row), flush=True)

    if not args.skip_overhead:
        tandemd = None
        sock = None
        if args.bin and os.path.exists(os.path.join(args.bin, "tandemd")):
            import tandemd as td  # noqa: PLC0415 - only when attached mode is asked for

            sock_dir = tempfile.mkdtemp(prefix="tandem-ip-")
            tandemd, sock, _ = td.start_tandemd(args.bin, sock_dir)
        try:
            overhead.append(launch_loop_overhead(args, info, sock))
            save()
            print(json.dumps(overhead[-1]), flush=True)
        finally:
            if tandemd is not None:
                tandemd.terminate()
                try:
                    tandemd.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    tandemd.kill()
                td.keep_log_and_remove(sock_dir, os.path.join(args.out, "tandemd-launch-loop.log"))
        if args.train_reps > 0:
            overhead.append(train_step_overhead(args, info))
            save()
            print(json.dumps(overhead[-1]), flush=True)

    save(complete=True)
    write_md(os.path.join(args.out, "interposition.md"), info, rows, overhead)
    bad = [r for r in rows if not r["outputs_identical"] or r.get("counts_equal") is False]
    bad += [r for r in overhead if r["errors"] or "slowdown" not in r]
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shim", default="target/release/libtandem.so")
    ap.add_argument("--bin", help="folder with tandemd: the launch loop also runs attached to it")
    ap.add_argument("--out", default="interposition-results")
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--skip-workloads", action="store_true", help="overhead benchmarks only")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--reps", type=int, default=5, help="launch-loop processes per mode")
    ap.add_argument("--loop-rounds", type=int, default=5,
                    help="timed rounds in each launch-loop process (its median counts)")
    ap.add_argument("--train-reps", type=int, default=3, help="train-step repetitions per mode")
    ap.add_argument("--launches", type=int, default=100000, help="launches per launch-loop round")
    ap.add_argument("--sync-every", type=int, default=256,
                    help="the launch loop synchronises after this many launches, so the queue "
                    "never fills and pushes back (0: once per round)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--child-timeout", type=float, default=300.0,
                    help="seconds a child may run before it is killed and recorded as an error")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args)
        return 0
    if not os.path.exists(args.shim):
        print(f"interposition: no shim at {args.shim}; build it with "
              "`cargo build --release -p tandem-shim` and pass --shim", file=sys.stderr)
        return 2
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
