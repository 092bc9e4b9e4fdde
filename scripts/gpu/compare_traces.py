#!/usr/bin/env python3
"""Sets tandemd's view of a job beside torch.profiler's (issue 25's GPU step).

    python3 scripts/gpu/compare_traces.py --profiler DIR --captured DIR [--json OUT]

--profiler: the trace stage's traces (prove's 3-trace/traces/<job>.json,
scripts/gpu/trace_capture.py: one request or step under torch.profiler).
--captured: the co-location stage's traces/ (scripts/bench/colocation.py writes
<inference>-<training>-r<rep>-<mode>-<role>.json from tandemd's `GET /trace`
while both jobs ran). For each captured trace, the job's profiler trace is
found by name (the role's job in the file name) and both are summed: kernels
per request or step, the kernels' time, the host time. Prints a Markdown table
and, with --json, writes the rows.

Both are `tandem-trace/1` documents; a graph launch counts as one kernel in
tandemd's (the shim sees one cuGraphLaunch) and as its nodes in the
profiler's, which the table's note says when it happens.
"""

import argparse
import json
import os
import sys

FORMAT = "tandem-trace/1"


def summarise(doc):
    """kernels, kernel ns, host ns and graph launches of one trace document."""
    if doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document: format {doc.get('format')!r}")
    ks = [o for o in doc.get("ops", []) if o.get("op") == "kernel"]
    return {"kernels": len(ks), "kernel_ns": sum(int(k.get("duration_ns", 0)) for k in ks),
            "host_ns": sum(int(o.get("host_gap_ns", 0)) for o in doc.get("ops", [])),
            "graphs": sum(1 for k in ks if str(k.get("name", "")).startswith("graph-"))}


def job_of(name):
    """(pair prefix, mode, role, job) from <inf>-<train>-r<rep>-<mode>-<role>.json."""
    stem = name[:-len(".json")]
    head, _, role = stem.rpartition("-")
    head, _, mode = head.rpartition("-")
    pair, _, rep = head.rpartition("-")
    inf, _, train = pair.partition("-")
    if role not in ("inference", "training") or not rep.startswith("r") or not train:
        raise ValueError(f"{name}: not <inference>-<training>-r<rep>-<mode>-<role>.json")
    return pair, f"{mode} {rep}", role, inf if role == "inference" else train


def compare(profiler_dir, captured_dir):
    rows = []
    for name in sorted(os.listdir(captured_dir)):
        if not name.endswith(".json"):
            continue
        _, cell, role, job = job_of(name)
        with open(os.path.join(captured_dir, name)) as f:
            cap = summarise(json.load(f))
        ref_path = os.path.join(profiler_dir, f"{job}.json")
        ref = None
        if os.path.exists(ref_path):
            with open(ref_path) as f:
                ref = summarise(json.load(f))
        row = {"job": job, "role": role, "cell": cell, "captured": cap, "profiler": ref}
        if ref and ref["kernels"] and ref["kernel_ns"]:
            row["kernel_count_ratio"] = cap["kernels"] / ref["kernels"]
            row["kernel_time_ratio"] = cap["kernel_ns"] / ref["kernel_ns"]
        rows.append(row)
    return rows


def markdown(rows):
    out = ["| job | cell | kernels (tandemd / profiler) | kernel time ms (tandemd / profiler) | time ratio | note |",
           "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        c, p = r["captured"], r["profiler"]
        note = "no profiler trace of this job" if p is None else ""
        if c["graphs"]:
            note = f"{c['graphs']} graph launch(es): one kernel each in tandemd's"
        pk = "-" if p is None else p["kernels"]
        pt = "-" if p is None else f"{p['kernel_ns'] / 1e6:.3f}"
        ratio = f"{r['kernel_time_ratio']:.3f}" if "kernel_time_ratio" in r else "-"
        out.append(f"| {r['job']} | {r['cell']} | {c['kernels']} / {pk} | "
                   f"{c['kernel_ns'] / 1e6:.3f} / {pt} | {ratio} | {note} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiler", required=True)
    ap.add_argument("--captured", required=True)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    try:
        rows = compare(a.profiler, a.captured)
    except (OSError, ValueError) as e:
        print(f"compare_traces: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"compare_traces: no captured trace in {a.captured}", file=sys.stderr)
        return 1
    print(markdown(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
