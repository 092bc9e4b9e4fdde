#!/usr/bin/env python3
"""Issue 5: weight deduplication on a real GPU (N replicas of one model).

A cell is one model x loader x replica count (or an adversarial mode). It runs
two passes, each with its own tandemd (from --bin, private socket, built-in
defaults) and every replica under libtandem.so (TANDEM_CLASS=inference):

  unshared  the replicas without sharing (TANDEM_SHARE_WEIGHTS=off): the
            memory baseline and the reference digest;
  shared    the same replicas with TANDEM_SHARE_WEIGHTS=on.

Models: resnet50 (torchvision, fp16) and gpt_1b3 (GPT-2-style causal LM,
n_layer 24, n_embd 2048, n_head 16: ~1.31B parameters, fp16), random weights
from a fixed seed, saved once (by a `prepare` child) as model.safetensors and
model.pt under --weights-dir. Loaders:
  to_cuda      safetensors.torch.load_file on the CPU, load_state_dict, .to('cuda')
  safetensors  safetensors.torch.load_file(device='cuda'), load_state_dict(assign=True)
               into a model built on the meta device
  torch_load   torch.load(model.pt, map_location='cuda'), load_state_dict (a device-
               to-device copy) into a model allocated on the GPU (to_empty)
Each replica loads, runs one warm-up request, says LOADED and idles; once device
memory settled (no new minimum for --settle-quiet s, at most --settle-max s
after the last replica loaded) every replica serves --requests deterministic
requests (batch 1-4 from the seed) and reports the sha256 of all output bytes in
order. NVML's used memory is sampled every 100 ms from before the start until
after the exit (also after tandemd stopped).

Adversarial modes (3 replicas; the reference digest comes from 1 unshared
replica): after merging, replica 0 overwrites every weight in place, either from
the host (param.data.copy_(host tensor): a memcpy, expected to continue on a
private copy) or with a kernel (param.data.mul_(2): expected to stop with
tandem's one-line message naming TANDEM_SHARE_WEIGHTS=off); then all that still
run serve; the others' digests must equal the reference.

Usage (on the GPU machine; .carry holds libtandem.so and tandemd built here):
    python3 scripts/bench/dedup.py --model resnet50 --loader safetensors --replicas 2 --bin .carry --out "$OUT"
    python3 scripts/bench/dedup.py --model gpt_1b3 --loader to_cuda --mode adversarial_kernel --bin .carry --out "$OUT"
    python3 scripts/bench/dedup.py ... --dry-run           # the plan, no GPU needed
    python3 scripts/bench/dedup.py report --in DIR [DIR ...] --out DIR
A cell writes dedup-<model>-<loader>-<r2|r4|adversarial_...>.json; a cell whose
file is already in --out or a --resume folder is skipped (--fresh reruns it).
"""

import argparse
import contextlib
import datetime
import hashlib
import os
import queue
import shutil
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (workers import these too)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
from benchlib import BenchError  # noqa: E402

SCRIPT = os.path.abspath(__file__)
MODELS = {
    "resnet50": {"desc": "ResNet50 fp16 (torchvision), random weights", "startup_s": 15,
                 "load_s": 5, "serve_s": 10},
    "gpt_1b3": {"desc": "GPT-2-style LM, 24 layers, n_embd 2048, 16 heads (~1.3B), fp16, "
                        "random weights", "seq": 32, "startup_s": 25, "load_s": 20, "serve_s": 40},
}
LOADERS = ["to_cuda", "safetensors", "torch_load"]
MODES = ["shared", "adversarial_memcpy", "adversarial_kernel"]
ADVERSARIAL_REPLICAS = 3
REMEDY = "TANDEM_SHARE_WEIGHTS=off"
# Test seam: simulated sizes.
FAKE_WEIGHT_BYTES = 1 << 30
FAKE_CONTEXT_BYTES = 300 * bl.MIB
FAKE_BASE_BYTES = 500 * bl.MIB


# ================================================================ pure parts


def cell_name(model, loader, replicas, mode):
    what = f"r{replicas}" if mode == "shared" else mode
    return f"dedup-{model}-{loader}-{what}"


def cell_passes(replicas, mode):
    """[(name, replicas, share, write)] in run order."""
    if mode == "shared":
        return [("unshared", replicas, False, None), ("shared", replicas, True, None)]
    write = mode.split("_", 1)[1]
    return [("unshared", 1, False, None), ("shared", ADVERSARIAL_REPLICAS, True, write)]


def replica_cmd(model, loader, weights_dir, index, requests, seed, python=sys.executable):
    return [python, SCRIPT, "replica", "--model", model, "--loader", loader,
            "--dir", weights_dir, "--index", index, "--requests", requests, "--seed", seed]


def replica_env(share, bin_dir, sock):
    env = {"TANDEM_SHARE_WEIGHTS": "on" if share else "off",
           "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    if not bl.fake():
        shim, _, _ = bl.tandemd_paths(bin_dir, "")
        env.update({"LD_PRELOAD": shim, "TANDEM_SOCKET": sock, "TANDEM_CLASS": "inference",
                    "TANDEM_LOG": "warn"})
    return env


def cell_estimate(model, replicas, mode, settle_max, prepared):
    m = MODELS[model]
    t = 0 if prepared else 90
    for _, n, _, write in cell_passes(replicas, mode):
        t += 5 + m["startup_s"] + m["load_s"] * (1 + n / 4) + min(settle_max, 15)
        t += m["serve_s"] * n / 2 + 10 + (30 if write else 0)
    return t


def parse_list(kind, choices=None):
    def parse(s):
        items = [x for x in s.split(",") if x]
        try:
            items = [kind(x) for x in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r}: not a comma-separated list") from None
        bad = [x for x in items if choices and x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{s!r}: choose from {', '.join(map(str, choices or []))}")
        return items
    return parse


def cells(loaders, replicas, modes):
    """(loader, replicas, mode) of every cell asked for, in run order
    (adversarial modes always use ADVERSARIAL_REPLICAS)."""
    out = []
    for mode in modes:
        for loader in loaders:
            for n in (replicas if mode == "shared" else [ADVERSARIAL_REPLICAS]):
                if (loader, n, mode) not in out:
                    out.append((loader, n, mode))
    return out


def plan_lines(a, cell, weights_dir, prepared, work="<work>"):
    loader, replicas, mode = cell
    name = cell_name(a.model, loader, replicas, mode)
    est = cell_estimate(a.model, replicas, mode, a.settle_max, prepared)
    lines = [f"{name}: {MODELS[a.model]['desc']}, loader {loader}, about {bl.fmt_s(est)}"]
    if not prepared:
        lines.append(f"  prepare weights once: {bl.show_cmd(prepare_cmd(a.model, weights_dir, a.seed), {})}")
    for pname, n, share, write in cell_passes(replicas, mode):
        pdir = os.path.join(work, pname)
        _, tandemd, sock = bl.tandemd_paths(a.bin, os.path.join(pdir, "td"))
        lines.append(f"  pass {pname}: {n} replica(s), TANDEM_SHARE_WEIGHTS={'on' if share else 'off'}")
        lines.append(f"    sample NVML used memory every 100 ms from here; baseline = median of "
                     f"{a.level_s:g} s")
        lines.append(f"    start tandemd: {tandemd} --no-config --socket {sock}")
        for i in range(n):
            argv = replica_cmd(a.model, loader, weights_dir, i, a.requests, a.seed)
            lines.append(f"    start replica {i}: {bl.show_cmd(argv, replica_env(share, a.bin, sock))}")
        lines.append(f"    wait LOADED from all; wait until memory settles (at least "
                     f"{settle_min(a, share):g} s, then no new minimum for {a.settle_quiet:g} s; "
                     f"at most {a.settle_max:g} s); read /stats dedup*")
        if write:
            how = ("param.data.copy_(host tensor): expect it to continue on a private copy"
                   if write == "memcpy" else
                   f"param.data.mul_(2): expect it to stop naming {REMEDY}")
            lines.append(f"    replica 0 overwrites its weights ({how})")
        lines.append(f"    SERVE to all: {a.requests} requests each, digest of the outputs")
        lines.append("    wait for the exits; memory back at baseline? (up to 15 s); read /stats; "
                     "stop tandemd; memory again")
    return lines


def settled(samples, t_from, now, quiet, tol, at_least=0.0):
    """True once at_least s have passed since t_from (merging may begin only
    after the content looked stable for a while) and the last `quiet` s brought
    no minimum more than tol below the one before them."""
    if now - t_from < max(quiet, at_least):
        return False
    before = [u for t, u in samples if t_from <= t < now - quiet]
    recent = [u for t, u in samples if now - quiet <= t <= now]
    if not before or not recent:
        return False
    return min(recent) >= min(before) - tol


def settle_min(a, share):
    """Seconds to watch memory after loading before it may count as settled:
    --settle-min with sharing (the merge has to happen), else just past --settle-quiet."""
    return a.settle_min if share else a.settle_quiet + 0.5


def settle_summary(samples, t_from, t_to, tol):
    """Memory from t_from (all replicas loaded) to t_to (settled): at the start,
    its minimum, when the minimum was first reached (within tol), and the level
    (median of the last second)."""
    w = [(t, u) for t, u in samples if t_from <= t <= t_to]
    if not w:
        return None
    low = min(u for _, u in w)
    t_low = next(t for t, u in w if u <= low + tol)
    tail = [u for t, u in w if t >= t_to - 1.0] or [w[-1][1]]
    return {"start_bytes": w[0][1], "min_bytes": low, "level_bytes": bl.spread(tail)["median"],
            "seconds_to_min": round(t_low - t_from, 2), "drop_bytes": w[0][1] - low}


def level(samples, t0, t1):
    us = [u for t, u in samples if t0 <= t <= t1]
    return bl.spread(us)["median"] if us else None


def writer_message(stderr_text):
    """The line naming the remedy, else the last non-empty line."""
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    for ln in lines:
        if REMEDY in ln:
            return ln[:500]
    return lines[-1][:500] if lines else ""


def latency_fields(view, path=""):
    """{dotted path: value} of every key naming a latency in a dedup view
    (tandemd's merge latency, whatever its field is called)."""
    out = {}
    items = view.items() if isinstance(view, dict) else enumerate(view) if isinstance(view, list) else ()
    for k, v in items:
        p = f"{path}.{k}" if path else str(k)
        if isinstance(k, str) and "latency" in k.lower():
            out[p] = v
        elif isinstance(v, (dict, list)):
            out.update(latency_fields(v, p))
    return out


def dedup_row(doc):
    """The row of one cell file (see the module docstring for the fields)."""
    un, sh = doc["passes"].get("unshared"), doc["passes"].get("shared")
    w, n = doc["weight_bytes"], doc["replicas"]
    ref = (un or {}).get("digests") or []
    ref = [d for d in ref if d]
    row = {"model": doc["model"], "loader": doc["loader"], "mode": doc["mode"],
           "replicas": n, "weight_bytes": w, "device": doc.get("device"),
           "driver": doc.get("driver"), "date": doc.get("date")}
    reference = ref[0] if ref and len(set(ref)) == 1 else None
    row["unshared_consistent"] = bool(ref) and len(set(ref)) == 1 and len(ref) == un["replicas"]

    def above(p, key):
        v = (p or {}).get("settle", {}) or {}
        return v.get(key) - p["baseline_bytes"] if v.get(key) is not None else None

    row["bytes_unshared"] = above(un, "level_bytes")
    row["bytes_used"] = above(sh, "level_bytes")
    row["bytes_used_min"] = above(sh, "min_bytes")
    row["bytes_at_loaded"] = above(sh, "start_bytes")
    row["merge_seconds"] = ((sh or {}).get("settle") or {}).get("seconds_to_min")
    row["memory_after_exit_bytes"] = (sh or {}).get("after_exit_bytes")
    row["memory_after_tandemd_stop_bytes"] = (sh or {}).get("after_tandemd_stop_bytes")
    row["memory_after_exit_unshared_bytes"] = (un or {}).get("after_exit_bytes")
    row["memory_back_at_baseline"] = (row["memory_after_exit_bytes"] is not None
                                      and abs(row["memory_after_exit_bytes"]) <= doc["tol_after_bytes"])
    row["coordinator_dedup"] = (sh or {}).get("dedup_after_merge")
    row["coordinator_dedup_after_exit"] = (sh or {}).get("dedup_after_exit")
    row["tandemd_merge_latency"] = latency_fields(row["coordinator_dedup"])
    digests = (sh or {}).get("digests") or []
    if doc["mode"] == "shared":
        ok = row["bytes_unshared"] is not None and row["bytes_used"] is not None
        row["saved_fraction"] = ((row["bytes_unshared"] - row["bytes_used"]) / ((n - 1) * w)
                                 if ok and n > 1 and w else None)
        row["total_saving"] = (1 - row["bytes_used"] / row["bytes_unshared"]
                               if ok and row["bytes_unshared"] else None)
        row["outputs_identical"] = (reference is not None and len(digests) == n
                                    and all(d == reference for d in digests))
    else:
        wr = sh.get("writer") or {}
        row["writer_exit"] = wr.get("exit")
        row["writer_message"] = wr.get("message")
        row["writer_continued"] = wr.get("continued")
        row["bytes_after_write"] = wr.get("bytes_after_write")
        others = digests[1:]
        row["others_identical"] = (reference is not None and len(others) == len(digests) - 1
                                   and len(others) >= 1 and all(d == reference for d in others))
        row["writer_digest_changed"] = (digests[0] != reference) if digests and digests[0] else None
        if doc["mode"] == "adversarial_memcpy":
            row["writer_as_expected"] = wr.get("exit") == 0 and bool(wr.get("continued"))
        else:
            row["writer_as_expected"] = (wr.get("exit") not in (0, None)
                                         and REMEDY in (wr.get("message") or ""))
    row["errors"] = [e for p in (un, sh) if p for e in p.get("errors", [])]
    return row


def markdown(rows):
    out = ["# Weight deduplication\n\n"] + [f"- {m}\n" for m in bl.machines(rows)]
    shared = [r for r in rows if r["mode"] == "shared"]
    if shared:
        out.append("\nTarget: saved_fraction ≥ 0.90 within 10 s of loading, outputs identical.\n\n")
        out.append(bl.md_table(
            ["model", "loader", "replicas", "weight MiB", "unshared MiB", "used MiB",
             "saved fraction", "total saving", "merge s", "identical", "after exit MiB"],
            [[r["model"], r["loader"], r["replicas"], mib(r["weight_bytes"]),
              mib(r["bytes_unshared"]), mib(r["bytes_used"]), bl.fnum(r["saved_fraction"]),
              bl.fnum(r["total_saving"]), r["merge_seconds"], r["outputs_identical"],
              mib(r["memory_after_exit_bytes"])] for r in shared]))
    adv = [r for r in rows if r["mode"] != "shared"]
    if adv:
        out.append("\n")
        out.append(bl.md_table(
            ["model", "loader", "mode", "writer exit", "writer message", "as expected",
             "others identical", "after exit MiB"],
            [[r["model"], r["loader"], r["mode"], r["writer_exit"],
              (r["writer_message"] or "").replace("|", "/")[:160], r["writer_as_expected"],
              r["others_identical"], mib(r["memory_after_exit_bytes"])] for r in adv]))
    return "".join(out)


def mib(b):
    return None if b is None else f"{b / bl.MIB:.0f}"


def report_main(argv):
    ap = argparse.ArgumentParser(prog="dedup.py report",
                                 description="merge dedup-*.json into dedup.json and dedup.md")
    ap.add_argument("--in", dest="inputs", nargs="+", required=True, help="folders or files")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    cells = {}
    for p in bl.input_files(a.inputs, "dedup-", "dedup.json"):
        d = bl.read_json(p)
        if d.get("benchmark") == "dedup" and d.get("complete"):
            cells[d["cell"]] = d  # a later file of the same cell wins
    if not cells:
        print("report: no complete dedup-*.json found", file=sys.stderr)
        return 2
    order = {m: i for i, m in enumerate(MODELS)}
    rows = [dedup_row(d) for d in sorted(
        cells.values(), key=lambda d: (order.get(d["model"], 9), MODES.index(d["mode"]),
                                       LOADERS.index(d["loader"]), d["replicas"]))]
    os.makedirs(a.out, exist_ok=True)
    bl.write_json(os.path.join(a.out, "dedup.json"), rows)
    with open(os.path.join(a.out, "dedup.md"), "w") as f:
        f.write(markdown(rows))
    print(f"report: {len(rows)} rows -> {a.out}")
    return 0


# ================================================================ children


# gpt_1b3's shape (GPT2Config keyword arguments); tests pass a tiny one as `gpt`.
GPT_1B3 = {"n_layer": 24, "n_embd": 2048, "n_head": 16, "n_positions": 1024}


def _build(model, torch, gpt=None):
    """The model on the current default device (meta, cuda, ...)."""
    if model == "resnet50":
        import torchvision

        return torchvision.models.resnet50()
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(**(gpt or GPT_1B3))
    return GPT2LMHeadModel(cfg)


def _random_model(model, seed, torch, device="cuda", gpt=None):
    """The model prepare saves: random weights from the seed, fp16, eval mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        m = _build(model, torch, gpt)
    return m.half().eval()


def prepare_cmd(model, weights_dir, seed, python=sys.executable):
    return [python, SCRIPT, "prepare", "--model", model, "--dir", weights_dir, "--seed", seed]


def prepare_main(a, device="cuda", gpt=None):
    """Random weights from the seed, fp16, saved as model.safetensors and
    model.pt (the same tensors) plus meta.json: tied parameters are stored once
    (`tied`: duplicate -> stored name), non-persistent buffers are stored too
    (`nonpersistent`), so a model built on the meta device can be filled.
    `device` other than cuda and `gpt`: tests only."""
    os.makedirs(a.dir, exist_ok=True)
    meta_path = os.path.join(a.dir, "meta.json")
    if bl.fake():
        meta = {"model": a.model, "seed": a.seed, "weight_bytes": FAKE_WEIGHT_BYTES,
                "tied": {}, "nonpersistent": []}
        bl.write_json(meta_path, meta)
        bl.emit("RESULT", meta)
        return
    import torch
    from safetensors.torch import save_file

    m = _random_model(a.model, a.seed, torch, device, gpt)
    sd = m.state_dict()
    tensors, tied, seen = {}, {}, {}
    for k, v in sd.items():
        key = (v.data_ptr(), tuple(v.shape), v.dtype)
        if key in seen:
            tied[k] = seen[key]
            continue
        seen[key] = k
        tensors[k] = v.detach().contiguous().cpu()
    nonpersistent = []
    for name, b in m.named_buffers():
        if name not in sd:
            tensors[name] = b.detach().contiguous().cpu()
            nonpersistent.append(name)
    save_file(tensors, os.path.join(a.dir, "model.safetensors"))
    torch.save(tensors, os.path.join(a.dir, "model.pt"))
    meta = {"model": a.model, "seed": a.seed,
            "weight_bytes": sum(p.numel() * p.element_size() for p in m.parameters()),
            "params": sum(p.numel() for p in m.parameters()),
            "buffer_bytes": sum(b.numel() * b.element_size() for b in m.buffers()),
            "file_bytes": os.path.getsize(os.path.join(a.dir, "model.safetensors")),
            "tied": tied, "nonpersistent": nonpersistent, "torch": torch.__version__}
    bl.write_json(meta_path, meta)  # last: its presence means the files are complete
    bl.emit("RESULT", meta)


def _fill(m, tensors, meta, assign):
    """load_state_dict (assign or copy) of the persistent tensors, then the
    non-persistent buffers; only tied duplicates may be missing."""
    nonp = set(meta["nonpersistent"])
    persistent = {k: v for k, v in tensors.items() if k not in nonp}
    missing, unexpected = m.load_state_dict(persistent, strict=False, assign=assign)
    bad = sorted(set(missing) - set(meta["tied"]))
    if bad or unexpected:
        raise SystemExit(f"replica: state dict mismatch: missing {bad[:5]}, unexpected {unexpected[:5]}")
    for name in nonp:
        mod, _, leaf = name.rpartition(".")
        sub = m.get_submodule(mod)
        if assign:
            sub.register_buffer(leaf, tensors[name], persistent=False)
        else:
            sub.get_buffer(leaf).copy_(tensors[name])


def _tie(m, meta):
    for dup, src in meta["tied"].items():
        mod, _, leaf = dup.rpartition(".")
        setattr(m.get_submodule(mod), leaf, m.get_parameter(src))


def load_model(model, loader, d, meta, device="cuda", gpt=None):
    """The replica's model loaded by `loader`. `device` other than cuda and
    `gpt`: tests only (gpt must be what prepare_main was given)."""
    import torch
    from safetensors.torch import load_file

    with torch.device("meta"):
        m = _build(model, torch, gpt)
    m = m.half()
    st, pt = os.path.join(d, "model.safetensors"), os.path.join(d, "model.pt")
    if loader == "to_cuda":
        _fill(m, load_file(st), meta, assign=True)  # CPU tensors
        _tie(m, meta)
        m = m.to(device)
    elif loader == "safetensors":
        _fill(m, load_file(st, device=device), meta, assign=True)
    elif loader == "torch_load":
        m = m.to_empty(device=device)
        tensors = torch.load(pt, map_location=device)
        _fill(m, tensors, meta, assign=False)
        del tensors
    else:
        raise SystemExit(f"unknown loader {loader}")
    _tie(m, meta)
    left = [n for n, t in list(m.named_parameters()) + list(m.named_buffers())
            if t.device.type != torch.device(device).type]
    if left:
        raise SystemExit(f"replica: not on {device} after loading: {left[:5]}")
    return m.eval()


def _request(model, i, seed, torch):
    """Request i: batch 1-4 and its input, both from (seed, i)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + i + 1)
    b = int(torch.randint(1, 5, (1,), generator=g))
    if model == "resnet50":
        return torch.randn(b, 3, 224, 224, generator=g).half()
    return torch.randint(0, 50257, (b, MODELS[model]["seq"]), generator=g)


def _forward(m, model, x):
    if model == "resnet50":
        return m(x)
    return m(input_ids=x, use_cache=False).logits[:, -1, :]


def _serve(m, model, requests, seed, torch, device="cuda"):
    """SERVE: the sha256 of the outputs of requests 0..requests-1, in order."""
    h = hashlib.sha256()
    with torch.inference_mode():
        for i in range(requests):
            out = _forward(m, model, _request(model, i, seed, torch).to(device))
            h.update(out.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _write(m, how, torch):
    """WRITE: overwrite every weight in place, doubled: from the host
    ("memcpy") or with a kernel ("kernel")."""
    with torch.no_grad():
        for p in m.parameters():
            if how == "memcpy":
                p.data.copy_(p.data.cpu().mul_(2))  # host -> device copy
            else:
                p.data.mul_(2)  # a kernel writing in place


class _Fake:
    """Test seam: a replica's device memory as a number in a file, merging as
    tandem would (replicas other than 0 drop their weights 0.5 s after loading
    when sharing is on)."""

    def __init__(self, a, meta):
        self.path = os.path.join(os.environ["TANDEM_BENCH_FAKE_MEM"], str(os.getpid()))
        self.share = os.environ.get("TANDEM_SHARE_WEIGHTS") == "on"
        self.w = meta["weight_bytes"]
        self.written = False
        self.set(FAKE_CONTEXT_BYTES + self.w)
        if self.share and a.index > 0:
            threading.Timer(0.5, lambda: self.set(FAKE_CONTEXT_BYTES)).start()

    def set(self, v):
        with open(self.path + ".tmp", "w") as f:
            f.write(str(v))
        os.replace(self.path + ".tmp", self.path)

    def write(self, how):
        if self.share and how == "kernel":
            self.exit(f"tandem[{os.getpid()}]: a kernel wrote into shared (read-only) weight "
                      f"memory; run this job with {REMEDY}")
        if self.share:
            self.set(FAKE_CONTEXT_BYTES + 2 * self.w)
        self.written = True

    def digest(self, a):
        time.sleep(0.2)
        return hashlib.sha256(f"{a.model}:{a.seed}:{a.requests}:{self.written}".encode()).hexdigest()

    def exit(self, message=None):
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        if message:
            print(message, file=sys.stderr, flush=True)
            os._exit(1)


def replica_main(a):
    cmds = queue.Queue()
    bl.stdin_commands(cmds.put)
    t0 = time.time()
    meta = bl.read_json(os.path.join(a.dir, "meta.json"))
    if bl.fake():
        fk = _Fake(a, meta)
    else:
        import torch

        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True, warn_only=True)
        m = load_model(a.model, a.loader, a.dir, meta)
        # torch_load's state dict was a second copy of the weights on the GPU;
        # freed, it stays in PyTorch's cache, which NVML counts (and dedup
        # could merge, weights again): without this its cells would measure
        # the loader's leftovers as well as the weights. A no-op for the
        # other loaders, which leave nothing behind on the GPU.
        torch.cuda.empty_cache()
        with torch.inference_mode():
            _forward(m, a.model, _request(a.model, -1, a.seed, torch).cuda())  # warm-up
        torch.cuda.synchronize()
    bl.emit("LOADED", {"pid": os.getpid(), "load_s": round(time.time() - t0, 2),
                       "t_loaded": time.time()})
    while True:
        cmd = cmds.get()
        if cmd is None:  # the driver is gone
            if bl.fake():
                fk.exit()
            os._exit(3)
        if cmd.startswith("WRITE "):
            how = cmd.split()[1]
            t = time.time()
            if bl.fake():
                fk.write(how)
            else:
                _write(m, how, torch)
                torch.cuda.synchronize()
            bl.emit("WROTE", {"how": how, "seconds": round(time.time() - t, 2)})
        elif cmd == "SERVE":
            t = time.time()
            if bl.fake():
                digest = fk.digest(a)
            else:
                digest = _serve(m, a.model, a.requests, a.seed, torch)
            bl.emit("RESULT", {"digest": digest, "requests": a.requests,
                               "serve_s": round(time.time() - t, 2), "t_served": time.time()})
            if bl.fake():
                fk.exit()
            return


def child_main(kind, argv):
    ap = argparse.ArgumentParser(prog=f"dedup.py {kind}")
    ap.add_argument("--model", choices=list(MODELS), required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seed", type=int, default=1)
    if kind == "replica":
        ap.add_argument("--loader", choices=LOADERS, required=True)
        ap.add_argument("--index", type=int, required=True)
        ap.add_argument("--requests", type=int, default=1000)
    a = ap.parse_args(argv)
    try:
        (prepare_main if kind == "prepare" else replica_main)(a)
    except BaseException as e:  # noqa: BLE001 - reported to the driver, then re-raised
        if not isinstance(e, SystemExit) or e.code not in (0, None):
            bl.emit("ERROR", {"error": repr(e)[:2000]})
        raise
    return 0


# ================================================================ driver


class Sampler:
    """Device memory used, sampled every `interval` s in a thread: (time, bytes)."""

    def __init__(self, read, interval=0.1):
        self.read, self.interval = read, interval
        self.samples = []
        self.errors = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=5)

    def _loop(self):
        while not self._stop.is_set():
            t = time.time()
            try:
                self.samples.append((t, int(self.read())))
            except Exception:  # noqa: BLE001 - counted
                self.errors += 1
            self._stop.wait(max(0.0, self.interval - (time.time() - t)))

    def snapshot(self):
        return list(self.samples)

    def level_over(self, seconds):
        time.sleep(seconds)
        now = time.time()
        return level(self.snapshot(), now - seconds, now)


def memory_reader(gpu):
    if bl.fake():
        d = os.environ["TANDEM_BENCH_FAKE_MEM"]

        def read():
            total = FAKE_BASE_BYTES
            for n in os.listdir(d):
                if n.isdigit():
                    with contextlib.suppress(OSError, ValueError), open(os.path.join(d, n)) as f:
                        total += int(f.read())
            return total

        return read
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    return lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used


def run_pass(a, loader, pname, n, share, write, weights_dir, pass_dir, read_mem):
    os.makedirs(pass_dir, exist_ok=True)
    res = {"replicas": n, "share": share, "write": write, "errors": []}
    td_dir = os.path.join(pass_dir, "td")
    with Sampler(read_mem) as sampler:
        res["baseline_bytes"] = sampler.level_over(a.level_s)
        t_start = time.time()
        with contextlib.ExitStack() as stack:
            td = None if bl.fake() else stack.enter_context(bl.tandemd(a.bin, td_dir))
            sock = td.sock if td else bl.tandemd_paths(a.bin, td_dir)[2]
            kids = []
            for i in range(n):
                argv = replica_cmd(a.model, loader, weights_dir, i, a.requests, a.seed)
                k = bl.Child(f"{pname} replica {i}", argv,
                             bl.clean_env(**replica_env(share, a.bin, sock)),
                             os.path.join(pass_dir, f"replica{i}.log"))
                stack.callback(k.stop)
                kids.append(k)
            res["loaded"] = [k.wait_for("LOADED", a.load_timeout) for k in kids]
            t_loaded = time.time()
            res["load_seconds"] = round(t_loaded - t_start, 2)
            while not settled(sampler.snapshot(), t_loaded, time.time(), a.settle_quiet,
                              a.tol_bytes, settle_min(a, share)):
                if time.time() - t_loaded > a.settle_max:
                    break
                time.sleep(0.1)
            t_settled = time.time()
            res["settle"] = settle_summary(sampler.snapshot(), t_loaded, t_settled, a.tol_bytes)
            res["settle_seconds"] = round(t_settled - t_loaded, 2)
            if td:
                res["dedup_after_merge"] = bl.dedup_view(td.try_stats())
            alive = list(range(n))
            if write:
                w = {"how": write}
                kids[0].send(f"WRITE {write}")
                try:
                    w.update(kids[0].wait_for("WROTE", a.load_timeout))
                    w["continued"] = True
                except BenchError as e:
                    w["continued"] = False
                    w["error"] = str(e)[:2000]
                    alive.remove(0)
                after = sampler.level_over(a.level_s)
                w["bytes_after_write"] = None if after is None else after - res["baseline_bytes"]
                res["writer"] = w
            t_serve = time.time()
            for i in alive:
                kids[i].send("SERVE")
            res["digests"], res["serve_seconds"] = [None] * n, [None] * n
            for i in alive:
                try:
                    r = kids[i].wait_for("RESULT", a.serve_timeout)
                    res["digests"][i], res["serve_seconds"][i] = r["digest"], r["serve_s"]
                except BenchError as e:
                    res["errors"].append(str(e)[:2000])
            res["exits"] = [k.stop(grace=30) for k in kids]
            if write:
                res["writer"]["exit"] = res["exits"][0]
                res["writer"]["message"] = writer_message(kids[0].stderr_tail(20000))
            t_exit = time.time()
            peak = max((u for t, u in sampler.snapshot() if t_serve <= t <= t_exit), default=None)
            res["serving_peak_bytes"] = None if peak is None else peak - res["baseline_bytes"]
            back = None
            while time.time() - t_exit < 15:
                back = sampler.level_over(a.level_s)
                if back is not None and abs(back - res["baseline_bytes"]) <= a.tol_after_bytes:
                    break
            res["after_exit_bytes"] = None if back is None else back - res["baseline_bytes"]
            res["after_exit_seconds"] = round(time.time() - t_exit, 2)
            if td:
                snap = td.try_stats()
                views = bl.client_views(snap, None, [ld["pid"] for ld in res["loaded"]])
                res["clients"] = list(views.values())
                res["dedup_after_exit"] = bl.dedup_view(snap)
                res["stats_error"] = td.stats_error
        after_td = sampler.level_over(a.level_s)
        res["after_tandemd_stop_bytes"] = None if after_td is None else after_td - res["baseline_bytes"]
        res["samples"] = [(round(t - t_start, 2), u) for t, u in sampler.snapshot()]
        res["sampler_errors"] = sampler.errors
        res["marks"] = {"loaded": round(t_loaded - t_start, 2),
                        "settled": round(t_settled - t_start, 2),
                        "serve": round(t_serve - t_start, 2), "exit": round(t_exit - t_start, 2)}
    return res


def ensure_weights(a, weights_dir, work):
    meta_path = os.path.join(weights_dir, "meta.json")
    if os.path.exists(meta_path):
        meta = bl.read_json(meta_path)
        if meta.get("seed") == a.seed and meta.get("model") == a.model:
            return meta
    print(f"preparing {a.model} weights in {weights_dir}", flush=True)
    k = bl.Child("prepare", prepare_cmd(a.model, weights_dir, a.seed), bl.clean_env(),
                 os.path.join(work, "prepare.log"))
    try:
        meta = k.wait_for("RESULT", 600)
    finally:
        k.stop(grace=60)
    return meta


def run_cell(a, cell, info, work):
    loader, replicas, mode = cell
    weights_dir = os.path.join(a.weights_dir, a.model)
    meta = ensure_weights(a, weights_dir, work)
    name = cell_name(a.model, loader, replicas, mode)
    doc = {"benchmark": "dedup", "cell": name, "model": a.model, "loader": loader,
           "mode": mode, "replicas": replicas,
           "weight_bytes": meta["weight_bytes"], "params": meta.get("params"),
           "requests": a.requests, "seed": a.seed, "tol_bytes": a.tol_bytes,
           "tol_after_bytes": a.tol_after_bytes, "settle_quiet_s": a.settle_quiet,
           "settle_min_s": a.settle_min,
           "settle_max_s": a.settle_max, "started": datetime.datetime.now().isoformat(timespec="seconds"),
           **{k: info.get(k) for k in ("device", "driver", "date", "torch")},
           "passes": {}, "complete": False}
    out = os.path.join(a.out, name + ".json")
    read_mem = memory_reader(a.gpu)
    for pname, n, share, write in cell_passes(replicas, mode):
        t = time.time()
        print(f"{name}: pass {pname}, {n} replica(s)", flush=True)
        try:
            doc["passes"][pname] = run_pass(a, loader, pname, n, share, write, weights_dir,
                                            os.path.join(work, name, pname), read_mem)
        except BenchError as e:
            doc["passes"][pname] = {"replicas": n, "error": str(e)[:4000], "errors": [str(e)[:4000]]}
            bl.write_json(out, doc)
            print(f"{name}: pass {pname} FAILED: {e}", flush=True)
            return doc, 1
        p = doc["passes"][pname]
        s = p.get("settle") or {}
        print(f"{name}: pass {pname}: {time.time() - t:.0f} s; baseline {mib(p['baseline_bytes'])} "
              f"MiB; settled at {mib(s.get('level_bytes'))} MiB (min after {s.get('seconds_to_min')} s);"
              f" after exit {mib(p['after_exit_bytes'])} MiB above baseline", flush=True)
        bl.write_json(out, doc)
    doc["complete"] = True
    bl.write_json(out, doc)
    return doc, 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["replica"], ["prepare"]):
        return child_main(argv[0], argv[1:])
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Subcommands: `report --in DIR... --out DIR` merges results; "
               "`prepare` and `replica` are what the driver starts.")
    ap.add_argument("--model", choices=list(MODELS), required=True)
    ap.add_argument("--loader", type=parse_list(str, LOADERS), required=True,
                    help="one of, or a comma-separated list of: " + ", ".join(LOADERS))
    ap.add_argument("--replicas", type=parse_list(int), default=[2],
                    help="e.g. 2 or 2,4 (the adversarial modes always use 3)")
    ap.add_argument("--mode", type=parse_list(str, MODES), default=["shared"],
                    help="one or more of " + ", ".join(MODES))
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", default=".carry", help="folder with libtandem.so and tandemd")
    ap.add_argument("--out", default="dedup-results")
    ap.add_argument("--resume", action="append", help="folder with earlier cell files to skip")
    ap.add_argument("--fresh", action="store_true", help="run even if the cell file exists")
    ap.add_argument("--weights-dir", default="/tmp/tandem-bench-weights")
    ap.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU")
    ap.add_argument("--settle-quiet", type=float, default=3.0,
                    help="memory counts as settled after this long without a new minimum")
    ap.add_argument("--settle-min", type=float, default=12.0,
                    help="with sharing, watch at least this long after loading (target: 10 s)")
    ap.add_argument("--settle-max", type=float, default=30.0)
    ap.add_argument("--tol-mib", type=float, default=8.0,
                    help="memory changes smaller than this count as flat")
    ap.add_argument("--tol-after-mib", type=float, default=32.0,
                    help="how close to the baseline memory must come back after exit")
    ap.add_argument("--level-s", type=float, default=1.0,
                    help="a memory level is the median over this many seconds of samples")
    ap.add_argument("--load-timeout", type=float, default=300.0)
    ap.add_argument("--serve-timeout", type=float, default=300.0)
    ap.add_argument("--budget", type=float, default=540.0,
                    help="seconds this command may run; stops before a cell that would overrun")
    ap.add_argument("--dry-run", action="store_true", help="print the plan; start nothing")
    a = ap.parse_args(argv)
    if any(n < 2 for n in a.replicas) and "shared" in a.mode:
        ap.error("--replicas must be at least 2")
    a.tol_bytes, a.tol_after_bytes = int(a.tol_mib * bl.MIB), int(a.tol_after_mib * bl.MIB)
    weights_dir = os.path.join(a.weights_dir, a.model)
    prepared = os.path.exists(os.path.join(weights_dir, "meta.json"))
    todo = []
    for cell in cells(a.loader, a.replicas, a.mode):
        name = cell_name(a.model, *cell)
        done = None if a.fresh else bl.find_file(name + ".json", [a.out] + (a.resume or []))
        if done and bl.read_json(done).get("complete"):
            print(f"{name}: already done ({done}); skipped (--fresh reruns it)")
            if not a.dry_run and os.path.abspath(os.path.dirname(done)) != os.path.abspath(a.out):
                os.makedirs(a.out, exist_ok=True)
                shutil.copy(done, os.path.join(a.out, name + ".json"))
        else:
            todo.append(cell)
    if a.dry_run:
        if not bl.fake() and (err := bl.check_bin(a.bin)):
            print(f"note: {err}")
        for i, cell in enumerate(todo):
            for line in plan_lines(a, cell, weights_dir, prepared or i > 0):
                print(line)
        return 0
    if not todo:
        return 0
    if not bl.fake() and (err := bl.check_bin(a.bin)):
        print(f"dedup: {err}", file=sys.stderr)
        return 2
    budget = bl.Budget(a.budget)
    bl.exit_on_signals()
    bl.claim_owner()
    bl.kill_stale()
    os.makedirs(a.out, exist_ok=True)
    info = bl.device_info(a.gpu)
    print(f"device {info['device']}, driver {info['driver']}, torch {info.get('torch')}, "
          f"{info['date']}", flush=True)
    work = bl.work_dir("tb-dd-")
    if bl.fake():
        os.environ["TANDEM_BENCH_FAKE_MEM"] = os.path.join(work, "fake-mem")
        os.makedirs(os.environ["TANDEM_BENCH_FAKE_MEM"])
    rc = 0
    try:
        for i, cell in enumerate(todo):
            prepared = prepared or i > 0
            est = cell_estimate(a.model, cell[1], cell[2], a.settle_max, prepared)
            if not budget.fits(est):
                print(f"stopping before {cell_name(a.model, *cell)}: about "
                      f"{bl.fmt_s(est * budget.scale())} would overrun --budget {a.budget:g} s; "
                      f"{len(todo) - i} cell(s) left: run the same command again with --resume "
                      "<folder holding the finished cell files>", flush=True)
                return 3
            print(plan_lines(a, cell, weights_dir, prepared)[0], flush=True)
            t = time.time()
            doc, cell_rc = run_cell(a, cell, info, work)
            budget.record(est, time.time() - t)
            rc = rc or cell_rc
            if cell_rc == 0:
                row = dedup_row(doc)
                keys = (["saved_fraction", "total_saving", "merge_seconds", "outputs_identical"]
                        if cell[2] == "shared" else
                        ["writer_exit", "writer_message", "writer_as_expected", "others_identical"])
                print("  " + " ".join(f"{k}={row[k]}" for k in keys + ["memory_back_at_baseline"]),
                      flush=True)
    except KeyboardInterrupt as e:
        print(f"dedup: interrupted ({e}); everything started was stopped", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
