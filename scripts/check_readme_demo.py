#!/usr/bin/env python3
"""The README's demo output is what `scripts/run` prints (scripts/test runs this).

Runs the demo (`scripts/run` with no command, on the debug build, with a
private tandemd on a socket of its own) and checks the fenced block after the
README's `<!-- demo output` marker against what it printed:

* the README's lines appear in the output in the same order; two README lines
  with no `...` line between them are adjacent in the output;
* a README line ending in ` ...` matches an output line that starts with the
  rest;
* what differs from run to run is compared by shape only: pids, the socket
  path, the build directory, and in the table row the PID, LAUNCH/s, CLASS
  (it depends on the uid: root may claim inference) and EXE columns. ID, GPU,
  KERNELS, DROPPED, MEM, SHARED and WAIT are compared exactly.

On a machine with an NVIDIA driver the demo is a PyTorch job, not the
fake-driver one the README shows: the check says so and passes.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- demo output"


def say(msg):
    print(f"readme-demo: {msg}", flush=True)


def readme_block():
    lines = (ROOT / "README.md").read_text().splitlines()
    try:
        at = next(i for i, l in enumerate(lines) if l.startswith(MARKER))
    except StopIteration:
        sys.exit(f"readme-demo: README.md has no '{MARKER}' marker before the demo's output block")
    start = next(i for i in range(at + 1, len(lines)) if lines[i].startswith("```")) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    return lines[start:end]


ROW = re.compile(r"^\s+\d+\s+\d+\s")
# Table columns compared by shape only: PID, CLASS, LAUNCH/s, EXE.
LOOSE = {1, 2, 5, 10}


def norm(line):
    line = re.sub(r"tandem\[\d+\]", "tandem[PID]", line)
    line = re.sub(r"\bpid \d+", "pid PID", line)
    line = re.sub(r'coordinator at "[^"]*"', 'coordinator at "SOCKET"', line)
    line = re.sub(r"\(class \w+, claimed", "(class CLASS, claimed", line)
    line = re.sub(r"/\S*/target/(release|debug)/", "TARGET/", line)
    if ROW.match(line):
        cols = line.split()
        line = " ".join("*" if i in LOOSE else c for i, c in enumerate(cols))
    return line.rstrip()


def matches(want, got):
    want, got = norm(want), norm(got)
    if want.endswith(" ..."):
        return got.startswith(want[:-4])
    return want == got


def compare(readme, output):
    """None if the README's lines are what the output shows, else why not."""
    pos = 0
    gap = True  # the first README line may be anywhere
    for want in readme:
        if want.strip() == "...":
            gap = True
            continue
        if gap:
            found = next((i for i in range(pos, len(output)) if matches(want, output[i])), None)
        else:
            found = pos if pos < len(output) and matches(want, output[pos]) else None
        if found is None:
            where = "in the rest of the output" if gap else "right after the line before it"
            return f"README line not {where}:\n  {want}\n(normalised: {norm(want)})"
        pos = found + 1
        gap = False
    return None


def main():
    readme = readme_block()
    if not any(l.strip() for l in readme):
        sys.exit("readme-demo: the README's demo block is empty")
    with tempfile.TemporaryDirectory() as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_")}
        env.update(TANDEM_SOCKET=str(Path(d) / "tandemd.sock"), TANDEM_RUN_PROFILE="debug")
        r = subprocess.run([str(ROOT / "scripts" / "run")], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    output = r.stdout.splitlines()
    if any("NVIDIA driver found" in l for l in output):
        say("SKIPPED: this machine has an NVIDIA driver, so the demo is not the fake-driver one the README shows")
        return
    if r.returncode != 0:
        sys.exit(f"readme-demo: scripts/run failed ({r.returncode}):\n{r.stdout}")
    why = compare(readme, output)
    if why:
        sys.exit(f"readme-demo: the README's demo output is not what scripts/run prints. {why}\n"
                 f"scripts/run printed:\n{r.stdout}")
    say(f"the README's {sum(1 for l in readme if l.strip() != '...')} demo lines are what scripts/run printed")


if __name__ == "__main__":
    main()
