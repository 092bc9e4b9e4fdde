"""Tests of the GPU-free parts of scripts/bench/ (stdlib only, no GPU, no torch).

    python3 -m unittest scripts/bench/test_bench.py

Covers the statistics, the run plans and their resumption, the rows and the
merged reports, the dry runs (in a process where importing torch, pynvml,
transformers, torchvision or safetensors fails), the worker protocol and the
cleanup of child processes, and both drivers end to end with simulated workers
(the TANDEM_BENCH_FAKE=1 test seam). A tandemd built under target/ is used
where present (tandem mode of the co-location driver, tandemd start/stop);
those tests are skipped otherwise. The PNG test is skipped without matplotlib.
"""

import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (workers import these too)
sys.path.insert(0, HERE)

import benchlib as bl  # noqa: E402
import colocation as co  # noqa: E402
import dedup as dd  # noqa: E402

POISONED = ("torch", "pynvml", "transformers", "torchvision", "safetensors")


def built_bin():
    for d in ("target/release", "target/debug"):
        p = os.path.join(ROOT, d)
        if os.path.exists(os.path.join(p, "tandemd")) and os.path.exists(os.path.join(p, "libtandem.so")):
            return p
    return None


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def poisoned_path(tmp):
    """A folder where importing any GPU-side package fails loudly."""
    for mod in POISONED:
        os.makedirs(os.path.join(tmp, mod), exist_ok=True)
        with open(os.path.join(tmp, mod, "__init__.py"), "w") as f:
            f.write(f"raise ImportError('a dry run imported {mod}')\n")
    return tmp


def run_script(script, args, env_extra=None, timeout=180):
    env = dict(os.environ)
    env.pop(bl.FAKE_ENV, None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- benchlib


class Stats(unittest.TestCase):
    def test_percentile_interpolates_like_numpy(self):
        xs = list(range(1, 101))
        random.Random(3).shuffle(xs)
        self.assertAlmostEqual(bl.percentile(xs, 50), 50.5)
        self.assertAlmostEqual(bl.percentile(xs, 99), 99.01)
        self.assertEqual(bl.percentile(xs, 0), 1)
        self.assertEqual(bl.percentile(xs, 100), 100)
        self.assertEqual(bl.percentile([7.0], 99), 7.0)
        self.assertIsNone(bl.percentile([], 50))

    def test_spread_skips_missing_values(self):
        self.assertEqual(bl.spread([3, None, 1, 2]), {"median": 2, "min": 1, "max": 3, "n": 3})
        self.assertIsNone(bl.spread([None]))

    def test_budget_stops_before_an_overrun_and_learns_from_finished_cells(self):
        b = bl.Budget(100, start=0)
        self.assertTrue(b.fits(50, now=40))
        self.assertFalse(b.fits(70, now=40))
        b.record(10, 20)  # cells take twice their estimate
        self.assertEqual(b.scale(), 2.0)
        self.assertFalse(b.fits(35, now=40))
        b.record(10, 1000)
        b.record(10, 1000)
        self.assertEqual(b.scale(), 3.0)  # bounded

    def test_md_table_and_number_formats(self):
        t = bl.md_table(["a", "b"], [[1, None], ["x", 2.5]])
        self.assertEqual(t.splitlines(), ["| a | b |", "| --- | --- |", "| 1 |  |", "| x | 2.5 |"])
        self.assertEqual(bl.frange(1.234, 2.0), "1.23–2")
        self.assertIsNone(bl.fnum(None))


class Files(unittest.TestCase):
    def test_write_json_is_atomic_and_find_file_searches_in_order(self):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            bl.write_json(os.path.join(b, "x.json"), {"k": 1})
            self.assertEqual(os.listdir(b), ["x.json"])
            self.assertEqual(bl.find_file("x.json", [a, None, b]), os.path.join(b, "x.json"))
            bl.write_json(os.path.join(a, "x.json"), {"k": 2})
            self.assertEqual(bl.read_json(bl.find_file("x.json", [a, b])), {"k": 2})
            self.assertIsNone(bl.find_file("y.json", [a, b]))

    def test_input_files_takes_prefixed_json_but_not_the_merged_output(self):
        with tempfile.TemporaryDirectory() as d:
            for n in ("colocation-a-b.json", "colocation.json", "dedup-x.json", "colocation-a-b.json.tmp"):
                open(os.path.join(d, n), "w").close()
            got = bl.input_files([d], "colocation-", "colocation.json")
            self.assertEqual([os.path.basename(p) for p in got], ["colocation-a-b.json"])


class Processes(unittest.TestCase):
    def test_parse_line(self):
        self.assertEqual(bl.parse_line('READY {"a": 1}\n'), ("READY", {"a": 1}))
        self.assertEqual(bl.parse_line("RESULT\n"), ("RESULT", {}))
        self.assertIsNone(bl.parse_line("some warning printed by a library\n"))
        self.assertEqual(bl.parse_line("ERROR {oops"), ("ERROR", {"unparsed": "{oops"}))

    def test_clean_env_drops_mode_variables_but_keeps_the_benchmarks_own(self):
        base = {"PATH": "/bin", "LD_PRELOAD": "x.so", "CUDA_MPS_PIPE_DIRECTORY": "/p",
                "CUDA_MPS_CLIENT_PRIORITY": "1", "TANDEM_CLASS": "training",
                "TANDEM_SHARE_WEIGHTS": "on", bl.OWNER_ENV: "42", bl.FAKE_ENV: "1",
                "CUDA_VISIBLE_DEVICES": "0"}
        env = bl.clean_env(base, TANDEM_CLASS="inference")
        self.assertEqual(env, {"PATH": "/bin", bl.OWNER_ENV: "42", bl.FAKE_ENV: "1",
                               "CUDA_VISIBLE_DEVICES": "0", "TANDEM_CLASS": "inference"})

    def test_parse_environ(self):
        self.assertEqual(bl.parse_environ(b"A=1\0B=x=y\0\0junk\0"), {"A": "1", "B": "x=y"})

    def test_stale_entries_are_those_whose_driver_is_gone(self):
        me = str(os.getpid())
        entries = [
            (10, {bl.OWNER_ENV: "999999"}, "python3 colocation.py worker"),  # owner dead
            (11, {bl.OWNER_ENV: "555"}, "tandemd --no-config"),  # owner alive
            (12, {bl.OWNER_ENV: me}, "python3 dedup.py replica"),  # ours
            (13, {"PATH": "/bin"}, "bash"),  # not ours at all
            (14, {bl.OWNER_ENV: "garbage"}, "x"),
        ]
        stale = bl.stale_entries(entries, alive=lambda pid: pid == 555)
        self.assertEqual([pid for pid, _, _ in stale], [10])

    def test_kill_stale_ends_what_a_killed_driver_left(self):
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # a driver that no longer runs
        env = dict(os.environ, **{bl.OWNER_ENV: str(gone.pid)})
        left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                env=dict(os.environ, **{bl.OWNER_ENV: str(os.getpid())}))
        time.sleep(0.3)  # exec done: /proc/PID/environ shows the marker
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                ended = bl.kill_stale()
            self.assertIn(left.pid, ended)
            self.assertNotIn(mine.pid, ended)
            self.assertEqual(left.wait(timeout=10), -signal.SIGKILL)
            self.assertIsNone(mine.poll())
        finally:
            for p in (left, mine):
                p.kill()
                p.wait()

    def test_child_protocol_and_stop_kills_the_whole_process_group(self):
        prog = (
            "import json, subprocess, sys, time\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print('noise'); print('READY ' + json.dumps({'grandchild': g.pid}), flush=True)\n"
            "sys.stdin.readline()\n"  # GO
            "print('RESULT {\"ok\": true}', flush=True)\n"
            "signal = __import__('signal'); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "time.sleep(60)\n"
        )
        with tempfile.TemporaryDirectory() as d:
            k = bl.Child("t", [sys.executable, "-c", prog], dict(os.environ), os.path.join(d, "log"))
            ready = k.wait_for("READY", 20)
            k.send("GO 0")
            self.assertEqual(k.wait_for("RESULT", 20), {"ok": True})
            t = time.time()
            k.stop(grace=0.5)
            self.assertLess(time.time() - t, 10)
            self.assertIsNotNone(k.p.poll())
            deadline = time.time() + 5
            while time.time() < deadline and alive(ready["grandchild"]):
                time.sleep(0.05)
            self.assertFalse(alive(ready["grandchild"]), "grandchild survived stop()")

    def test_child_that_dies_early_is_a_bench_error_with_its_stderr(self):
        with tempfile.TemporaryDirectory() as d:
            k = bl.Child("t", [sys.executable, "-c", "import sys; sys.exit('boom here')"],
                         dict(os.environ), os.path.join(d, "log"))
            with self.assertRaises(bl.BenchError) as cm:
                k.wait_for("READY", 20)
            self.assertIn("boom here", str(cm.exception))
            k.stop()

    def test_child_error_line_is_raised(self):
        with tempfile.TemporaryDirectory() as d:
            k = bl.Child("t", [sys.executable, "-c", "print('ERROR {\"error\": \"OOM\"}', flush=True)"],
                         dict(os.environ), os.path.join(d, "log"))
            with self.assertRaises(bl.BenchError) as cm:
                k.wait_for("READY", 20)
            self.assertIn("OOM", str(cm.exception))
            k.stop()

    def test_mps_daemon_starts_on_private_directories_and_is_stopped(self):
        """Against a stand-in nvidia-cuda-mps-control: `-d` forks a daemon that
        keeps the inherited stdout open and creates PIPE/control; the `quit`
        client makes it exit. A daemon that ignores quit is killed."""
        fake = (
            "#!%s\n"
            "import os, sys, time\n"
            "pipe = os.environ['CUDA_MPS_PIPE_DIRECTORY']\n"
            "if sys.argv[1:] == ['-d']:\n"
            "    if os.fork():\n"
            "        sys.exit(0)\n"
            "    open(os.path.join(pipe, 'control'), 'w').close()\n"
            "    while not os.path.exists(os.path.join(pipe, 'quit')):\n"
            "        time.sleep(0.05)\n"
            "    if not os.path.exists(os.path.join(pipe, 'stubborn')):\n"
            "        sys.exit(0)\n"
            "    time.sleep(600)\n"
            "elif sys.stdin.read().strip() == 'quit':\n"
            "    open(os.path.join(pipe, 'quit'), 'w').close()\n"
        ) % sys.executable
        with tempfile.TemporaryDirectory(dir="/tmp") as d:
            bindir = os.path.join(d, "bin")
            os.makedirs(bindir)
            path = os.path.join(bindir, bl.MPS_CONTROL)
            with open(path, "w") as f:
                f.write(fake)
            os.chmod(path, 0o755)
            old = os.environ["PATH"]
            os.environ["PATH"] = bindir + os.pathsep + old
            try:
                for stubborn in (False, True):
                    cell = os.path.join(d, f"cell{int(stubborn)}")
                    t = time.time()
                    with contextlib.redirect_stderr(io.StringIO()):
                        with bl.mps_daemon(cell, stop_wait_s=1.0) as dirs:
                            pipe = dirs["CUDA_MPS_PIPE_DIRECTORY"]
                            self.assertEqual(pipe, os.path.join(cell, "mps-pipe"))
                            daemons = bl.pids_with_env("CUDA_MPS_PIPE_DIRECTORY", pipe)
                            self.assertEqual(len(daemons), 1)
                            if stubborn:
                                open(os.path.join(pipe, "stubborn"), "w").close()
                    self.assertLess(time.time() - t, 10)
                    time.sleep(0.2)
                    self.assertFalse(alive(daemons[0]))
            finally:
                os.environ["PATH"] = old

    @unittest.skipUnless(built_bin(), "no tandemd under target/ (cargo build --release -p tandem-shim -p tandem-coordinator)")
    def test_tandemd_starts_on_a_private_socket_and_stops(self):
        with tempfile.TemporaryDirectory(dir="/tmp") as d:
            with bl.tandemd(built_bin(), os.path.join(d, "td")) as td:
                snap = td.stats()
                self.assertEqual(snap["clients"], [])
                pid = td.proc.pid
                self.assertEqual(bl.dedup_view(snap)["clients"], [])
            self.assertIsNotNone(td.proc.poll())
            self.assertFalse(alive(pid))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class StatsViews(unittest.TestCase):
    SNAP = {
        "gpus": [{"uuid": "GPU-1", "name": "H100", "clients": [1], "launches": 5,
                  "dedup_saved_bytes": 100, "dedup_merges": 3}],
        "totals": {"launches": 9, "dedup_cow_breaks": 1},
        "dedup": {"merge_latency_ms": {"p50": 2.0}},
        "clients": [{"id": 1, "pid": 100, "class": "inference", "class_claimed": "inference",
                     "class_reason": "claimed", "gate_waits": 0, "gate_wait_ns": 0,
                     "launches": 7, "dedup_shared_bytes": 64, "top_kernels": []}],
        "departed": [{"id": 2, "pid": 200, "class": "training", "gate_waits": 12,
                      "gate_wait_ns": 3000, "launches": 70, "sched": {"backlog_ns": 5}}],
    }

    def test_dedup_view_collects_every_dedup_key(self):
        v = bl.dedup_view(self.SNAP)
        self.assertEqual(v["top"], {"dedup": {"merge_latency_ms": {"p50": 2.0}}})
        self.assertEqual(v["totals"], {"dedup_cow_breaks": 1})
        self.assertEqual(v["gpus"], [{"uuid": "GPU-1", "dedup_saved_bytes": 100, "dedup_merges": 3}])
        self.assertEqual(v["clients"], [{"pid": 100, "dedup_shared_bytes": 64}])
        self.assertEqual(v["departed"], [])
        self.assertIsNone(bl.dedup_view(None))

    def test_client_views_prefer_the_final_departed_entry(self):
        v = bl.client_views(self.SNAP, None, [100, 200, 300])
        self.assertEqual(v[200]["source"], "departed")
        self.assertEqual(v[200]["gate_waits"], 12)
        self.assertEqual(v[200]["sched"], {"backlog_ns": 5})
        self.assertEqual(v[100]["source"], "live")
        self.assertEqual(v[100]["dedup_shared_bytes"], 64)
        self.assertNotIn("top_kernels", v[100])
        self.assertIsNone(v[300])


# ---------------------------------------------------------------- colocation


def co_args(*extra):
    return ["--pair", "resnet50_b4:resnet50_train", *extra]


class ColocationPlan(unittest.TestCase):
    def test_parse_pair_and_modes(self):
        self.assertEqual(co.parse_pair("bert_b8:gpt2_train"), ("bert_b8", "gpt2_train"))
        for bad in ("bert_b8", "bert_b8:nope", "x:gpt2_train", ""):
            with self.assertRaises(Exception):
                co.parse_pair(bad)
        self.assertEqual(co.parse_modes("tandem,plain"), ["alone", "plain", "tandem"])
        with self.assertRaises(Exception):
            co.parse_modes("plain,turbo")

    def test_cells_are_rep_major_with_alone_first_and_modes_rotating(self):
        order = co.cell_order(co.MODES, 3)
        n = len(co.MODES)
        self.assertEqual(len(order), 3 * n)
        self.assertEqual([r for r, _ in order], [0] * n + [1] * n + [2] * n)
        for rep in range(3):
            modes = [m for r, m in order if r == rep]
            self.assertEqual(modes[0], "alone")
            self.assertEqual(sorted(modes), sorted(co.MODES))
        self.assertEqual([m for r, m in order if r == 0][1], "plain")
        self.assertEqual([m for r, m in order if r == 1][1], "mps")

    def test_remaining_cells_skip_done_ones_and_retry_failed_ones(self):
        doc = co.new_doc("resnet50_b4", "resnet50_train", {})
        doc["runs"] = [{"rep": 0, "mode": "alone"}, {"rep": 0, "mode": "plain"},
                       {"rep": 1, "mode": "alone", "error": "x"}]
        rest = co.remaining_cells(doc, ["alone", "plain"], 2)
        self.assertEqual(rest, [(1, "alone"), (1, "plain")])

    def test_rate_is_fixed_measured_or_auto_in_an_alone_cell(self):
        doc = co.new_doc("resnet50_b32", "gpt2_train", {})
        self.assertEqual(co.rate_arg(doc, "plain"), "40")
        doc = co.new_doc("bert_b8", "gpt2_train", {})
        self.assertEqual(co.rate_arg(doc, "alone"), "auto")
        self.assertIsNone(co.rate_arg(doc, "plain"))
        doc["rate_rps"] = 123.456
        self.assertEqual(co.rate_arg(doc, "tandem"), "123.456")

    def test_each_mode_sets_exactly_its_environment(self):
        doc = co.new_doc("resnet50_b4", "gpt2_train", {})
        cfg = {"warmup_s": 3, "window_s": 20, "drain_max_s": 30, "seed": 1}

        def envs(mode):
            return {role: env for role, _, env in
                    co.cell_procs(doc, 0, mode, cfg, "/b", "/w/c", "100")}

        self.assertEqual(envs("plain"), {"inference": {}, "training": {}})
        self.assertEqual(envs("alone"), {"inference": {}, "training": {}})
        mps = envs("mps")
        self.assertEqual(mps["inference"]["CUDA_MPS_PIPE_DIRECTORY"], "/w/c/mps-pipe")
        self.assertEqual(mps["training"], mps["inference"])
        low = envs("mps_lowprio")
        self.assertEqual(low["training"]["CUDA_MPS_CLIENT_PRIORITY"], "1")
        self.assertNotIn("CUDA_MPS_CLIENT_PRIORITY", low["inference"])
        t = envs("tandem")
        self.assertEqual(t["inference"]["LD_PRELOAD"], "/b/libtandem.so")
        self.assertEqual(t["inference"]["TANDEM_CLASS"], "inference")
        self.assertEqual(t["training"]["TANDEM_CLASS"], "training")
        self.assertEqual(t["training"]["TANDEM_SOCKET"], "/w/c/td/tandemd.sock")
        self.assertNotIn("CUDA_MPS_PIPE_DIRECTORY", t["training"])
        tm = envs("tandem_mps")
        # tandem over MPS: tandemd's [mps] starts the daemon and the shims
        # set the MPS variables; a job's own CUDA_MPS_PIPE_DIRECTORY would
        # make its shim keep the job's MPS settings, so none is set here.
        self.assertNotIn("CUDA_MPS_PIPE_DIRECTORY", tm["training"])
        self.assertIn("LD_PRELOAD", tm["training"])
        self.assertNotIn("CUDA_MPS_CLIENT_PRIORITY", tm["training"])
        self.assertEqual(co.tandemd_config("tandem_mps"), "[mps]\nenabled = true\n")
        self.assertIsNone(co.tandemd_config("tandem"))
        self.assertFalse(co.own_mps("tandem_mps"))
        # Issue 23's mode: tandem over MPS with the SM reservation asked for;
        # the jobs are set up as under tandem_mps.
        self.assertEqual(envs("tandem_spatial"), tm)
        self.assertFalse(co.own_mps("tandem_spatial"))
        import tomllib
        cfg_sp = tomllib.loads(co.tandemd_config("tandem_spatial"))
        self.assertEqual(cfg_sp, {"mps": {"enabled": True}, "scheduler": {"spatial": "auto"}})
        self.assertTrue(co.own_mps("mps_lowprio"))
        argv = co.cell_procs(doc, 2, "plain", cfg, "/b", "/w/c", "100")[0][1]
        self.assertEqual(argv[argv.index("--seed") + 1], 1002)  # arrivals differ per rep

    def test_plan_lines_show_every_cell_and_the_rate_source(self):
        doc = co.new_doc("bert_b8", "resnet50_train", {})
        cfg = {"warmup_s": 3, "window_s": 20, "drain_max_s": 30, "seed": 1}
        lines = co.plan_lines(doc, ["alone", "plain"], 2, cfg, "/b", 540)
        text = "\n".join(lines)
        self.assertEqual(sum(1 for ln in lines if ln.startswith("[")), 4)
        self.assertIn("--rate auto", text)
        self.assertEqual(text.count("--rate auto"), 1)
        self.assertIn("from the first alone cell", text)


class ColocationStats(unittest.TestCase):
    def test_poisson_arrivals_are_seeded_and_have_the_rate(self):
        a = co.poisson_arrivals(100, 20, 7)
        self.assertEqual(a, co.poisson_arrivals(100, 20, 7))
        self.assertNotEqual(a, co.poisson_arrivals(100, 20, 8))
        self.assertTrue(all(0 <= x < 20 for x in a))
        self.assertEqual(a, sorted(a))
        self.assertLess(abs(len(a) - 2000), 4 * 2000 ** 0.5)

    def test_inference_summary_counts_the_window_and_unfinished_requests(self):
        recs = [(0.5, 0.6), (1.0, 1.010), (1.5, 1.520), (2.0, None), (3.5, 3.6)]
        s = co.inference_summary(recs, 1.0, 3.0, stop_t=2.5)
        self.assertEqual(s["requests"], 3)
        self.assertEqual(s["unfinished"], 1)
        self.assertEqual(s["latencies_ms"], [10.0, 20.0, 500.0])
        self.assertAlmostEqual(s["p50_ms"], 20.0)
        self.assertAlmostEqual(s["max_ms"], 500.0)
        self.assertAlmostEqual(s["achieved_rps"], 1.5)
        self.assertIsNone(co.inference_summary([], 0, 1, 1)["p99_ms"])

    def test_steps_per_s_interpolates_and_counts_stalls(self):
        steady = [0.1 * i for i in range(1, 301)]  # 10 steps/s for 30 s
        self.assertAlmostEqual(co.steps_per_s(steady, 3.0, 23.0), 10.0, places=6)
        self.assertAlmostEqual(co.steps_per_s(steady, 3.05, 23.05), 10.0, places=6)
        # a 10 s stall in the middle of a 20 s window halves the rate
        stall = [t for t in steady if t < 8] + [t + 10 for t in steady if t >= 8]
        self.assertAlmostEqual(co.steps_per_s(stall, 3.0, 23.0), 5.0, places=1)
        self.assertEqual(co.completed_by([], 5), 0.0)
        self.assertIsNone(co.steps_per_s(steady, 2, 2))


def synthetic_pair_doc(inf="resnet50_b4", train="resnet50_train", window=20):
    doc = co.new_doc(inf, train, {"warmup_s": 3, "window_s": window, "drain_max_s": 30,
                                  "seed": 1, "explicit_requests": False})
    vals = {  # mode: [(p50, p99, steps/s) per rep]
        "alone": [(10, 40, 10.0), (11, 50, 9.0), (9, 45, 11.0)],
        "plain": [(20, 120, 8.5), (25, 150, 8.0), (22, 130, 9.0)],
        "tandem": [(11, 44, 9.0), (10, 46, 8.5), (12, 48, 8.8)],
    }
    for mode, reps in vals.items():
        for rep, (p50, p99, sps) in enumerate(reps):
            run = {"rep": rep, "mode": mode, "device": "H100", "driver": "580", "date": "2026-11-22",
                   "inference": {"p50_ms": p50, "p99_ms": p99, "unfinished": 0},
                   "training": {"steps_per_s": sps, "batch": 64}}
            if mode == "tandem":
                run["coordinator"] = {"inference": {"class": "inference"},
                                      "training": {"class": "training", "gate_waits": rep}}
            doc["runs"].append(run)
    return doc


class ColocationReport(unittest.TestCase):
    def test_pair_rows(self):
        rows = {r["mode"]: r for r in co.pair_rows(synthetic_pair_doc())}
        self.assertEqual(list(rows), ["alone", "plain", "tandem"])
        p = rows["plain"]
        self.assertEqual(p["p99_ms"], 130)
        self.assertAlmostEqual(p["p99_ratio"], 130 / 45)
        self.assertEqual((p["p99_min_ms"], p["p99_max_ms"]), (120, 150))
        self.assertAlmostEqual(p["train_fraction"], 0.85)
        self.assertAlmostEqual(p["train_fraction_min"], 0.8)
        self.assertAlmostEqual(p["train_fraction_max"], 0.9)
        self.assertEqual(p["p50_ms"], 22)
        self.assertEqual(p["reps"], 3)
        self.assertFalse(p["meets_target"])
        t = rows["tandem"]
        self.assertAlmostEqual(t["p99_ratio"], 46 / 45)
        self.assertAlmostEqual(t["train_fraction"], 0.88)
        self.assertTrue(t["meets_target"])
        self.assertEqual([c["training"]["gate_waits"] for c in t["coordinator"]], [0, 1, 2])
        self.assertTrue(t["classes_granted"])
        self.assertNotIn("coordinator", p)
        self.assertAlmostEqual(rows["alone"]["p99_ratio"], 1.0)
        self.assertNotIn("meets_target", rows["alone"])
        for key in ("inference", "training", "mode", "p50_ms", "p99_ms", "p99_ratio",
                    "train_fraction", "p99_min_ms", "p99_max_ms", "train_fraction_min",
                    "train_fraction_max", "reps", "device", "driver", "date"):
            self.assertIn(key, p)
        self.assertEqual((p["device"], p["driver"], p["date"]), ("H100", "580", "2026-11-22"))

    def test_tandem_rows_say_when_a_job_ran_without_its_class(self):
        doc = synthetic_pair_doc()
        doc["runs"][-1]["coordinator"]["training"] = None  # never registered: fail-open
        rows = {r["mode"]: r for r in co.pair_rows(doc)}
        self.assertFalse(rows["tandem"]["classes_granted"])

    def test_failed_runs_are_ignored_and_a_missing_baseline_gives_no_ratio(self):
        doc = synthetic_pair_doc()
        doc["runs"] = [r for r in doc["runs"] if r["mode"] != "alone"]
        doc["runs"].append({"rep": 3, "mode": "plain", "error": "died"})
        rows = {r["mode"]: r for r in co.pair_rows(doc)}
        self.assertEqual(rows["plain"]["reps"], 3)
        self.assertIsNone(rows["plain"]["p99_ratio"])
        self.assertIsNone(rows["plain"]["train_fraction"])

    def test_merge_docs_unites_partial_files_of_one_pair(self):
        full = synthetic_pair_doc()
        a = dict(full, runs=full["runs"][:4])
        b = dict(full, runs=full["runs"][3:])
        merged = co.merge_docs([a, b])
        self.assertEqual(len(merged["resnet50_b4:resnet50_train"]["runs"]), 9)
        other = synthetic_pair_doc(window=10)
        other["runs"] = other["runs"][:2]
        with contextlib.redirect_stderr(io.StringIO()) as err:
            merged = co.merge_docs([full, other])
        self.assertIn("different settings", err.getvalue())
        self.assertEqual(len(merged["resnet50_b4:resnet50_train"]["runs"]), 9)

    def test_report_writes_json_markdown_and_png_when_possible(self):
        with tempfile.TemporaryDirectory() as d:
            ind, out = os.path.join(d, "in"), os.path.join(d, "out")
            os.makedirs(ind)
            bl.write_json(os.path.join(ind, co.pair_file("resnet50_b4", "resnet50_train")),
                          synthetic_pair_doc())
            bl.write_json(os.path.join(ind, co.pair_file("bert_b8", "gpt2_train")),
                          synthetic_pair_doc("bert_b8", "gpt2_train"))
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(co.main(["report", "--in", ind, "--out", out]), 0)
            rows = bl.read_json(os.path.join(out, "colocation.json"))
            self.assertEqual(len(rows), 6)
            with open(os.path.join(out, "colocation.md")) as f:
                md = f.read()
            self.assertIn("| bert_b8 | gpt2_train | tandem |", md)
            self.assertIn("H100, driver 580, 2026-11-22", md)
            self.assertIn("130 (120–150)", md)
            self.assertEqual(os.path.exists(os.path.join(out, "colocation.png")), have_matplotlib())

    @unittest.skipUnless(have_matplotlib(), "matplotlib not installed")
    def test_png(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.png")
            self.assertTrue(co.plot(co.pair_rows(synthetic_pair_doc()), path))
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class DryRuns(unittest.TestCase):
    def test_colocation_dry_run_imports_no_gpu_package(self):
        with tempfile.TemporaryDirectory() as d:
            p = run_script("colocation.py", co_args("--dry-run", "--bin", "/b"),
                           {"PYTHONPATH": poisoned_path(d)})
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn(f"{3 * len(co.MODES)} cell(s) to run", out)
        self.assertIn('[scheduler] spatial = "auto"', out)
        self.assertIn("nvidia-cuda-mps-control -d", out)
        self.assertIn("CUDA_MPS_CLIENT_PRIORITY=1", out)
        self.assertIn("/b/tandemd --no-config --socket", out)
        self.assertIn("LD_PRELOAD=/b/libtandem.so", out)
        self.assertIn("TANDEM_CLASS=training", out)
        self.assertIn("colocation.py worker --role inference --model resnet50 --batch 4 ", out)
        self.assertIn(" --rate 100 ", out)
        self.assertIn("echo quit | nvidia-cuda-mps-control", out)

    def test_colocation_dry_run_in_process_leaves_torch_unimported(self):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(co.main(co_args("--dry-run", "--modes", "plain", "--reps", "1")), 0)
        self.assertIn("[2/2] rep 1 plain", out.getvalue())
        for mod in POISONED:
            self.assertNotIn(mod, sys.modules)

    def test_colocation_dry_run_resumes_from_a_pair_file(self):
        with tempfile.TemporaryDirectory() as d:
            doc = synthetic_pair_doc()
            doc["config"] = {"warmup_s": 3.0, "window_s": 20.0, "drain_max_s": 30.0, "seed": 1,
                             "explicit_requests": False}
            bl.write_json(os.path.join(d, co.pair_file("resnet50_b4", "resnet50_train")), doc)
            with contextlib.redirect_stdout(io.StringIO()) as out:
                co.main(co_args("--dry-run", "--modes", "plain,tandem", "--resume", d,
                                "--out", os.path.join(d, "new")))
            self.assertIn("0 cell(s) to run (9 already done)", out.getvalue())
            with contextlib.redirect_stdout(io.StringIO()) as out:
                co.main(co_args("--dry-run", "--modes", "plain,tandem,mps", "--reps", "4",
                                "--resume", d, "--out", os.path.join(d, "new")))
            self.assertIn("7 cell(s) to run (9 already done)", out.getvalue())
            with self.assertRaises(SystemExit):  # other settings: refuse, do not mix
                with contextlib.redirect_stdout(io.StringIO()):
                    co.main(co_args("--dry-run", "--window", "10", "--resume", d,
                                    "--out", os.path.join(d, "new")))

    def test_dedup_dry_run_imports_no_gpu_package(self):
        with tempfile.TemporaryDirectory() as d:
            p = run_script("dedup.py", ["--model", "gpt_1b3", "--loader", "safetensors",
                                        "--replicas", "4", "--bin", "/b", "--dry-run",
                                        "--weights-dir", os.path.join(d, "w")],
                           {"PYTHONPATH": poisoned_path(d)})
            self.assertEqual(p.returncode, 0, p.stderr)
            out = p.stdout
            self.assertIn("dedup.py prepare --model gpt_1b3", out)
            self.assertEqual(out.count("start replica"), 8)
            self.assertEqual(out.count("TANDEM_SHARE_WEIGHTS=on"), 5)  # the pass line + 4 replicas
            self.assertEqual(out.count("TANDEM_SHARE_WEIGHTS=off"), 5)
            self.assertIn("LD_PRELOAD=/b/libtandem.so", out)
            self.assertIn("--loader safetensors", out)
            p = run_script("dedup.py", ["--model", "resnet50", "--loader", "torch_load",
                                        "--mode", "adversarial_kernel", "--bin", "/b", "--replicas", "2,4",
                                        "--dry-run", "--weights-dir", os.path.join(d, "w")],
                           {"PYTHONPATH": poisoned_path(d)})
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("pass unshared: 1 replica(s)", p.stdout)
            self.assertIn("pass shared: 3 replica(s)", p.stdout)
            self.assertIn("param.data.mul_(2)", p.stdout)


# ---------------------------------------------------------------- dedup


def samples(points, step=0.1):
    """(t, bytes) every `step` s from a list of (until_t, value) pieces."""
    out, t = [], 0.0
    for until, v in points:
        while t < until - 1e-9:
            out.append((round(t, 3), v))
            t += step
    return out


class DedupPure(unittest.TestCase):
    def test_settled_waits_for_the_minimum_to_stop_falling(self):
        s = samples([(2, 1000), (4, 800), (20, 600)])
        tol = 10
        self.assertFalse(dd.settled(s, 0, 2.5, quiet=1, tol=tol))
        self.assertFalse(dd.settled(s, 0, 4.5, quiet=1, tol=tol))  # dropped at 4
        self.assertTrue(dd.settled(s, 0, 5.5, quiet=1, tol=tol))
        self.assertFalse(dd.settled(s, 0, 5.5, quiet=1, tol=tol, at_least=8))
        self.assertTrue(dd.settled(s, 0, 8.5, quiet=1, tol=tol, at_least=8))
        flat = samples([(3, 500)])
        self.assertFalse(dd.settled(flat, 0, 0.9, quiet=1, tol=tol))
        self.assertTrue(dd.settled(flat, 0, 2.0, quiet=1, tol=tol))

    def test_settle_summary(self):
        s = samples([(2, 1000), (4, 800), (10, 600)])
        r = dd.settle_summary(s, 0.0, 9.95, tol=10)
        self.assertEqual((r["start_bytes"], r["min_bytes"], r["level_bytes"]), (1000, 600, 600))
        self.assertAlmostEqual(r["seconds_to_min"], 4.0)
        self.assertEqual(r["drop_bytes"], 400)
        self.assertIsNone(dd.settle_summary(s, 50, 60, 10))

    def test_latency_fields_are_found_wherever_tandemd_puts_them(self):
        view = bl.dedup_view(StatsViews.SNAP)
        self.assertEqual(dd.latency_fields(view), {"top.dedup.merge_latency_ms": {"p50": 2.0}})
        self.assertEqual(dd.latency_fields(None), {})

    def test_writer_message(self):
        err = "warning: x\ntandem[7]: kernel wrote merged memory; TANDEM_SHARE_WEIGHTS=off\nTraceback\n  boom\n"
        self.assertIn("TANDEM_SHARE_WEIGHTS=off", dd.writer_message(err))
        self.assertEqual(dd.writer_message("a\nRuntimeError: CUDA error\n\n"), "RuntimeError: CUDA error")
        self.assertEqual(dd.writer_message(""), "")

    def test_cell_lists(self):
        self.assertEqual(dd.cells(["to_cuda", "safetensors"], [2, 4], ["shared", "adversarial_kernel"]),
                         [("to_cuda", 2, "shared"), ("to_cuda", 4, "shared"),
                          ("safetensors", 2, "shared"), ("safetensors", 4, "shared"),
                          ("to_cuda", 3, "adversarial_kernel"), ("safetensors", 3, "adversarial_kernel")])
        self.assertEqual(dd.parse_list(int)("2,4"), [2, 4])
        self.assertEqual(dd.parse_list(str, dd.LOADERS)("torch_load"), ["torch_load"])
        for bad, kind, choices in (("2,x", int, None), ("to_gpu", str, dd.LOADERS), ("", str, dd.LOADERS)):
            with self.assertRaises(Exception):
                dd.parse_list(kind, choices)(bad)

    def test_cells_and_passes(self):
        self.assertEqual(dd.cell_name("gpt_1b3", "to_cuda", 4, "shared"), "dedup-gpt_1b3-to_cuda-r4")
        self.assertEqual(dd.cell_name("resnet50", "to_cuda", 4, "adversarial_kernel"),
                         "dedup-resnet50-to_cuda-adversarial_kernel")
        self.assertEqual(dd.cell_passes(2, "shared"),
                         [("unshared", 2, False, None), ("shared", 2, True, None)])
        self.assertEqual(dd.cell_passes(4, "adversarial_memcpy"),
                         [("unshared", 1, False, None), ("shared", 3, True, "memcpy")])

    def doc(self, mode="shared", n=2, digests=None, writer=None):
        G = 1 << 30
        un = {"replicas": n if mode == "shared" else 1, "baseline_bytes": G,
              "settle": {"level_bytes": G + n * 3 * G, "min_bytes": G + n * 3 * G,
                         "start_bytes": G + n * 3 * G, "seconds_to_min": 0.0},
              "digests": ["d"] * (n if mode == "shared" else 1), "after_exit_bytes": 0, "errors": []}
        sh = {"replicas": n, "baseline_bytes": G,
              "settle": {"level_bytes": G + n * G + 2 * G + int(0.05 * 2 * G),
                         "min_bytes": G + n * G + 2 * G, "start_bytes": G + n * 3 * G,
                         "seconds_to_min": 4.2},
              "digests": digests or ["d"] * n, "after_exit_bytes": 5 << 20,
              "writer": writer, "errors": []}
        return {"model": "gpt_1b3", "loader": "safetensors", "mode": mode, "replicas": n,
                "weight_bytes": 2 * G, "tol_after_bytes": 32 << 20, "device": "H100",
                "driver": "580", "date": "2026-11-22", "passes": {"unshared": un, "shared": sh}}

    def test_dedup_row_shared(self):
        # 2 replicas: 1 GiB context + 2 GiB weights each unshared; shared: weights once + 5%
        row = dd.dedup_row(self.doc())
        G = 1 << 30
        self.assertEqual(row["bytes_unshared"], 6 * G)
        self.assertEqual(row["bytes_used"], 4 * G + int(0.1 * G))
        self.assertAlmostEqual(row["saved_fraction"], (2 * G - int(0.1 * G)) / (2 * G))
        self.assertAlmostEqual(row["total_saving"], 1 - (4 * G + int(0.1 * G)) / (6 * G))
        self.assertEqual(row["merge_seconds"], 4.2)
        self.assertTrue(row["outputs_identical"])
        self.assertTrue(row["memory_back_at_baseline"])
        for key in ("model", "loader", "replicas", "weight_bytes", "bytes_unshared", "bytes_used",
                    "saved_fraction", "total_saving", "merge_seconds", "outputs_identical",
                    "device", "driver", "date"):
            self.assertIn(key, row)
        self.assertFalse(dd.dedup_row(self.doc(digests=["d", "e"]))["outputs_identical"])
        self.assertFalse(dd.dedup_row(self.doc(digests=["d", None]))["outputs_identical"])

    def test_dedup_row_adversarial(self):
        ok_kernel = {"how": "kernel", "continued": False, "exit": 1,
                     "message": "tandem: ... TANDEM_SHARE_WEIGHTS=off"}
        row = dd.dedup_row(self.doc("adversarial_kernel", 3, [None, "d", "d"], ok_kernel))
        self.assertTrue(row["writer_as_expected"])
        self.assertTrue(row["others_identical"])
        self.assertEqual(row["writer_exit"], 1)
        self.assertNotIn("saved_fraction", row)
        silent = dict(ok_kernel, message="RuntimeError: illegal memory access")
        self.assertFalse(dd.dedup_row(self.doc("adversarial_kernel", 3, [None, "d", "d"],
                                               silent))["writer_as_expected"])
        memcpy = {"how": "memcpy", "continued": True, "exit": 0, "message": ""}
        row = dd.dedup_row(self.doc("adversarial_memcpy", 3, ["x", "d", "d"], memcpy))
        self.assertTrue(row["writer_as_expected"])
        self.assertTrue(row["writer_digest_changed"])
        row = dd.dedup_row(self.doc("adversarial_memcpy", 3, ["x", "d", "e"], memcpy))
        self.assertFalse(row["others_identical"])


class CaptureTraces(unittest.TestCase):
    """colocation.capture_traces: tandemd's /trace of each live job, written
    beside the cell; what it could not get is recorded, not raised."""

    def test_each_live_job_is_asked_by_its_id_and_written(self):
        class Td:
            stats_sock = "/nonexistent/stats.sock"

            def try_stats(self):
                return {"clients": [{"pid": 11, "id": 3}, {"pid": 12, "id": 4}]}

        asked = []

        def http_get(sock, path):
            asked.append((sock, path))
            if "id=3" in path:
                return "HTTP/1.1 200 OK", '{"format": "tandem-trace/1"}'
            return "HTTP/1.1 409 Conflict", "client 4 has reported no kernel launch in the last 8 s\n"

        real = bl.td.http_get
        bl.td.http_get = http_get
        try:
            with tempfile.TemporaryDirectory() as d:
                got = co.capture_traces(Td(), {"inference": 11, "training": 12, "other": 13}, 8.0,
                                        os.path.join(d, "traces"), "a-b-r0-tandem")
                self.assertEqual(got["inference"], "ok")
                self.assertTrue(got["training"].startswith("/trace answered HTTP/1.1 409"), got)
                self.assertIn("no kernel launch", got["training"])
                self.assertEqual(got["other"], "no live client with pid 13 in /stats")
                self.assertEqual(os.listdir(os.path.join(d, "traces")), ["a-b-r0-tandem-inference.json"])
                with open(os.path.join(d, "traces", "a-b-r0-tandem-inference.json")) as f:
                    self.assertEqual(json.load(f)["format"], "tandem-trace/1")
        finally:
            bl.td.http_get = real
        self.assertEqual(asked, [(Td.stats_sock, "/trace?id=3&seconds=8"),
                                 (Td.stats_sock, "/trace?id=4&seconds=8")])


# ---------------------------------------------------------------- end to end, simulated


class EndToEndFake(unittest.TestCase):
    """Both drivers with TANDEM_BENCH_FAKE=1: workers sleep instead of using a
    GPU; the protocol, the timing, resumption and the files are real."""

    FAKE = {bl.FAKE_ENV: "1"}

    def test_colocation_pair_runs_resumes_and_reports(self):
        b = built_bin()
        modes = "plain,tandem" if b else "plain"
        with tempfile.TemporaryDirectory() as d:
            args = co_args("--modes", modes, "--reps", "2", "--warmup", "0.2", "--window", "0.6",
                           "--drain-max", "2", "--out", d, "--bin", b or "/nonexistent")
            p = run_script("colocation.py", args, self.FAKE)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("[1/", p.stdout)
            doc = bl.read_json(os.path.join(d, co.pair_file("resnet50_b4", "resnet50_train")))
            cells = 2 * (1 + modes.count(",") + 1)
            self.assertEqual(len(doc["runs"]), cells, doc.get("failed"))
            for r in doc["runs"]:
                self.assertGreater(r["inference"]["requests"], 20)
                self.assertGreater(r["training"]["steps_per_s"], 5)
                self.assertEqual(r["exit"], {"inference": 0, "training": 0})
                if r["mode"] == "tandem":
                    self.assertIn("coordinator", r)
                    # The stand-in workers make no CUDA call, so tandemd
                    # never meets them: the capture says so, per role.
                    self.assertEqual(set(r["captured"]), {"inference", "training"})
            p = run_script("colocation.py", args, self.FAKE)  # all done: nothing runs
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("0 cell(s) to run", p.stdout)
            out = os.path.join(d, "rep")
            p = run_script("colocation.py", ["report", "--in", d, "--out", out])
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual({r["mode"] for r in bl.read_json(os.path.join(out, "colocation.json"))},
                             {"alone", *modes.split(",")})
            self.assertEqual([n for n in os.listdir("/tmp") if n.startswith("tb-col-") and
                              os.stat(os.path.join("/tmp", n)).st_mtime > time.time() - 60], [])

    def test_colocation_stops_before_overrunning_its_budget(self):
        with tempfile.TemporaryDirectory() as d:
            p = run_script("colocation.py", co_args("--modes", "plain", "--reps", "1", "--budget", "5",
                                                    "--out", d), self.FAKE)
            self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
            self.assertIn("--resume", p.stdout)
            doc = bl.read_json(os.path.join(d, co.pair_file("resnet50_b4", "resnet50_train")))
            self.assertEqual(doc["runs"], [])

    def test_colocation_sigterm_stops_the_workers(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, **self.FAKE)
            p = subprocess.Popen([sys.executable, os.path.join(HERE, "colocation.py"),
                                  *co_args("--modes", "plain", "--reps", "1", "--window", "30",
                                           "--warmup", "0.1", "--out", d)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 20
            workers = []
            while time.time() < deadline and len(workers) < 2:
                workers = [pid for pid, e, cmd in bl.proc_entries()
                           if e.get(bl.OWNER_ENV) == str(p.pid) and "worker" in cmd]
                time.sleep(0.1)
            self.assertEqual(len(workers), 2)
            time.sleep(1.0)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 130, err)
            time.sleep(0.5)
            self.assertEqual([w for w in workers if alive(w)], [])

    def test_dedup_cells_run_and_report(self):
        with tempfile.TemporaryDirectory() as d:
            common = ["--model", "resnet50", "--loader", "safetensors", "--settle-quiet", "0.5",
                      "--settle-min", "1", "--level-s", "0.3", "--weights-dir", os.path.join(d, "w"), "--out", d]
            p = run_script("dedup.py", common + ["--replicas", "2"], self.FAKE)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = run_script("dedup.py", common + ["--mode", "shared,adversarial_kernel,adversarial_memcpy",
                                                 "--replicas", "2"], self.FAKE)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("dedup-resnet50-safetensors-r2: already done", p.stdout)
            self.assertEqual(sorted(n for n in os.listdir(d) if n.endswith(".json")),
                             ["dedup-resnet50-safetensors-adversarial_kernel.json",
                              "dedup-resnet50-safetensors-adversarial_memcpy.json",
                              "dedup-resnet50-safetensors-r2.json"])
            out = os.path.join(d, "rep")
            p = run_script("dedup.py", ["report", "--in", d, "--out", out])
            self.assertEqual(p.returncode, 0, p.stderr)
            rows = {r["mode"]: r for r in bl.read_json(os.path.join(out, "dedup.json"))}
            s = rows["shared"]
            self.assertAlmostEqual(s["saved_fraction"], 1.0, places=2)
            self.assertAlmostEqual(s["total_saving"], dd.FAKE_WEIGHT_BYTES /
                                   (2 * (dd.FAKE_WEIGHT_BYTES + dd.FAKE_CONTEXT_BYTES)), places=2)
            self.assertTrue(s["outputs_identical"])
            self.assertTrue(s["memory_back_at_baseline"])
            self.assertGreater(s["merge_seconds"], 0.3)
            k = rows["adversarial_kernel"]
            self.assertTrue(k["writer_as_expected"], k)
            self.assertTrue(k["others_identical"])
            self.assertIn(dd.REMEDY, k["writer_message"])
            m = rows["adversarial_memcpy"]
            self.assertTrue(m["writer_as_expected"], m)
            self.assertTrue(m["writer_digest_changed"])
            self.assertTrue(m["others_identical"])
            self.assertGreater(m["bytes_after_write"], s["bytes_used"])
            with open(os.path.join(out, "dedup.md")) as f:
                self.assertIn("| resnet50 | safetensors | 2 |", f.read())


if __name__ == "__main__":
    unittest.main()
