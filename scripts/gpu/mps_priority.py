#!/usr/bin/env python3
"""mps_priority: how MPS orders two clients' blocks (issue 22, prove's mps_priority stage)

The GPU-sharing model's MPS rows rest on three rules no GPU has checked
(docs/MODEL.md): a later kernel of the same priority gets only the SMs the
earlier ones leave over (row 4, arrival order); a higher-priority client's
pending blocks go first, strictly, at every SM that frees up (row 5); and
no priority takes back an SM a running block holds (row 2). Tally's A100
pairs, the measurements the model is calibrated on, say priority barely
helps (BERT beside ResNet50: 2.20x under MPS, 2.18x with priority), and
tally-bench started those runs with `CUDA_MPS_CLIENT_PRIORITY=1` for
training and `2` for inference (`python/bench_utils/bench.py`:
`set_priority(1)` and `set_priority(2)`), where NVIDIA's MPS documentation
names 0 (normal) and 1 (below normal). Whether 2 is read as normal or as
below normal decides what those rows measured.

One short experiment answers all of it. Under a private MPS daemon, a `hog`
client keeps the GPU full of spinning blocks (1024 threads each, so two
fill an SM's 2048 thread slots and nothing else fits beside them), while a
`probe` client launches a one-block kernel every few milliseconds and times
launch to completion. The probe's wait over its time alone is what the
rules predict:

    config     hog prio  probe prio  hog blocks       the model predicts
    alone      -         unset       -                the baseline
    equal      unset     unset       50 us x 20 waves up to the hog kernel's rest (row 4)
    lowprio    1         unset       50 us x 20 waves at most one block, 50 us (row 5)
    both_low   1         1           50 us x 20 waves as equal
    tally      1         2           50 us x 20 waves as lowprio if 2 reads as normal,
                                                      as both_low if as below normal
    resident   1         unset       2 ms x 1 wave    up to one block, 2 ms (row 2)

Kernels are PTX (cuModuleLoadData, no compiler) spinning on %globaltimer.
Each config runs its two clients as their own processes:

    mps_priority.py --out DIR [--lib libcuda.so.1] [--seconds 1.5] [--dry-run]

writes DIR/mps_priority.json. --dry-run runs the same orchestration against
the fake driver (tests/fake-driver's module image instead of PTX, and
tests/fake-mps-control on PATH): its figures measure nothing about a GPU.
"""

import argparse
import json
import os
import random
import sys
import time
import ctypes

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))
import benchlib as bl  # noqa: E402  (Child, emit, mps_daemon, clean_env, percentile)
import smmask  # noqa: E402  (Driver: the ctypes driver calls)

PRIORITY_ENV = "CUDA_MPS_CLIENT_PRIORITY"
THREADS = 1024  # two blocks fill an SM's 2048 thread slots (sm_70 to sm_90)
# (hog priority, probe priority, hog shape); None leaves the variable unset.
CONFIGS = {
    "alone": (None, None, None),
    "equal": (None, None, "short"),
    "lowprio": ("1", None, "short"),
    "both_low": ("1", "1", "short"),
    "tally": ("1", "2", "short"),
    "resident": ("1", None, "long"),
}
# (block time ns, waves): short blocks leave many pending behind the running
# ones (what priority reorders); long ones hold their SMs (what it cannot).
SHAPES = {"short": (50_000, 20), "long": (2_000_000, 1)}
MAX_SAMPLES = 400
START_TIMEOUT_S = 30.0

PTX = rb"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  .reg .pred %p<2>;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [ns];
  mov.u64 %rd2, %globaltimer;
LOOP:
  mov.u64 %rd3, %globaltimer;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.s64 %p1, %rd4, %rd1;
  @%p1 bra LOOP;
  ret;
}
"""
# The fake driver runs no PTX: a module image of its own, with the short
# hog kernel's, the long one's and the probe's durations.
FAKE_IMAGE = (b"tandem-fake-module v1\nkernel spin_short 1000000 noop\n"
              b"kernel spin_long 2000000 noop\nkernel spin 20000 noop\n")


# ------------------------------------------------------------------ clients


class Spinner:
    """The spin kernel in the current context, launched on the legacy stream."""

    def __init__(self, drv, dry, fake_name="spin"):
        self.drv = drv
        module = ctypes.c_void_p()
        image = FAKE_IMAGE if dry else PTX
        drv.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image + b"\0"))
        self.func = ctypes.c_void_p()
        name = fake_name.encode() if dry else b"spin"
        drv.call("cuModuleGetFunction", ctypes.byref(self.func), module, name)

    def launch(self, blocks, ns):
        arg = ctypes.c_uint64(ns)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        self.drv.call("cuLaunchKernel", self.func, blocks, 1, 1, THREADS, 1, 1, 0, None,
                      params, None)


def client_hog(drv, info, shape, dry):
    """Keeps two hog kernels queued until stdin closes; READY after the first
    completes, RESULT with the kernels it ran and their rate."""
    block_ns, waves = SHAPES[shape]
    blocks = 2 * info["sms"] * waves
    k = Spinner(drv, dry, f"spin_{shape}")
    stop = []
    bl.stdin_commands(lambda line: stop.append(1) if line is None or line == "stop" else None)
    destroy = "cuEventDestroy_v2" if drv.has("cuEventDestroy_v2") else "cuEventDestroy"
    events = []
    done, t0 = 0, time.monotonic()
    while not stop:
        k.launch(blocks, block_ns)
        ev = ctypes.c_void_p()
        drv.call("cuEventCreate", ctypes.byref(ev), 0)
        drv.call("cuEventRecord", ev, None)
        events.append(ev)
        if len(events) > 2:
            old = events.pop(0)
            drv.call("cuEventSynchronize", old)
            drv.call(destroy, old)
            done += 1
            if done == 1:
                t0 = time.monotonic()
                bl.emit("READY", {"blocks": blocks, "block_ns": block_ns})
    drv.call("cuCtxSynchronize")
    secs = time.monotonic() - t0
    bl.emit("RESULT", {"kernels": done, "seconds": round(secs, 3),
                       "kernels_per_s": round(done / secs, 1) if secs > 0 else None})


def client_probe(drv, info, seconds, dry):
    """One-block spin-0 launches, each timed launch to completion, a random
    1-3 ms apart, for `seconds` or MAX_SAMPLES."""
    k = Spinner(drv, dry)
    k.launch(1, 0)  # the module's first launch pays its own costs
    drv.call("cuCtxSynchronize")
    rng, lat = random.Random(1), []
    end = time.monotonic() + seconds
    while time.monotonic() < end and len(lat) < MAX_SAMPLES:
        time.sleep(rng.uniform(0.001, 0.003))
        t = time.perf_counter_ns()
        k.launch(1, 0)
        drv.call("cuCtxSynchronize")
        lat.append((time.perf_counter_ns() - t) / 1e3)
    bl.emit("RESULT", {"latency_us": [round(x, 1) for x in lat]})


def child_main(a):
    try:
        drv = smmask.Driver(a.lib)
        info = drv.init()
        drv.primary_context()
        if a.child == "hog":
            client_hog(drv, info, a.shape, a.dry_run)
        else:
            client_probe(drv, info, a.seconds, a.dry_run)
        return 0
    except (OSError, smmask.CudaError) as e:
        bl.emit("ERROR", {"error": f"{type(e).__name__}: {e}"})
        return 1


# ------------------------------------------------------------------ driver


def run_config(name, mps_env, a):
    """One config's clients: the hog first (until READY), then the probe.
    Returns {probe latencies, hog rate, environments} or {error}."""
    hog_prio, probe_prio, shape = CONFIGS[name]
    me = [sys.executable, os.path.abspath(__file__), "--lib", a.lib, "--out", a.out]
    me += ["--dry-run"] if a.dry_run else []

    def env(prio):
        extra = dict(mps_env, **({PRIORITY_ENV: prio} if prio is not None else {}))
        return bl.clean_env(**extra)

    out = {"hog_priority": hog_prio, "probe_priority": probe_prio, "shape": shape}
    hog = None
    try:
        if shape:
            hog = bl.Child(f"{name}-hog", me + ["--child", "hog", "--shape", shape],
                           env(hog_prio), os.path.join(a.out, f"{name}-hog.log"))
            out["hog"] = hog.wait_for("READY", START_TIMEOUT_S)
        probe = bl.Child(f"{name}-probe", me + ["--child", "probe", "--seconds", str(a.seconds)],
                         env(probe_prio), os.path.join(a.out, f"{name}-probe.log"))
        try:
            out["latency_us"] = probe.wait_for("RESULT", START_TIMEOUT_S + a.seconds)[
                "latency_us"]
        finally:
            probe.stop()
        if hog:
            hog.send("stop")
            out["hog"].update(hog.wait_for("RESULT", 15.0))
    except bl.BenchError as e:
        out["error"] = str(e)
    finally:
        if hog:
            hog.stop()
    return out


def waits(latencies, base):
    """The probe's waits over its median time alone, in us: p50, p90, p99, max."""
    w = [max(0.0, x - base) for x in latencies]
    return {"n": len(w), **{k: round(bl.percentile(w, q), 1) for k, q in
                            (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))}}


def summarise(runs):
    """What the configs say of the model's rules (docs/MODEL.md rows 2, 4
    and 5). Each finding is None when a config it needs did not run."""
    alone = runs.get("alone", {}).get("latency_us")
    if not alone:
        return {"waits": {}, "findings": {}, "headline": ["no probe timings alone"]}
    base = bl.percentile(alone, 50)
    w = {n: waits(r["latency_us"], base) for n, r in runs.items()
         if r.get("latency_us") and n != "alone"}
    short_us = SHAPES["short"][0] / 1e3
    long_us = SHAPES["long"][0] / 1e3
    jitter = bl.percentile(alone, 99) - base
    f = {"alone_p50_us": round(base, 1), "alone_jitter_us": round(jitter, 1)}
    if "equal" in w and "lowprio" in w:
        eq, lo = w["equal"]["p99"], w["lowprio"]["p99"]
        f["priority_p99_gain"] = round(eq / lo, 2) if lo > 0 else None
        # Strict (row 5): the probe waits for one short block at most (two
        # for the block's own spread), beyond its own jitter alone.
        f["strict"] = lo <= 2 * short_us + jitter
    if "tally" in w and "lowprio" in w and "both_low" in w:
        t, lo, both = (w[n]["p50"] for n in ("tally", "lowprio", "both_low"))
        if abs(both - lo) < max(short_us, 0.25 * max(both, lo)):
            f["priority_2_reads_as"] = "indistinguishable: priority 1 against unset moved little"
        else:
            f["priority_2_reads_as"] = ("normal (0)" if abs(t - lo) < abs(t - both)
                                        else "below normal (1)")
    if "resident" in w:
        # Row 2: a running block keeps its SM; the probe waits up to one.
        f["resident_p99_over_block"] = round(w["resident"]["p99"] / long_us, 2)
    head = ["probe wait p50/p99 us (alone p50 %.0f us): " % base + ", ".join(
        f"{n} {v['p50']:.0f}/{v['p99']:.0f}" for n, v in w.items())]
    if "priority_p99_gain" in f:
        head.append(f"priority 1 on the hog cuts the probe's p99 wait {f['priority_p99_gain']}x; "
                    f"strict (<= 2 blocks of {short_us:.0f} us): {f['strict']}")
    if "priority_2_reads_as" in f:
        head.append(f"CUDA_MPS_CLIENT_PRIORITY=2 (tally-bench's) reads as {f['priority_2_reads_as']}")
    if "resident_p99_over_block" in f:
        head.append(f"behind {long_us:.0f} us blocks: p99 wait {f['resident_p99_over_block']} "
                    "blocks")
    return {"waits": w, "findings": f, "headline": head}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lib", default="libcuda.so.1")
    ap.add_argument("--seconds", type=float, default=1.5, help="each probe's sampling time")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--child", choices=("hog", "probe"), help=argparse.SUPPRESS)
    ap.add_argument("--shape", choices=sorted(SHAPES), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child_main(a)
    names = [n for n in a.configs.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")
    os.makedirs(a.out, exist_ok=True)
    bl.exit_on_signals()
    bl.claim_owner()
    doc = {"dry_run": a.dry_run, "configs": {n: CONFIGS[n] for n in names},
           "shapes": SHAPES, "threads": THREADS, "runs": {}, "problems": []}
    path = os.path.join(a.out, "mps_priority.json")
    work = bl.work_dir("tprio-")
    try:
        with bl.mps_daemon(work) as mps_env:
            for n in names:
                doc["runs"][n] = r = run_config(n, mps_env, a)
                if r.get("error"):
                    doc["problems"].append(f"{n}: {r['error']}")
                bl.write_json(path, doc)
    except bl.BenchError as e:
        doc["problems"].append(f"MPS: {e}")
    doc.update(summarise(doc["runs"]))
    bl.write_json(path, doc)
    for line in doc["headline"]:
        print(line, flush=True)
    return 1 if doc["problems"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
