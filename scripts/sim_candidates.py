#!/usr/bin/env python3
"""Scheduler v3's candidates against MPS + priority, per pair, from a matrix
that ran them (`scripts/sim --candidates`): each cell is the worst seed's p99
ratio / the worst seed's training kept, then per mode how many pairs meet the
goal (p99 <= 1.10x with training >= 0.90), how many get a lower p99 than
MPS + priority, and how many beat it (a lower p99 with at least its
training), read at two decimals as the tables print them. The last column is
the most training any mode can keep while it serves inference's load (the SM
capacity inference leaves alone over training's need: `kept_at_most` of the
pair's alone row); below 0.90 no mode can meet the goal on that pair. Writes
Markdown to stdout.

    python3 scripts/sim_candidates.py results/sim/candidates/matrix.json
"""

import json
import sys

BASE = "mps_lowprio"
MODES = [BASE, "tandem_spatial", "tandem_green", "tandem_hold", "tandem_slice"]


def worst(row):
    return row.get("p99_ratio_max"), row.get("train_fraction_min")


def summarise(rows):
    pairs = {}
    bound = {}
    for r in rows:
        key = (r["set"], r["inference"], r["training"])
        if r["mode"] == "alone":
            bound[key] = r.get("kept_at_most")
        if r["mode"] in MODES and r.get("p99_ratio_max") is not None:
            key = (r["set"], r["inference"], r["training"])
            pairs.setdefault(key, {})[r["mode"]] = worst(r)
    modes = [m for m in MODES if any(m in v for v in pairs.values())]
    counts = {m: {"goal": 0, "lower": 0, "beats": 0} for m in modes}
    lines = ["| pair | " + " | ".join(modes) + " | training kept at most |",
             "| --- |" + " ---: |" * (len(modes) + 1)]
    reachable = 0
    for (dev, inf, train), cells in pairs.items():
        base = cells.get(BASE)
        out = []
        for m in modes:
            if m not in cells:
                out.append("-")
                continue
            p99, kept = (round(x, 2) for x in cells[m])
            out.append(f"{p99:.2f} / {kept:.2f}")
            c = counts[m]
            c["goal"] += p99 <= 1.10 and kept >= 0.90
            if base and m != BASE:
                lower = p99 < round(base[0], 2)
                c["lower"] += lower
                c["beats"] += lower and kept >= round(base[1], 2)
        b = bound.get((dev, inf, train))
        reachable += b is not None and round(b, 2) >= 0.90
        out.append("-" if b is None else f"{b:.2f}")
        lines.append(f"| {dev} {inf} : {train} | " + " | ".join(out) + " |")
    lines += ["", "| mode | meets the goal | lower p99 than MPS + priority | beats it |",
              "| --- | ---: | ---: | ---: |"]
    n = len(pairs)
    lines.insert(len(pairs) + 2, "")
    lines.insert(len(pairs) + 3, f"The SM capacity leaves the goal within reach on {reachable} of {n} pairs.")
    for m in modes:
        c = counts[m]
        if m == BASE:
            lines.append(f"| {m} | {c['goal']} of {n} | - | - |")
        else:
            lines.append(f"| {m} | {c['goal']} of {n} | {c['lower']} | {c['beats']} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        print(summarise(json.load(f)["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
