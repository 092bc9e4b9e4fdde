#!/usr/bin/env python3
"""Issue 4, acceptance 3: tandemd plus two PyTorch jobs on a real GPU.

1. Starts tandemd (carried binary) on a private socket, built-in defaults.
2. Runs two PyTorch jobs at once under libtandem.so, both registered with it
   (the ResNet training workload and the CUDA-graph workload of
   interposition.py), while fetching /metrics and parsing it with
   prometheus_client's parser.
3. After they exit, compares for each job what the coordinator counted (its
   final entry in /stats "departed") with the job's own shim counters:
   records (coordinator) == tandem_records_pushed() (shim), dropped == dropped,
   and kernels: launches - graph_launches + graph_kernels (coordinator) ==
   tandem_kernels_launched() (shim).
4. Overhead with the coordinator attached: a ResNet-50 bf16 training step
   (ms/step) with no shim vs shim + tandemd, interleaved processes, median and
   min-max.

Usage (on the GPU machine; .carry holds libtandem.so and tandemd built here):
    python3 scripts/gpu/coordinator.py --bin .carry --out "$OUT"
Writes coordinator.json under --out (after each phase, so a killed run keeps
what it measured); exit 1 if a comparison fails, or if a job is missing from
the comparison (a job whose runner raised is recorded with its error and fails
the run: judging only the jobs that came back would pass on half the data).
With interposition.py's test seam (TANDEM_GPU_FAKE=1) the jobs are its fake
driver children, so the orchestration runs against the fake driver.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interposition as ip  # noqa: E402  (the workloads and child runner)
import tandemd as td  # noqa: E402  (tandemd on a private socket, its /stats)


def parse_metrics(text):
    """{family: number of samples}, parsed by prometheus_client's parser (on
    the GPU machine); where it is not installed (the fake-driver dry run), by
    a minimal stdlib reading of the text format, and then the result says so
    under "_parser"."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return parse_metrics_stdlib(text)
    return {f.name: len(f.samples) for f in text_string_to_metric_families(text)}


def parse_metrics_stdlib(text):
    families, declared = {}, set()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                declared.add(parts[2])
                families.setdefault(parts[2], 0)
            continue
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, value = line.split("{", 1)[0], line.rsplit("}", 1)[-1].split()
        else:
            name, *value = line.split()
        float(value[0])  # a sample without a number is malformed: raise
        base = name
        for suffix in ("_total", "_count", "_sum", "_bucket", "_created"):
            if name.endswith(suffix) and name[: -len(suffix)] in declared:
                base = name[: -len(suffix)]
        families[base] = families.get(base, 0) + 1
    families["_parser"] = "stdlib fallback (prometheus_client not installed)"
    return families


JOBS = ("train", "cudagraph")


def run_jobs(names, runner):
    """Runs runner(name) for every name at once, one thread each. A runner
    that raises gives {"error": traceback} for its name: every name is in the
    result, so no job can silently drop out of the comparison."""
    jobs = {}

    def run(name):
        try:
            jobs[name] = runner(name)
        except BaseException:  # noqa: BLE001 - recorded as the job's result
            jobs[name] = {"error": "the job's runner raised", "output_tail": traceback.format_exc()}

    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in threads:
        t.start()
    return jobs, threads


def verdict(result, expected=JOBS):
    """True only when every expected job was compared and matched, and
    /metrics parsed with tandem's families."""
    by_name = {j.get("job"): j for j in result.get("jobs", [])}
    if set(by_name) != set(expected):
        return False
    ok = all(by_name[n].get("records_equal") and by_name[n].get("kernels_equal")
             for n in expected)
    return ok and isinstance(result.get("metrics"), dict) and "tandem_clients" in result["metrics"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release", help="folder with libtandem.so and tandemd")
    ap.add_argument("--out", default="coordinator-results")
    ap.add_argument("--train-reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--child-timeout", type=float, default=300.0,
                    help="seconds a job may run before it is killed and recorded as an error")
    args = ap.parse_args(argv)
    shim = os.path.join(args.bin, "libtandem.so")
    for f in (shim, os.path.join(args.bin, "tandemd")):
        if not os.path.exists(f):
            print(f"coordinator: {f} missing; build with `cargo build --release -p tandem-shim "
                  "-p tandem-coordinator` and carry both", file=sys.stderr)
            return 2
    info = ip.device_info()
    result = {"jobs": [], "metrics": None, "overhead": None, "complete": False, **info}
    os.makedirs(args.out, exist_ok=True)
    out_path = os.path.join(args.out, "coordinator.json")
    ip.write_json(out_path, result)
    sock_dir = tempfile.mkdtemp(prefix="tandem-gpu-")
    tandemd, sock, stats_sock = td.start_tandemd(args.bin, sock_dir)
    try:
        # Two jobs at once, both under the shim and registered.
        jobs, threads = run_jobs(JOBS, lambda name: ip.run_child(
            shim, name, ["--profile"], use_shim=True, socket=sock, timeout=args.child_timeout))
        metrics_families = None
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            try:
                _, text = td.http_get(stats_sock, "/metrics")
                metrics_families = parse_metrics(text)
            except Exception as e:  # noqa: BLE001 - recorded, judged below
                metrics_families = {"error": repr(e)}
        for t in threads:
            t.join()
        if metrics_families is None:  # the jobs ended before the first fetch
            try:
                _, text = td.http_get(stats_sock, "/metrics")
                metrics_families = parse_metrics(text)
            except Exception as e:  # noqa: BLE001 - recorded, judged below
                metrics_families = {"error": repr(e)}
        result["metrics"] = metrics_families
        # The coordinator reclaims a client when its socket hangs up: wait (bounded)
        # until every job that ran is listed as departed.
        pids = {r.get("pid") for r in jobs.values() if r.get("pid")}
        deadline = time.time() + 10
        while True:
            departed = {c["pid"]: c for c in td.stats(stats_sock).get("departed", [])}
            if pids <= departed.keys() or time.time() > deadline:
                break
            time.sleep(0.1)
        for name, r in jobs.items():
            row = {"job": name, **{k: v for k, v in r.items() if k != "output_tail"}}
            if "error" in r:
                row["output_tail"] = r.get("output_tail", "")[-2000:]
            c = departed.get(r.get("pid"))
            row["coordinator"] = c
            if c is not None and "error" not in r:
                kernels = c["launches"] - c["graph_launches"] + c["graph_kernels"]
                row["records_equal"] = c["records"] == r["shim_records_pushed"]
                row["dropped_equal"] = c["dropped"] == r["shim_records_dropped"]
                row["kernels_equal"] = kernels == r["shim_kernels_total"]
            result["jobs"].append(row)
            print(json.dumps(row), flush=True)
        ip.write_json(out_path, result)

        # Overhead with the coordinator attached, interleaved with plain runs.
        plain, attached = [], []
        for _ in range(args.train_reps):
            for use_shim, acc in ((False, plain), (True, attached)):
                r = ip.run_child(shim, "train_step", ["--steps", str(args.steps)],
                                 use_shim=use_shim, socket=sock, timeout=args.child_timeout)
                if "error" not in r:
                    acc.append(r["ms_per_step"])
        if plain and attached:
            result["overhead"] = {
                "metric": "ms_per_step",
                "plain": ip.spread(plain),
                "shim_with_tandemd": ip.spread(attached),
                "slowdown": statistics.median(attached) / statistics.median(plain) - 1,
            }
        print(json.dumps(result["overhead"]), flush=True)
    finally:
        tandemd.terminate()
        try:
            tandemd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            tandemd.kill()
        td.keep_log_and_remove(sock_dir, os.path.join(args.out, "tandemd.log"))
    ok = verdict(result)
    result.update(complete=True, passed=ok)
    ip.write_json(out_path, result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
