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
Writes coordinator.json under --out; exit 1 if a comparison fails.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interposition as ip  # noqa: E402  (the workloads and child runner)


def http_get(sock_path, path, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock_path)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    return status, body.decode(errors="replace")


def stats(stats_sock):
    status, body = http_get(stats_sock, "/stats")
    if " 200 " not in status + " ":
        raise RuntimeError(f"/stats answered {status}")
    return json.loads(body)


def start_tandemd(bin_dir, sock_dir):
    sock = os.path.join(sock_dir, "tandemd.sock")
    log = open(os.path.join(sock_dir, "tandemd.log"), "w")
    p = subprocess.Popen(
        [os.path.join(bin_dir, "tandemd"), "--no-config", "--socket", sock],
        stdout=log, stderr=subprocess.STDOUT,
    )
    stats_sock = os.path.join(sock_dir, "stats.sock")
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            stats(stats_sock)
            return p, sock, stats_sock
        except (OSError, RuntimeError, ValueError):
            time.sleep(0.05)
    p.kill()
    raise SystemExit("tandemd did not answer on its stats socket within 10 s")


def parse_metrics(text):
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: len(f.samples) for f in text_string_to_metric_families(text)}
    return families


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release", help="folder with libtandem.so and tandemd")
    ap.add_argument("--out", default="coordinator-results")
    ap.add_argument("--train-reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    shim = os.path.join(args.bin, "libtandem.so")
    for f in (shim, os.path.join(args.bin, "tandemd")):
        if not os.path.exists(f):
            print(f"coordinator: {f} missing; build with `cargo build --release -p tandem-shim "
                  "-p tandem-coordinator` and carry both", file=sys.stderr)
            return 2
    info = ip.device_info()
    result = {"jobs": [], "metrics": None, "overhead": None, **info}
    sock_dir = tempfile.mkdtemp(prefix="tandem-gpu-")
    tandemd, sock, stats_sock = start_tandemd(args.bin, sock_dir)
    try:
        # Two jobs at once, both under the shim and registered.
        jobs = {}

        def run(name):
            jobs[name] = ip.run_child(shim, name, ["--profile"], use_shim=True, socket=sock)

        threads = [threading.Thread(target=run, args=(n,)) for n in ("train", "cudagraph")]
        for t in threads:
            t.start()
        metrics_families = None
        while any(t.is_alive() for t in threads):
            time.sleep(0.5)
            try:
                _, text = http_get(stats_sock, "/metrics")
                metrics_families = parse_metrics(text)
            except Exception as e:  # noqa: BLE001 - recorded, judged below
                metrics_families = {"error": repr(e)}
        for t in threads:
            t.join()
        result["metrics"] = metrics_families
        # The coordinator reclaims a client when its socket hangs up: wait (bounded)
        # until every job that ran is listed as departed.
        pids = {r.get("pid") for r in jobs.values() if r.get("pid")}
        deadline = time.time() + 10
        while True:
            departed = {c["pid"]: c for c in stats(stats_sock).get("departed", [])}
            if pids <= departed.keys() or time.time() > deadline:
                break
            time.sleep(0.1)
        for name, r in jobs.items():
            row = {"job": name, **{k: v for k, v in r.items() if k != "output_tail"}}
            c = departed.get(r.get("pid"))
            row["coordinator"] = c
            if c is not None and "error" not in r:
                kernels = c["launches"] - c["graph_launches"] + c["graph_kernels"]
                row["records_equal"] = c["records"] == r["shim_records_pushed"]
                row["dropped_equal"] = c["dropped"] == r["shim_records_dropped"]
                row["kernels_equal"] = kernels == r["shim_kernels_total"]
            result["jobs"].append(row)
            print(json.dumps(row), flush=True)

        # Overhead with the coordinator attached, interleaved with plain runs.
        plain, attached = [], []
        for _ in range(args.train_reps):
            for use_shim, acc in ((False, plain), (True, attached)):
                r = ip.run_child(shim, "train_step", ["--steps", str(args.steps)],
                                 use_shim=use_shim, socket=sock)
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
        tandemd.wait(timeout=10)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "coordinator.json"), "w") as f:
        json.dump(result, f, indent=2)
    ok = all(j.get("records_equal") and j.get("kernels_equal") for j in result["jobs"])
    ok = ok and isinstance(result["metrics"], dict) and "tandem_clients" in result["metrics"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
