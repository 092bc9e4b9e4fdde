#!/usr/bin/env python3
"""Issue 6: the co-location matrix on a real GPU (inference p99 vs training throughput).

Pairs are INF:TRAIN with
  inference jobs  resnet50_b4     ResNet50 fp16, batch 4, 100 req/s
                  resnet50_b32    ResNet50 fp16, batch 32, 40 req/s
                  bert_b8         BERT-base-sized encoder (random weights), fp16, batch 8,
                                  seq 128, at half load: rate = 0.5 / its alone service
                                  time, measured in the first alone cell and kept
  training jobs   resnet50_train  ResNet50 bf16 autocast, batch 64, SGD, random data on GPU
                  gpt2_train      GPT-2-small-sized causal LM (random weights), bf16
                                  autocast, AdamW, batch 8, seq 512 (halved on OOM)
and modes alone (the baselines), plain (both at once), mps (a private MPS control
daemon), mps_lowprio (training client CUDA_MPS_CLIENT_PRIORITY=1), tandem (tandemd
from --bin on a private socket, default config, both jobs under libtandem.so with
TANDEM_CLASS=inference / training), tandem_mps (tandem over MPS: the same with
[mps] enabled, so tandemd starts the MPS daemon and training joins it at
CUDA_MPS_CLIENT_PRIORITY=1), tandem_spatial (tandem over MPS with scheduler v3's
SM reservation, [scheduler] spatial = "auto": while inference is active,
training's launches leave a quarter of the GPU's TPCs to it, issue 23).

Each job is its own process (`colocation.py worker ...`). Inference: open-loop
Poisson arrivals from a seeded RNG (one thread sleeps until each arrival; the
server loop takes requests in FIFO order); latency = result on the host (.cpu())
minus arrival, so queueing counts. Training: steps/s over the same window. The
first --warmup seconds are excluded; the window is --window seconds. In the alone
cell both processes start, then inference is measured while training waits idle,
then training while inference waits.

Repetitions interleave the modes (rep 1: alone, every mode; rep 2: ...); a cell's
figure is the median over reps, with min-max. p99_ratio = median p99 / median alone
p99; train_fraction = steps/s / median alone steps/s, all from the same pair file.

Usage (on the GPU machine; .carry holds libtandem.so and tandemd built here):
    python3 scripts/bench/colocation.py --pair resnet50_b4:resnet50_train --bin .carry --out "$OUT"
    python3 scripts/bench/colocation.py --pair ... --dry-run       # the plan, no GPU needed
    python3 scripts/bench/colocation.py report --in DIR [DIR ...] --out DIR
A pair writes colocation-<INF>-<TRAIN>.json after every cell. It is resumable:
cells already in that file (in --out or a --resume folder) are skipped, and a
command stops before a cell that would overrun --budget seconds (exit status 3:
run the same command again with --resume pointing at the returned file's folder).
"""

import argparse
import contextlib
import datetime
import gc
import os
import queue
import random
import shutil
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (workers import these too)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
from benchlib import BenchError  # noqa: E402

SCRIPT = os.path.abspath(__file__)

INFERENCE = {
    "resnet50_b4": {"model": "resnet50", "batch": 4, "rate": 100.0,
                    "desc": "ResNet50 fp16 batch 4 at 100 req/s"},
    "resnet50_b32": {"model": "resnet50", "batch": 32, "rate": 40.0,
                     "desc": "ResNet50 fp16 batch 32 at 40 req/s"},
    "bert_b8": {"model": "bert", "batch": 8, "seq": 128, "load": 0.5,
                "desc": "BERT-base encoder fp16 batch 8 seq 128 at half load"},
}
TRAINING = {
    "resnet50_train": {"model": "resnet50", "batch": 64,
                       "desc": "ResNet50 bf16 batch 64, SGD"},
    "gpt2_train": {"model": "gpt2", "batch": 8, "seq": 512,
                   "desc": "GPT-2-small causal LM bf16 batch 8 seq 512, AdamW"},
}
MODES = ["alone", "plain", "mps", "mps_lowprio", "tandem", "tandem_mps", "tandem_spatial"]
MPS_MODES = {"mps", "mps_lowprio", "tandem_mps", "tandem_spatial"}
TANDEM_MODES = {"tandem", "tandem_mps", "tandem_spatial"}
# tandem over MPS: tandemd owns the MPS daemon (its pipe directory beside its
# socket) and tells each job how to join (training at low priority), so the
# benchmark starts no daemon of its own and sets no MPS variable for it.
TANDEM_OVER_MPS = {"tandem_mps", "tandem_spatial"}
TANDEM_MPS_CONFIG = "[mps]\nenabled = true\n"
TANDEM_SPATIAL_CONFIG = TANDEM_MPS_CONFIG + "[scheduler]\nspatial = \"auto\"\n"


def own_mps(mode):
    """Modes for which the benchmark runs its own MPS daemon."""
    return mode in MPS_MODES and mode not in TANDEM_OVER_MPS


def tandemd_config(mode):
    """The tandemd.toml text of a tandem mode (None: built-in defaults)."""
    if mode == "tandem_spatial":
        return TANDEM_SPATIAL_CONFIG
    return TANDEM_MPS_CONFIG if mode in TANDEM_OVER_MPS else None
TARGET_P99_RATIO = 1.10
TARGET_TRAIN_FRACTION = 0.80
# Rough seconds from a worker's start to READY (imports, model, cuDNN autotune);
# the budget rescales estimates by what finished cells took.
STARTUP_S = {"resnet50": 12, "bert": 18, "gpt2": 18}
# Test seam (TANDEM_BENCH_FAKE=1): simulated service and step times, seconds.
FAKE_SERVICE_S = {"resnet50": 0.002, "bert": 0.004}
FAKE_STEP_S = 0.01


# ================================================================ pure parts


def parse_pair(s):
    inf, sep, train = s.partition(":")
    if not sep or inf not in INFERENCE or train not in TRAINING:
        raise argparse.ArgumentTypeError(
            f"{s!r}: a pair is INF:TRAIN with INF one of {', '.join(INFERENCE)} "
            f"and TRAIN one of {', '.join(TRAINING)}")
    return inf, train


def parse_modes(s):
    modes = [m for m in s.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {bad}; modes: {', '.join(MODES)}")
    return ["alone"] + [m for m in MODES[1:] if m in modes]  # alone always: the baseline


def pair_file(inf, train):
    return f"colocation-{inf}-{train}.json"


def cell_order(modes, reps):
    """(rep, mode) in run order: rep-major, the alone baselines first in every
    rep (the first one also measures bert's service time), the other modes
    rotated by one place per rep so no mode always follows the same one."""
    others = [m for m in modes if m != "alone"]
    out = []
    for rep in range(reps):
        k = rep % len(others) if others else 0
        out += [(rep, "alone")] + [(rep, m) for m in others[k:] + others[:k]]
    return out


def done_cells(doc):
    return {(r["rep"], r["mode"]) for r in doc.get("runs", []) if not r.get("error")}


def remaining_cells(doc, modes, reps):
    done = done_cells(doc)
    return [c for c in cell_order(modes, reps) if c not in done]


def run_config(args):
    """What must match for a file to be resumed (reps and modes may grow)."""
    return {"warmup_s": args.warmup, "window_s": args.window, "drain_max_s": args.drain_max,
            "seed": args.seed, "explicit_requests": bool(args.explicit_requests)}


def new_doc(inf, train, config):
    return {"benchmark": "colocation", "pair": f"{inf}:{train}", "inference": inf,
            "training": train, "inference_job": INFERENCE[inf], "training_job": TRAINING[train],
            "config": config, "rate_rps": INFERENCE[inf].get("rate"), "runs": [], "failed": []}


def cell_estimate(mode, inf, train, config):
    """Seconds a cell is expected to take."""
    start = max(STARTUP_S[INFERENCE[inf]["model"]], STARTUP_S[TRAINING[train]["model"]])
    measured = config["warmup_s"] + config["window_s"]
    t = start + measured + 6  # GO delay, drain, process exits
    if mode == "alone":
        t += measured + 1
    if mode in MPS_MODES:
        t += 5
    if mode in TANDEM_MODES:
        t += 2
    return t


def rate_arg(doc, mode):
    """The --rate of the inference worker: fixed, measured earlier, or "auto"
    (only in an alone cell: measured there)."""
    if doc.get("rate_rps"):
        return f"{doc['rate_rps']:.6g}"
    if mode == "alone":
        return "auto"
    return None


def cell_procs(doc, rep, mode, config, bin_dir, cell_dir, rate, python=sys.executable):
    """[(role, argv, env_extra)] of the cell's two workers. env_extra is what
    the mode adds to the cleaned environment (benchlib.clean_env)."""
    inf, train = INFERENCE[doc["inference"]], TRAINING[doc["training"]]
    common = ["--warmup", config["warmup_s"], "--window", config["window_s"]]
    inf_argv = [python, SCRIPT, "worker", "--role", "inference", "--model", inf["model"],
                "--batch", inf["batch"], "--seq", inf.get("seq", 128), "--rate", rate,
                "--load", inf.get("load", 0.5), "--drain-max", config["drain_max_s"],
                "--seed", config["seed"] * 1000 + rep, *common]
    if config.get("explicit_requests"):
        inf_argv.append("--explicit-requests")
    tr_argv = [python, SCRIPT, "worker", "--role", "training", "--model", train["model"],
               "--batch", train["batch"], "--seq", train.get("seq", 512),
               "--seed", config["seed"], *common]
    envs = {"inference": {}, "training": {}}
    if own_mps(mode):
        for e in envs.values():
            e.update(bl.mps_dirs(cell_dir))
    if mode == "mps_lowprio":
        envs["training"]["CUDA_MPS_CLIENT_PRIORITY"] = "1"
    if mode in TANDEM_MODES:
        shim, _, sock = bl.tandemd_paths(bin_dir, os.path.join(cell_dir, "td"))
        for role, e in envs.items():
            e.update({"LD_PRELOAD": shim, "TANDEM_SOCKET": sock, "TANDEM_CLASS": role,
                      "TANDEM_LOG": "warn"})
    return [("inference", inf_argv, envs["inference"]), ("training", tr_argv, envs["training"])]


def describe_cell(doc, rep, mode, config, bin_dir, cell_dir, rate):
    """The dry-run lines of one cell: daemons, processes, phases."""
    lines = []
    if mode in TANDEM_MODES:
        _, tandemd, sock = bl.tandemd_paths(bin_dir, os.path.join(cell_dir, "td"))
        if tandemd_config(mode):
            spatial = ('; [scheduler] spatial = "auto": training leaves SMs to active inference'
                       if mode == "tandem_spatial" else "")
            lines.append(f"  start tandemd: {tandemd} --config <td>/tandemd.toml ([mps] enabled: "
                         f"tandemd starts MPS, training joins at priority 1{spatial}) "
                         f"--socket {sock}")
        else:
            lines.append(f"  start tandemd: {tandemd} --no-config --socket {sock}")
    if own_mps(mode):
        dirs = bl.mps_dirs(cell_dir)
        lines.append(f"  start MPS: {bl.show_cmd([bl.MPS_CONTROL, '-d'], dirs)}")
    for role, argv, extra in cell_procs(doc, rep, mode, config, bin_dir, cell_dir, rate):
        lines.append(f"  start {role}: {bl.show_cmd(argv, extra)}")
    m = config["warmup_s"] + config["window_s"]
    if mode == "alone":
        lines.append(f"  wait READY from both; GO inference, measure {m:g} s alone "
                     f"(+ drain); then GO training, measure {m:g} s alone; STOP")
    else:
        lines.append(f"  wait READY from both; GO both at once; {config['warmup_s']:g} s "
                     f"warm-up + {config['window_s']:g} s window (+ drain); STOP training")
    lines.append("  stop both workers (stdin closed; SIGKILL to the process group after 20 s)")
    if mode in TANDEM_MODES:
        lines.insert(-2, "  GET /trace for both jobs (tandemd's capture of the window) -> "
                         "<out>/traces/<pair>-r<rep>-<mode>-<role>.json")
        lines.append("  read /stats: each client's class, gate waits, scheduler view")
    if own_mps(mode):
        lines.append(f"  stop MPS: echo quit | {bl.MPS_CONTROL} (same pipe directory); "
                     "kill its processes if still there after 15 s")
    if mode in TANDEM_MODES:
        lines.append("  stop tandemd (SIGTERM)")
    return lines


def plan_lines(doc, modes, reps, config, bin_dir, budget, work="<work>"):
    cells = remaining_cells(doc, modes, reps)
    est = [cell_estimate(m, doc["inference"], doc["training"], config) for _, m in cells]
    total = sum(est)
    lines = [f"pair {doc['pair']}: {len(cells)} cell(s) to run "
             f"({len(done_cells(doc))} already done), about {bl.fmt_s(total)}"
             + (f"; more than --budget {budget:g} s: about {int(total // budget) + 1} commands "
                "(rerun with --resume)" if total > budget else "")]
    measuring = False  # an earlier cell of the plan measures bert's rate
    for i, ((rep, mode), e) in enumerate(zip(cells, est), 1):
        rate = None if measuring else rate_arg(doc, mode)
        measuring = measuring or rate == "auto"
        lines.append(f"[{i}/{len(cells)}] rep {rep + 1} {mode} (about {bl.fmt_s(e)})")
        lines += describe_cell(doc, rep, mode, config, bin_dir,
                               os.path.join(work, f"r{rep}-{mode}"),
                               rate or "<0.5/service time, from the first alone cell>")
    return lines


# ---- worker-side pure parts


def poisson_arrivals(rate, duration, seed):
    """Arrival offsets in [0, duration), exponential gaps of mean 1/rate."""
    rng = random.Random(seed)
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append(t)


def inference_summary(records, w0, w1, stop_t):
    """records: (arrival, done or None) offsets in seconds. Requests arriving in
    [w0, w1) count; one never served counts with stop_t - arrival (a lower
    bound) and is reported in `unfinished`."""
    lat, unfinished = [], 0
    for arrival, done in records:
        if not (w0 <= arrival < w1):
            continue
        if done is None:
            unfinished += 1
            done = stop_t
        lat.append((done - arrival) * 1000.0)
    return {
        "requests": len(lat), "unfinished": unfinished,
        "achieved_rps": len(lat) / (w1 - w0) if w1 > w0 else None,
        "p50_ms": bl.percentile(lat, 50), "p90_ms": bl.percentile(lat, 90),
        "p99_ms": bl.percentile(lat, 99), "p999_ms": bl.percentile(lat, 99.9),
        "max_ms": max(lat) if lat else None,
        "mean_ms": sum(lat) / len(lat) if lat else None,
        "latencies_ms": [round(x, 3) for x in lat],
    }


def completed_by(completions, t):
    """Steps completed by time t, interpolated linearly between completion
    times (step i completes at completions[i-1]; 0 steps at time 0)."""
    prev_t, prev_n = 0.0, 0
    for n, c in enumerate(completions, 1):
        if c >= t:
            if c == prev_t:
                return float(n)
            return prev_n + (t - prev_t) / (c - prev_t)
        prev_t, prev_n = c, n
    return float(len(completions))


def steps_per_s(completions, w0, w1):
    """Training throughput over [w0, w1]: interpolated steps completed in the
    window over its length (a stall inside the window counts fully)."""
    if w1 <= w0:
        return None
    return (completed_by(completions, w1) - completed_by(completions, w0)) / (w1 - w0)


# ---- report


def _median(xs):
    s = bl.spread(xs)
    return s["median"] if s else None


def pair_rows(doc):
    """One row per mode that has runs: medians over reps, spread, ratios
    against this file's own alone baselines."""
    runs = [r for r in doc.get("runs", []) if not r.get("error")]
    alone = [r for r in runs if r["mode"] == "alone"]
    alone_p99 = _median([r["inference"].get("p99_ms") for r in alone])
    alone_sps = _median([r["training"].get("steps_per_s") for r in alone])
    rows = []
    for mode in MODES:
        rs = sorted((r for r in runs if r["mode"] == mode), key=lambda r: r["rep"])
        if not rs:
            continue
        p99 = [r["inference"].get("p99_ms") for r in rs]
        p50 = [r["inference"].get("p50_ms") for r in rs]
        sps = [r["training"].get("steps_per_s") for r in rs]
        frac = [s / alone_sps if s is not None and alone_sps else None for s in sps]
        p99s, fracs = bl.spread(p99), bl.spread(frac)
        ratio = p99s["median"] / alone_p99 if p99s and alone_p99 else None
        row = {
            "inference": doc["inference"], "training": doc["training"], "mode": mode,
            "p50_ms": _median(p50), "p99_ms": p99s and p99s["median"], "p99_ratio": ratio,
            "train_fraction": fracs and fracs["median"],
            "p99_min_ms": p99s and p99s["min"], "p99_max_ms": p99s and p99s["max"],
            "p99_ratio_min": p99s["min"] / alone_p99 if p99s and alone_p99 else None,
            "p99_ratio_max": p99s["max"] / alone_p99 if p99s and alone_p99 else None,
            "train_fraction_min": fracs and fracs["min"],
            "train_fraction_max": fracs and fracs["max"],
            "reps": len(rs),
            "device": "; ".join(sorted({str(r.get("device")) for r in rs})),
            "driver": "; ".join(sorted({str(r.get("driver")) for r in rs})),
            "date": "; ".join(sorted({str(r.get("date")) for r in rs})),
            "rate_rps": doc.get("rate_rps"),
            "alone_p99_ms": alone_p99, "alone_steps_per_s": alone_sps,
            "train_steps_per_s": _median(sps),
            "p99_ms_reps": p99, "train_fraction_reps": frac,
            "unfinished_requests": sum(r["inference"].get("unfinished") or 0 for r in rs),
            "training_batch": rs[0]["training"].get("batch"),
        }
        if mode != "alone" and ratio is not None and row["train_fraction"] is not None:
            row["meets_target"] = (ratio <= TARGET_P99_RATIO
                                   and row["train_fraction"] >= TARGET_TRAIN_FRACTION)
        if mode in TANDEM_MODES:
            row["coordinator"] = [{"rep": r["rep"], **(r.get("coordinator") or {})} for r in rs]
            row["classes_granted"] = all(classes_granted(r) for r in rs)
        rows.append(row)
    return rows


def classes_granted(run):
    """Whether tandemd saw both jobs of a tandem run with the class each asked
    for (else the shim ran fail-open, or the class was refused, and the cell
    does not measure tandem's policy)."""
    c = run.get("coordinator") or {}
    return all((c.get(role) or {}).get("class") == role for role in ("inference", "training"))


def merge_docs(docs):
    """pair -> one doc: runs of the same pair and configuration united by
    (rep, mode) (later files win); of different configurations the one with
    more runs is kept, with a warning."""
    by_pair = {}
    for d in docs:
        cur = by_pair.get(d["pair"])
        if cur is None:
            by_pair[d["pair"]] = {**d, "runs": list(d.get("runs", []))}
        elif cur["config"] != d["config"]:
            keep = d if len(d.get("runs", [])) > len(cur["runs"]) else cur
            print(f"report: {d['pair']}: files with different settings; keeping the one "
                  f"with {len(keep['runs'])} runs", file=sys.stderr)
            by_pair[d["pair"]] = {**keep, "runs": list(keep.get("runs", []))}
        else:
            runs = {(r["rep"], r["mode"]): r for r in cur["runs"] if not r.get("error")}
            runs.update({(r["rep"], r["mode"]): r for r in d.get("runs", []) if not r.get("error")})
            cur["runs"] = sorted(runs.values(), key=lambda r: (r["rep"], MODES.index(r["mode"])))
            cur["rate_rps"] = cur.get("rate_rps") or d.get("rate_rps")
    return by_pair


def markdown(rows):
    out = ["# Co-location matrix\n\n"] + [f"- {m}\n" for m in bl.machines(rows)]
    out.append(f"\nTarget: p99 ratio ≤ {TARGET_P99_RATIO:.2f} with train fraction ≥ "
               f"{TARGET_TRAIN_FRACTION:.2f}. Medians over reps; min–max in brackets.\n\n")
    table = []
    for r in rows:
        table.append([
            r["inference"], r["training"], r["mode"], bl.fnum(r["p50_ms"]),
            f"{bl.fnum(r['p99_ms'])} ({bl.frange(r['p99_min_ms'], r['p99_max_ms'])})"
            if r["p99_ms"] is not None else None,
            bl.fnum(r["p99_ratio"]),
            f"{bl.fnum(r['train_fraction'])} "
            f"({bl.frange(r['train_fraction_min'], r['train_fraction_max'])})"
            if r["train_fraction"] is not None else None,
            r["reps"], {True: "yes", False: "no"}.get(r.get("meets_target")),
        ])
    out.append(bl.md_table(["inference", "training", "mode", "p50 ms", "p99 ms (min–max)",
                            "p99 ratio", "train fraction (min–max)", "reps", "target met"],
                           table))
    return "".join(out)


def plot(rows, path, target_train=None):
    """p99 ratio vs training fraction, one panel per pair, one marker per mode,
    min-max bars, the target region dashed (training kept at least
    `target_train`, default TARGET_TRAIN_FRACTION). False when matplotlib is
    absent."""
    if target_train is None:
        target_train = TARGET_TRAIN_FRACTION
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        print("report: matplotlib is not installed; no PNG written", file=sys.stderr)
        return False
    pairs = []
    for r in rows:
        if (r["inference"], r["training"]) not in pairs:
            pairs.append((r["inference"], r["training"]))
    ncol = min(3, max(1, len(pairs)))
    nrow = (len(pairs) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 4.2 * nrow), squeeze=False)
    markers = dict(zip(MODES, "o^sDvPX"))
    for ax, pair in zip([a for row in axes for a in row], pairs):
        pr = [r for r in rows if (r["inference"], r["training"]) == pair
              and r["p99_ratio"] is not None and r["train_fraction"] is not None]
        ys = [1.0] + [r["p99_ratio_max"] or r["p99_ratio"] for r in pr]
        xs = [r["train_fraction_min"] or r["train_fraction"] for r in pr]
        ylo = 0.9 * min([1.0] + [r["p99_ratio_min"] or r["p99_ratio"] for r in pr])
        xhi = 1.05 * max([1.0] + [r["train_fraction_max"] or 1.0 for r in pr])
        ax.add_patch(Rectangle((target_train, ylo), xhi - target_train,
                               TARGET_P99_RATIO - ylo, fill=False, linestyle="--",
                               edgecolor="green", label="target"))
        for r in pr:
            x, y = r["train_fraction"], r["p99_ratio"]
            ax.errorbar(
                [x], [y],
                xerr=[[x - (r["train_fraction_min"] or x)], [(r["train_fraction_max"] or x) - x]],
                yerr=[[y - (r["p99_ratio_min"] or y)], [(r["p99_ratio_max"] or y) - y]],
                marker=markers.get(r["mode"], "o"), linestyle="none", capsize=3,
                label=r["mode"])
        ax.set_xlim(max(0.0, min(xs + [target_train - 0.1]) - 0.05), xhi)
        ax.set_ylim(ylo, max(ys + [TARGET_P99_RATIO]) * 1.08)
        ax.set_title(f"{pair[0]} + {pair[1]}", fontsize=10)
        ax.set_xlabel("training throughput / alone")
        ax.set_ylabel("inference p99 / alone p99")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in [a for row in axes for a in row][len(pairs):]:
        ax.axis("off")
    ms = bl.machines(rows)
    fig.suptitle("co-location: " + (ms[0] if ms else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def report_main(argv):
    ap = argparse.ArgumentParser(prog="colocation.py report",
                                 description="merge colocation-*.json into colocation.{json,md,png}")
    ap.add_argument("--in", dest="inputs", nargs="+", required=True, help="folders or files")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    docs = []
    for p in bl.input_files(a.inputs, "colocation-", "colocation.json"):
        d = bl.read_json(p)
        if d.get("benchmark") == "colocation":
            docs.append(d)
    if not docs:
        print("report: no colocation-*.json found", file=sys.stderr)
        return 2
    rows = []
    for _, d in sorted(merge_docs(docs).items()):
        rows += pair_rows(d)
    os.makedirs(a.out, exist_ok=True)
    bl.write_json(os.path.join(a.out, "colocation.json"), rows)
    with open(os.path.join(a.out, "colocation.md"), "w") as f:
        f.write(markdown(rows))
    plot(rows, os.path.join(a.out, "colocation.png"))
    print(f"report: {len(rows)} rows from {len(docs)} file(s) -> {a.out}")
    return 0


# ================================================================ worker


def _build_inference(model, batch, seq, device="cuda"):
    """A function serving one request: host input -> GPU -> model -> result on
    the host (.cpu() waits for it). `device` other than cuda: tests only."""
    if bl.fake():
        return lambda: time.sleep(FAKE_SERVICE_S[model] * (batch / 4) ** 0.5)
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False  # the same algorithms in every cell
    if model == "resnet50":
        import torchvision

        m = torchvision.models.resnet50().half().to(device).eval()
        x = torch.randn(batch, 3, 224, 224).half()

        def fwd(xd):
            return m(xd)
    elif model == "bert":
        from transformers import BertConfig, BertModel

        cfg = BertConfig()  # bert-base: 12 layers, hidden 768, 12 heads
        m = BertModel(cfg).half().to(device).eval()
        x = torch.randint(0, cfg.vocab_size, (batch, seq))

        def fwd(xd):
            return m(input_ids=xd).last_hidden_state[:, 0]
    else:
        raise SystemExit(f"unknown inference model {model}")
    if device == "cuda":
        x = x.pin_memory()

    def request():
        with torch.inference_mode():
            return fwd(x.to(device, non_blocking=True)).float().cpu()

    return request


def _build_training(model, batch, seq, device="cuda"):
    """(step, batch): step() runs one optimiser step and returns the loss as a
    float (which waits for the step). `device` other than cuda: tests only."""
    if bl.fake():
        return (lambda: time.sleep(FAKE_STEP_S) or 1.0), batch
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False  # the same algorithms in every cell
    while True:
        try:
            step = _training_step(torch, model, batch, seq, device)
            for _ in range(3):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
            return step, batch
        except torch.cuda.OutOfMemoryError:
            if batch == 1:
                raise
        # outside the except block, so its traceback no longer holds the model
        step = None
        gc.collect()
        torch.cuda.empty_cache()
        batch //= 2
        print(f"training: out of memory; trying batch {batch}", file=sys.stderr, flush=True)


def _training_step(torch, model, batch, seq, device="cuda"):
    F = torch.nn.functional
    if model == "resnet50":
        import torchvision

        m = torchvision.models.resnet50().to(device).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        data = torch.randn(batch, 3, 224, 224, device=device)
        target = torch.randint(0, 1000, (batch,), device=device)

        def loss_fn():
            return F.cross_entropy(m(data), target)
    elif model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12)  # GPT-2 small
        m = GPT2LMHeadModel(cfg).to(device).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)

        def loss_fn():
            return m(input_ids=ids, labels=ids).loss
    else:
        raise SystemExit(f"unknown training model {model}")
    device_type = torch.device(device).type

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=torch.bfloat16):
            loss = loss_fn()
        loss.backward()
        opt.step()
        return loss.item()

    step.model = m  # for tests: the parameters a step updates
    return step


class _Control:
    """Worker side of the protocol: GO <wall time>, STOP, EOF (driver gone)."""

    def __init__(self):
        self.go = threading.Event()
        self.stop = threading.Event()  # STOP received
        self.finished = threading.Event()  # RESULT about to be printed
        self.t_go = None
        bl.stdin_commands(self._on_line)

    def _on_line(self, line):
        if line is None:
            if not self.finished.is_set():
                os._exit(3)  # the driver is gone: never outlive it
            return
        if line.startswith("GO "):
            self.t_go = float(line.split()[1])
            self.go.set()
        elif line == "STOP":
            self.stop.set()

    def wait_go(self, timeout):
        if not self.go.wait(timeout):
            raise SystemExit("worker: no GO from the driver")
        # perf_counter value of the wall-clock time t_go: the zero of every offset
        return time.perf_counter() + (self.t_go - time.time())


def _shim_fn(name):
    import ctypes

    try:
        f = getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None
    f.restype = None
    return f


def inference_worker(a, ctl):
    request = _build_inference(a.model, a.batch, a.seq)
    for _ in range(10):
        request()
    times = []
    for _ in range(30):
        t = time.perf_counter()
        request()
        times.append(time.perf_counter() - t)
    service = bl.percentile(times, 50)
    rate = a.load / service if a.rate == "auto" else float(a.rate)
    bl.emit("READY", {"service_ms": service * 1000, "rate": rate, "batch": a.batch,
                      "pid": os.getpid()})
    begin = end = None
    if a.explicit_requests:
        begin, end = _shim_fn("tandem_request_begin"), _shim_fn("tandem_request_end")
    base = ctl.wait_go(a.ready_wait)
    w0, w1 = a.warmup, a.warmup + a.window
    arrivals = poisson_arrivals(rate, w1, a.seed)
    q = queue.Queue()

    def arrive():
        for off in arrivals:
            delay = base + off - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            q.put(off)
        q.put(None)

    threading.Thread(target=arrive, daemon=True).start()
    records, deadline = [], w1 + a.drain_max
    while True:
        off = q.get()
        if off is None:
            break
        if time.perf_counter() - base > deadline:  # overloaded: the rest is unfinished
            records.append((off, None))
            continue
        if begin:
            begin()
        request()
        if end:
            end()
        records.append((off, time.perf_counter() - base))
    stop_t = time.perf_counter() - base
    out = inference_summary(records, w0, w1, stop_t)
    out.update({"rate": rate, "service_ms": service * 1000, "batch": a.batch,
                "arrivals": len(arrivals), "pid": os.getpid()})
    ctl.finished.set()
    bl.emit("RESULT", out)


def training_worker(a, ctl):
    step, batch = _build_training(a.model, a.batch, a.seq)
    t = time.perf_counter()
    for _ in range(3):
        step()
    bl.emit("READY", {"step_ms": (time.perf_counter() - t) / 3 * 1000, "batch": batch,
                      "pid": os.getpid()})
    base = ctl.wait_go(a.ready_wait)
    delay = base - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    completions, loss = [], None
    hard = a.warmup + a.window + a.max_extra
    while not ctl.stop.is_set() and time.perf_counter() - base < hard:
        loss = step()
        completions.append(time.perf_counter() - base)
    w0, w1 = a.warmup, a.warmup + a.window
    inside = [c for c in completions if w0 <= c <= w1]
    ctl.finished.set()
    bl.emit("RESULT", {
        "steps_per_s": steps_per_s(completions, w0, w1), "steps_in_window": len(inside),
        "steps": len(completions), "covered_window": bool(completions) and completions[-1] >= w1,
        "batch": batch, "last_loss": loss, "pid": os.getpid(),
    })


def worker_main(argv):
    ap = argparse.ArgumentParser(prog="colocation.py worker")
    ap.add_argument("--role", choices=["inference", "training"], required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rate", default="auto", help="requests/s, or auto: LOAD / service time")
    ap.add_argument("--load", type=float, default=0.5)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--drain-max", type=float, default=30.0)
    ap.add_argument("--max-extra", type=float, default=120.0,
                    help="training stops by itself this long after the window without STOP")
    ap.add_argument("--ready-wait", type=float, default=900.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--explicit-requests", action="store_true")
    a = ap.parse_args(argv)
    ctl = _Control()
    try:
        (inference_worker if a.role == "inference" else training_worker)(a, ctl)
    except BaseException as e:  # noqa: BLE001 - reported to the driver, then re-raised
        if not isinstance(e, SystemExit) or e.code not in (0, None):
            bl.emit("ERROR", {"error": repr(e)[:2000]})
        raise
    return 0


# ================================================================ driver


def run_cell(doc, rep, mode, args, config, cell_dir, info):
    """Runs one cell; returns its run record (BenchError on failure)."""
    rate = rate_arg(doc, mode)
    if rate is None:
        raise BenchError("bert's rate is not known yet (no alone cell has finished)")
    os.makedirs(cell_dir, exist_ok=True)
    m = config["warmup_s"] + config["window_s"]
    result_timeout = m + config["drain_max_s"] + 60
    rec = {"rep": rep, "mode": mode, "started": datetime.datetime.now().isoformat(timespec="seconds"),
           "date": info["date"], "device": info["device"], "driver": info["driver"]}
    t_start = time.time()
    with contextlib.ExitStack() as stack:
        poller = None
        if mode in TANDEM_MODES:
            td = stack.enter_context(
                bl.tandemd(args.bin, os.path.join(cell_dir, "td"), tandemd_config(mode)))
            poller = stack.enter_context(bl.StatsPoller(td))
        if own_mps(mode):
            stack.enter_context(bl.mps_daemon(cell_dir))
        kids = {}
        for role, argv, extra in cell_procs(doc, rep, mode, config, args.bin, cell_dir, rate):
            kids[role] = bl.Child(role, argv, bl.clean_env(**extra),
                                  os.path.join(cell_dir, f"{role}.log"))
            stack.callback(kids[role].stop)
        inf, tr = kids["inference"], kids["training"]
        ready = {role: k.wait_for("READY", args.ready_timeout) for role, k in kids.items()}
        if mode == "alone":
            inf.send(f"GO {time.time() + 0.5}")
            r_inf = inf.wait_for("RESULT", result_timeout)
            t1 = time.time() + 0.5
            tr.send(f"GO {t1}")
            time.sleep(max(0.0, t1 + m + 0.2 - time.time()))
        else:
            t0 = time.time() + 1.0
            for k in kids.values():
                k.send(f"GO {t0}")
            r_inf = inf.wait_for("RESULT", result_timeout)
        if poller:
            # Both jobs are still live: tandemd's view of each (issue 25's
            # GPU step compares it with torch.profiler's, trace stage).
            rec["captured"] = capture_traces(
                poller.td, {r: k.pid for r, k in kids.items()}, config["window_s"],
                os.path.join(args.out, "traces"),
                f"{doc['inference']}-{doc['training']}-r{rep}-{mode}")
        tr.send("STOP")
        r_tr = tr.wait_for("RESULT", 120)
        rec["exit"] = {role: k.stop(grace=20) for role, k in kids.items()}
        if poller:
            views = poller.client_views([r_inf["pid"], r_tr["pid"]])
            rec["coordinator"] = {"inference": views.get(r_inf["pid"]),
                                  "training": views.get(r_tr["pid"])}
            if poller.error:
                rec["coordinator"]["stats_error"] = poller.error
    rec["inference"] = {**r_inf, "ready": ready["inference"]}
    rec["training"] = {**r_tr, "ready": ready["training"]}
    rec["wall_s"] = round(time.time() - t_start, 1)
    if mode == "alone" and not doc.get("rate_rps"):
        doc["rate_rps"] = r_inf["rate"]
    return rec



def capture_traces(td, pids, window_s, out_dir, prefix):
    """Each live job's trace as tandemd captured it (`GET /trace`, the last
    window), written to out_dir/<prefix>-<role>.json (kept beside the pair's
    results: `scripts/gpu/compare_traces.py` sets them beside the trace
    stage's torch.profiler traces); returns role -> "ok" or why not (a
    missing trace is recorded, never fatal)."""
    out = {}
    snap = td.try_stats() or {}
    ids = {c.get("pid"): c.get("id") for c in snap.get("clients", [])}
    seconds = max(1, min(600, int(window_s)))
    for role, pid in pids.items():
        cid = ids.get(pid)
        if cid is None:
            out[role] = f"no live client with pid {pid} in /stats"
            continue
        try:
            status, body = bl.td.http_get(td.stats_sock, f"/trace?id={cid}&seconds={seconds}")
        except OSError as e:
            out[role] = f"/trace: {e}"
            continue
        if " 200 " not in status + " ":
            out[role] = f"/trace answered {status}: {body.strip()[:200]}"
            continue
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"{prefix}-{role}.json"), "w") as f:
            f.write(body)
        out[role] = "ok"
    return out


def progress_line(i, n, rep, mode, rec, doc, elapsed, left_est):
    inf, tr = rec["inference"], rec["training"]
    alone = [r for r in doc["runs"] if r["mode"] == "alone" and not r.get("error")]
    a_p99 = _median([r["inference"].get("p99_ms") for r in alone])
    a_sps = _median([r["training"].get("steps_per_s") for r in alone])
    ratio = f" (x{inf['p99_ms'] / a_p99:.2f} alone)" if a_p99 and inf.get("p99_ms") else ""
    frac = (f"train {tr['steps_per_s'] / a_sps:.2f} of alone" if a_sps and tr.get("steps_per_s")
            else f"train {tr.get('steps_per_s') or 0:.2f} steps/s")
    p99 = inf.get("p99_ms")
    warn = ("; WARNING: tandemd did not see both jobs with their classes"
            if mode in TANDEM_MODES and not classes_granted(rec) else "")
    return (f"[{i}/{n}] rep {rep + 1} {mode}: p50 {inf.get('p50_ms') or 0:.1f} ms, p99 "
            f"{p99 or 0:.1f} ms{ratio}, {frac}, {inf.get('unfinished', 0)} unfinished; "
            f"{rec['wall_s']:.0f} s (elapsed {bl.fmt_s(elapsed)}, about {bl.fmt_s(left_est)} left)"
            + warn)


def load_doc(args, inf, train, config):
    name = pair_file(inf, train)
    path = None if args.fresh else bl.find_file(name, [args.out] + (args.resume or []))
    if not path:
        return new_doc(inf, train, config), None
    doc = bl.read_json(path)
    if doc.get("config") != config:
        raise SystemExit(f"colocation: {path} was run with {doc.get('config')}, not {config}; "
                         "use the same options, or --fresh to start over")
    return doc, path


def run_pair(inf, train, args, config, info, budget, work):
    """Runs the pair's remaining cells: "complete", "failed" (some cells
    failed; rerunning retries them) or "budget" (stopped before overrunning)."""
    doc, src = load_doc(args, inf, train, config)
    out_path = os.path.join(args.out, pair_file(inf, train))
    cells = remaining_cells(doc, args.modes, args.reps)
    for line in plan_lines(doc, args.modes, args.reps, config, args.bin, args.budget)[:1]:
        print(line + (f" (resuming {src})" if src else ""), flush=True)
    doc.update({k: info[k] for k in ("device", "driver", "date", "torch") if k not in doc})
    bl.write_json(out_path, doc)
    n = len(cells)
    for i, (rep, mode) in enumerate(cells, 1):
        est = cell_estimate(mode, inf, train, config)
        if not budget.fits(est):
            left = n - i + 1
            print(f"stopping before cell {i}/{n} ({mode}, rep {rep + 1}): about "
                  f"{bl.fmt_s(est * budget.scale())} would overrun --budget {args.budget:g} s. "
                  f"{left} cell(s) left: run the same command again with --resume <folder "
                  f"holding {pair_file(inf, train)}>", flush=True)
            return "budget"
        t = time.time()
        try:
            rec = run_cell(doc, rep, mode, args, config, os.path.join(work, f"r{rep}-{mode}"), info)
        except BenchError as e:
            print(f"[{i}/{n}] rep {rep + 1} {mode}: FAILED: {e}", flush=True)
            doc["failed"].append({"rep": rep, "mode": mode, "error": str(e)[:4000],
                                  "at": datetime.datetime.now().isoformat(timespec="seconds")})
            bl.write_json(out_path, doc)
            budget.record(est, time.time() - t)
            continue
        budget.record(est, time.time() - t)
        doc["runs"].append(rec)
        bl.write_json(out_path, doc)
        rest = sum(cell_estimate(m, inf, train, config) for _, m in cells[i:]) * budget.scale()
        print(progress_line(i, n, rep, mode, rec, doc, time.time() - budget.start, rest),
              flush=True)
    for row in pair_rows(doc):
        print(f"  {row['mode']:12s} p99 {bl.fnum(row['p99_ms'])} ms ratio "
              f"{bl.fnum(row['p99_ratio'])} train {bl.fnum(row['train_fraction'])} "
              f"({row['reps']} reps)", flush=True)
    return "failed" if remaining_cells(doc, args.modes, args.reps) else "complete"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Subcommands: `report --in DIR... --out DIR` merges results; "
               "`worker ...` is what the driver starts.")
    ap.add_argument("--pair", type=parse_pair, action="append", required=True,
                    help="INF:TRAIN (repeatable); INF in " + ", ".join(INFERENCE)
                    + "; TRAIN in " + ", ".join(TRAINING))
    ap.add_argument("--modes", type=parse_modes, default=MODES,
                    help="comma-separated, from " + ",".join(MODES[1:]) + " (alone always runs)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds excluded at the start")
    ap.add_argument("--window", type=float, default=20.0, help="measured seconds")
    ap.add_argument("--drain-max", type=float, default=30.0,
                    help="seconds after the window to serve queued requests")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--explicit-requests", action="store_true",
                    help="inference marks requests with tandem_request_begin/end")
    ap.add_argument("--bin", default=".carry", help="folder with libtandem.so and tandemd")
    ap.add_argument("--out", default="colocation-results")
    ap.add_argument("--resume", action="append", help="folder holding an earlier pair file")
    ap.add_argument("--fresh", action="store_true", help="ignore earlier pair files")
    ap.add_argument("--budget", type=float, default=540.0,
                    help="seconds this command may run; stops before a cell that would overrun")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan; start nothing")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    config = run_config(args)
    if args.dry_run:
        if set(args.modes) & TANDEM_MODES and (err := bl.check_bin(args.bin)):
            print(f"note: {err}")
        for inf, train in args.pair:
            doc, src = load_doc(args, inf, train, config)
            if src:
                print(f"(resuming {src})")
            for line in plan_lines(doc, args.modes, args.reps, config, args.bin, args.budget):
                print(line)
        return 0
    if set(args.modes) & TANDEM_MODES and (err := bl.check_bin(args.bin)):
        print(f"colocation: {err}; or leave out the tandem modes (--modes)", file=sys.stderr)
        return 2
    if set(args.modes) & MPS_MODES and not shutil.which(bl.MPS_CONTROL):
        print(f"colocation: {bl.MPS_CONTROL} not found; leave out the MPS modes (--modes)",
              file=sys.stderr)
        return 2
    budget = bl.Budget(args.budget)
    bl.exit_on_signals()
    bl.claim_owner()
    bl.kill_stale()
    os.makedirs(args.out, exist_ok=True)
    info = bl.device_info()
    print(f"device {info['device']}, driver {info['driver']}, torch {info.get('torch')}, "
          f"{info['date']}", flush=True)
    work = bl.work_dir("tb-col-")
    outcomes = []
    try:
        for inf, train in args.pair:
            outcomes.append(run_pair(inf, train, args, config, info, budget, work))
            if outcomes[-1] == "budget":
                return 3
    except KeyboardInterrupt as e:
        print(f"colocation: interrupted ({e}); everything started was stopped; "
              "finished cells are in the pair file", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "failed" in outcomes:
        print("colocation: some cells failed (see \"failed\" in the pair file); "
              "rerunning the command retries them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
