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
  (c) overhead: an empty-kernel launch loop (CuPy RawKernel, launches/s) and a
      ResNet-50 bf16 training step (ms/step), plain and shim processes
      interleaved, median and min-max over the repetitions.

Usage (on the GPU machine; build libtandem.so here and carry it):
    python3 scripts/gpu/interposition.py --shim .carry/libtandem.so --out "$OUT"
Writes interposition.json (rows) and interposition.md (tables) under --out.
Each child process prints one `RESULT <json>` line; nothing else is parsed.
"""

import argparse
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

WORKLOADS = ["eager", "cublas", "compile", "cudagraph", "train", "jax"]
REGION_ITERS = 20


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
    must have seen of this process."""
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


def child_empty_launch(n):
    import cupy as cp

    k = cp.RawKernel(r'extern "C" __global__ void tandem_empty() {}', "tandem_empty")
    for _ in range(1000):
        k((1,), (1,), ())
    cp.cuda.Device().synchronize()
    before = shim_kernels()
    t0 = time.perf_counter()
    for _ in range(n):
        k((1,), (1,), ())
    cp.cuda.Device().synchronize()
    dt = time.perf_counter() - t0
    after = shim_kernels()
    return {
        "launches_per_s": n / dt,
        "shim_kernels": None if before is None else after - before,
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


def child_main(args):
    # Before CUDA initialises: deterministic cuBLAS reductions.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.child in ("eager", "cublas", "compile", "cudagraph", "train"):
        r = child_torch(args.child, args.profile)
    elif args.child == "jax":
        r = child_jax()
    elif args.child == "empty_launch":
        r = child_empty_launch(args.launches)
    elif args.child == "train_step":
        r = child_train_step(args.steps)
    else:
        raise SystemExit(f"unknown child {args.child}")
    r.update(shim_totals())
    print("RESULT " + json.dumps(r), flush=True)


# --------------------------------------------------------------- parent side


def run_child(shim, name, extra=(), use_shim=False, timeout=300, socket=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if use_shim:
        env["LD_PRELOAD"] = os.path.abspath(shim)
        env.setdefault("TANDEM_LOG", "warn")
        if socket:
            env["TANDEM_SOCKET"] = socket
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, *extra]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            r["wall_s"] = round(time.time() - t0, 1)
            return r
    tail = (p.stdout + p.stderr)[-3000:]
    return {"error": f"exit {p.returncode}", "output_tail": tail}


def device_info():
    info = {"date": datetime.date.today().isoformat()}
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


def parent_main(args):
    info = device_info()
    rows = []
    names = args.only.split(",") if args.only else WORKLOADS
    for name in names:
        if name not in WORKLOADS:
            continue
        extra = ["--profile"]
        plain1 = run_child(args.shim, name)
        plain2 = run_child(args.shim, name)
        shim = run_child(args.shim, name, extra, use_shim=True)
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
        print(json.dumps(row), flush=True)

    overhead = []
    if not args.skip_overhead:
        for name, extra, key, reps in (
            ("empty_launch", ["--launches", str(args.launches)], "launches_per_s", args.reps),
            ("train_step", ["--steps", str(args.steps)], "ms_per_step", args.train_reps),
        ):
            plain, shimmed, errors = [], [], []
            for _ in range(reps):  # interleaved: plain, shim, plain, shim, ...
                for use_shim, acc in ((False, plain), (True, shimmed)):
                    r = run_child(args.shim, name, extra, use_shim=use_shim)
                    if "error" in r:
                        errors.append(r)
                    else:
                        acc.append(r[key])
            row = {"benchmark": name, "metric": key, "errors": errors, **info}
            if plain and shimmed:
                row["plain"], row["shim"] = spread(plain), spread(shimmed)
                # Cost as a fraction: slower is positive for both metrics.
                ratio = statistics.median(shimmed) / statistics.median(plain)
                row["slowdown"] = (1 / ratio - 1) if key == "launches_per_s" else (ratio - 1)
            overhead.append(row)
            print(json.dumps(row), flush=True)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "interposition.json"), "w") as f:
        json.dump({"rows": rows, "overhead": overhead, **info}, f, indent=2)
    with open(os.path.join(args.out, "interposition.md"), "w") as f:
        f.write(f"# libtandem.so on {info['device']}, driver {info['driver']}, "
                f"torch {info['torch']}, {info['date']}\n\n")
        f.write("| workload | control identical | shim output identical | shim kernels | CUPTI kernels |\n")
        f.write("| --- | --- | --- | --- | --- |\n")
        for r in rows:
            f.write(f"| {r['workload']} | {r['control_identical']} | {r['outputs_identical']} "
                    f"| {r['shim_kernels']} | {r['cupti_kernels']} |\n")
        f.write("\n| benchmark | plain median (min-max) | shim median (min-max) | slowdown |\n")
        f.write("| --- | --- | --- | --- |\n")
        for r in overhead:
            if "plain" in r:
                p, s = r["plain"], r["shim"]
                f.write(f"| {r['benchmark']} ({r['metric']}) | {p['median']:.4g} "
                        f"({p['min']:.4g}-{p['max']:.4g}) | {s['median']:.4g} "
                        f"({s['min']:.4g}-{s['max']:.4g}) | {100 * r['slowdown']:+.2f}% |\n")
            else:
                f.write(f"| {r['benchmark']} | failed: see json | | |\n")
    bad = [r for r in rows if not r["outputs_identical"] or r.get("counts_equal") is False]
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shim", default="target/release/libtandem.so")
    ap.add_argument("--out", default="interposition-results")
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(WORKLOADS))
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--reps", type=int, default=5, help="empty-launch repetitions per mode")
    ap.add_argument("--train-reps", type=int, default=3, help="train-step repetitions per mode")
    ap.add_argument("--launches", type=int, default=200000)
    ap.add_argument("--steps", type=int, default=30)
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
