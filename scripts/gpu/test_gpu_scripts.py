"""Tests of scripts/gpu/'s orchestration against real processes (no GPU).

    python3 -m unittest scripts/gpu/test_gpu_scripts.py

The three faults issue 15 names, each with a test that fails without its fix:
- interposition.py: a child past its timeout took the run's results with it
  (subprocess.TimeoutExpired was not caught; the JSON was written only at the end);
- coordinator.py: a job whose thread raised dropped out of the comparison, so
  the run could pass on the other job alone;
- the empty-kernel overhead loop was a Python (CuPy) loop, ~5 us per launch;
  it is now tests/hosts/launch_loop.c, timed in C.
follow.py's parent also runs here against real children (its seam). The
end-to-end tests use the test seam TANDEM_GPU_FAKE=1 (children drive the
fake driver through ctypes; follow.py's children simulate) with the shim,
tandemd and fake driver built under
target/debug (cargo test builds them); they are skipped where those are absent.
"""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import coordinator as co  # noqa: E402
import interposition as ip  # noqa: E402

BIN = os.path.join(ROOT, "target", "debug")


def built():
    return all(os.path.exists(os.path.join(BIN, n)) for n in ("libtandem.so", "tandemd", "libcuda.so"))


def fake_env(tmp):
    """TANDEM_GPU_FAKE=1 and an LD_LIBRARY_PATH whose libcuda.so.1 is the fake driver."""
    lib = os.path.join(tmp, "lib")
    os.makedirs(lib, exist_ok=True)
    link = os.path.join(lib, "libcuda.so.1")
    if not os.path.exists(link):
        os.symlink(os.path.join(BIN, "libcuda.so"), link)
    return {"TANDEM_GPU_FAKE": "1", "LD_LIBRARY_PATH": lib, "PYTHONDONTWRITEBYTECODE": "1"}


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def run_ip(args, env_extra, timeout=120):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, os.path.join(HERE, "interposition.py"), *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


class ChildTimeouts(unittest.TestCase):
    def test_a_child_past_its_timeout_is_killed_and_recorded(self):
        t0 = time.time()
        r = ip.run_child(os.path.join(BIN, "libtandem.so"), "hang", timeout=2)
        self.assertLess(time.time() - t0, 30)
        self.assertIn("timeout", r["error"])
        self.assertIn("started pid", r["output_tail"])
        pid = int(r["output_tail"].split("started pid ")[1].split()[0])
        time.sleep(0.2)
        self.assertFalse(alive(pid), "the hanging child is still running")

    @unittest.skipUnless(built(), "needs target/debug/{libtandem.so,tandemd,libcuda.so}")
    def test_a_hanging_workload_costs_its_row_not_the_run(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(fake_env(d), TANDEM_GPU_FAKE_HANG="cublas")
            p = run_ip(["--shim", os.path.join(BIN, "libtandem.so"), "--out", d, "--only",
                        "eager,cublas", "--skip-overhead", "--child-timeout", "2"], env)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            with open(os.path.join(d, "interposition.json")) as f:
                doc = json.load(f)
            self.assertTrue(doc["complete"])
            rows = {r["workload"]: r for r in doc["rows"]}
            self.assertTrue(rows["eager"]["outputs_identical"])
            self.assertTrue(rows["eager"]["counts_equal"])
            self.assertFalse(rows["cublas"]["outputs_identical"])
            self.assertEqual(sorted(rows["cublas"]["errors"]), ["plain1", "plain2", "shim"])
            self.assertIn("timeout", rows["cublas"]["errors"]["shim"])

    @unittest.skipUnless(built(), "needs target/debug/{libtandem.so,tandemd,libcuda.so}")
    def test_rows_are_written_as_they_come(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, **fake_env(d), TANDEM_GPU_FAKE_HANG="cublas")
            p = subprocess.Popen([sys.executable, os.path.join(HERE, "interposition.py"), "--shim",
                                  os.path.join(BIN, "libtandem.so"), "--out", d, "--only",
                                  "eager,cublas", "--skip-overhead", "--child-timeout", "60"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
            path = os.path.join(d, "interposition.json")
            try:
                deadline = time.time() + 60
                doc = None
                while time.time() < deadline:
                    try:
                        with open(path) as f:
                            doc = json.load(f)
                    except (OSError, ValueError):
                        doc = None
                    if doc and doc["rows"]:
                        break
                    time.sleep(0.1)
            finally:
                os.killpg(p.pid, signal.SIGKILL)  # killed outright, mid-run
                p.wait(timeout=10)
            with open(path) as f:
                doc = json.load(f)
            self.assertFalse(doc["complete"])
            self.assertEqual([r["workload"] for r in doc["rows"]], ["eager"])
            self.assertTrue(doc["rows"][0]["outputs_identical"])


class LaunchLoop(unittest.TestCase):
    @unittest.skipUnless(built() and shutil.which("cc"), "needs the debug builds and cc")
    def test_empty_kernel_overhead_is_timed_by_a_compiled_loop(self):
        with tempfile.TemporaryDirectory() as d:
            p = run_ip(["--shim", os.path.join(BIN, "libtandem.so"), "--bin", BIN, "--out", d,
                        "--skip-workloads", "--reps", "2", "--loop-rounds", "2", "--launches",
                        "3000", "--train-reps", "0"], fake_env(d))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(d, "interposition.json")) as f:
                doc = json.load(f)
            [row] = doc["overhead"]
            self.assertEqual(row["benchmark"], "launch_loop")
            self.assertEqual(row["errors"], [])
            self.assertIn("compiled C", row["loop"])
            for mode in ("plain", "shim", "shim_tandemd"):
                self.assertEqual(row[mode]["n"], 2, mode)
                self.assertGreater(row[mode]["median"], 0)
            self.assertIn("shim_ratio", row)
            self.assertIn("shim_tandemd_ratio", row)

    @unittest.skipUnless(built() and shutil.which("cc"), "needs the debug builds and cc")
    def test_the_loop_counts_through_the_shim_and_reports_driver_errors(self):
        with tempfile.TemporaryDirectory() as d:
            info = ip.build_launch_loop(d)
            self.assertNotIn("error", info)
            env = dict(os.environ, **fake_env(d))
            run = [info["binary"], "--count", "500", "--rounds", "3", "--warmup", "5"]
            p = subprocess.run(run + ["--image", "fake", "--sync-every", "7"], env=dict(
                env, LD_PRELOAD=os.path.join(BIN, "libtandem.so"),
                TANDEM_SOCKET=os.path.join(d, "none.sock")), capture_output=True, text=True,
                timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            r = json.loads(p.stdout.split("RESULT ", 1)[1])
            self.assertEqual(r["shim_kernels"], 1500)
            self.assertEqual(r["sync_every"], 7)
            for sub, tot in zip(r["submit_s"], r["total_s"]):
                self.assertLessEqual(sub, tot)
            self.assertEqual(len(r["total_s"]), 3)
            p = subprocess.run(run + ["--image", "fake"], env=env, capture_output=True,
                               text=True, timeout=60)
            self.assertIsNone(json.loads(p.stdout.split("RESULT ", 1)[1])["shim_kernels"])
            # PTX means nothing to the fake driver: the failed call is named
            p = subprocess.run(run, env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 3)
            self.assertIn("CUDA_ERROR cuModuleLoadData", p.stdout)


class FollowOrchestration(unittest.TestCase):
    """follow.py's parent against real child processes (its test seam) and a real tandemd."""

    def run_follow(self, d, extra=None):
        env = dict(os.environ, TANDEM_GPU_FAKE="1", **(extra or {}))
        p = subprocess.run([sys.executable, os.path.join(HERE, "follow.py"), "--bin", BIN,
                            "--out", d, "--time-limit", "60"], env=env, capture_output=True,
                           text=True, timeout=120)
        with open(os.path.join(d, "follow.json")) as f:
            return p, json.load(f)

    @unittest.skipUnless(built(), "needs target/debug/{libtandem.so,tandemd}")
    def test_every_check_runs_and_passes_with_well_behaved_children(self):
        with tempfile.TemporaryDirectory() as d:
            p, doc = self.run_follow(d)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(doc["errors"], [])
            self.assertEqual(len(doc["checks"]), 15)
            self.assertTrue(all(doc["checks"].values()), doc["checks"])
            self.assertEqual([r["step"] for r in doc["stops"]], [5, 10, 20])
            self.assertIn("tandemd.log", doc["logs"])

    @unittest.skipUnless(built(), "needs target/debug/{libtandem.so,tandemd}")
    def test_a_follower_holding_a_copy_fails_the_memory_check(self):
        with tempfile.TemporaryDirectory() as d:
            p, doc = self.run_follow(d, {"TANDEM_GPU_FAKE_FOLLOW_COPY": "1"})
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertFalse(doc["checks"]["follower_holds_no_second_copy"])
            self.assertTrue(doc["checks"]["outputs_track_training"])


class CoordinatorJobs(unittest.TestCase):
    def test_verdict_requires_every_job(self):
        good = {"job": "train", "records_equal": True, "kernels_equal": True}
        metrics = {"tandem_clients": 1}
        both = {"jobs": [good, {**good, "job": "cudagraph"}], "metrics": metrics}
        self.assertTrue(co.verdict(both))
        self.assertFalse(co.verdict({"jobs": [good], "metrics": metrics}))
        self.assertFalse(co.verdict({"jobs": [good, {"job": "cudagraph", "error": "x"}],
                                     "metrics": metrics}))
        self.assertFalse(co.verdict({**both, "metrics": {"error": "x"}}))

    def test_run_jobs_records_a_runner_that_raised(self):
        def runner(name):
            if name == "train":
                raise RuntimeError("boom")
            return {"ok": name}

        jobs, threads = co.run_jobs(["train", "cudagraph"], runner)
        for t in threads:
            t.join()
        self.assertEqual(jobs["cudagraph"], {"ok": "cudagraph"})
        self.assertIn("boom", jobs["train"]["output_tail"])

    @unittest.skipUnless(built(), "needs target/debug/{libtandem.so,tandemd,libcuda.so}")
    def test_a_job_whose_runner_raised_fails_the_run(self):
        real = ip.run_child

        def flaky(shim, name, *a, **kw):
            if name == "train":
                raise RuntimeError("the runner broke")
            return real(shim, name, *a, **kw)

        with tempfile.TemporaryDirectory() as d:
            argv = ["coordinator.py", "--bin", BIN, "--out", d, "--train-reps", "1", "--steps", "2"]
            with mock.patch.dict(os.environ, fake_env(d)), \
                    mock.patch.object(ip, "run_child", flaky), mock.patch.object(sys, "argv", argv), \
                    contextlib.redirect_stdout(io.StringIO()):
                rc = co.main()
            self.assertEqual(rc, 1)
            with open(os.path.join(d, "coordinator.json")) as f:
                doc = json.load(f)
            jobs = {j["job"]: j for j in doc["jobs"]}
            self.assertTrue(jobs["cudagraph"]["kernels_equal"])  # the other job matched...
            self.assertIn("the runner broke", jobs["train"]["output_tail"])  # ...this one is there
            self.assertFalse(doc["passed"])

    @unittest.skipUnless(built(), "needs target/debug/{libtandem.so,tandemd,libcuda.so}")
    def test_two_fake_jobs_match_the_coordinator(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, **fake_env(d))
            p = subprocess.run([sys.executable, os.path.join(HERE, "coordinator.py"), "--bin", BIN,
                                "--out", d, "--train-reps", "1", "--steps", "2"], env=env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(d, "coordinator.json")) as f:
                doc = json.load(f)
            self.assertEqual(sorted(j["job"] for j in doc["jobs"]), ["cudagraph", "train"])
            for j in doc["jobs"]:
                self.assertGreater(j["shim_kernels_total"], 0)
                self.assertTrue(j["records_equal"] and j["kernels_equal"], j)

    def test_metrics_stdlib_parser(self):
        text = ("# HELP tandem_clients Clients.\n# TYPE tandem_clients gauge\ntandem_clients 2\n"
                "# TYPE tandem_launches counter\ntandem_launches_total{client=\"1\"} 5\n"
                "tandem_launches_total{client=\"2\"} 7\n")
        m = co.parse_metrics_stdlib(text)
        self.assertEqual(m["tandem_clients"], 1)
        self.assertEqual(m["tandem_launches"], 2)
        with self.assertRaises(ValueError):
            co.parse_metrics_stdlib("tandem_clients notanumber\n")



class TraceCapture(unittest.TestCase):
    """trace_capture.py's pure parts: profiler events -> the model's trace
    format, and the timeslice analysis (the stand-ins run in prove's dry run)."""

    def setUp(self):
        sys.path.insert(0, HERE)
        import trace_capture
        self.tc = trace_capture

    def test_profiler_events_become_a_trace_the_model_accepts(self):
        t = self.tc.to_trace("resnet50_b4", "inference", self.tc.fake_events("resnet50_b4", "inference"), "d")
        kinds = [o["op"] for o in t["ops"]]
        self.assertEqual(kinds[0], "copy_h2d")
        self.assertEqual(kinds.count("kernel"), 12)
        self.assertEqual(kinds[-1], "sync")
        k = t["ops"][1]
        self.assertEqual((k["grid"], k["blocks_per_sm"], k["duration_ns"]), ([98, 1, 1], 4, 8000))
        # 40 us between launch calls, each call 4 us long: 36 us of host gap.
        self.assertEqual(t["ops"][2]["host_gap_ns"], 36000)
        self.assertEqual(t["source"], "measured")
        with self.assertRaises(ValueError):
            self.tc.to_trace("x", "inference", [], "d")

    def test_the_spin_analysis_finds_slice_and_switch(self):
        a = {"start": 0, "end": 20, "gaps": [[2, 5], [7, 10], [12, 15]]}
        b = {"start": 2, "end": 20, "gaps": [[5, 7], [10, 12]]}
        r = self.tc.analyse_spins(a, b)
        self.assertEqual(r["timeslice"]["median_ns"], 2)
        self.assertEqual(r["switch"]["median_ns"], 0)

    def test_the_wake_analysis_measures_the_wait_over_the_alone_interval(self):
        # Alone, a stamp every 240 ns; beside the spinner (which ends at 1000)
        # the intervals are 240 + 0, 60, 400: the wake latencies.
        waker = {"from": 100, "gap_ns": 200,
                 "stamps": [100, 340, 640, 1280, 1520, 1760, 2000, 2240, 2480, 2720]}
        spinner = {"start": 0, "end": 1000, "gaps": [[50, 90], [400, 500], [700, 1250]]}
        r = self.tc.analyse_wake(spinner, waker)
        self.assertEqual(r["alone_interval_ns"], 240)
        self.assertEqual(r["wake"]["n"], 2)  # the third interval ends after the spinner
        self.assertEqual((r["wake"]["median_ns"], r["wake"]["max_ns"]), (30.0, 60))
        self.assertEqual(r["held"]["max_ns"], 200)  # in at 500, out at 700
        short = dict(waker, stamps=waker["stamps"][:5])
        self.assertIsNone(self.tc.analyse_wake(spinner, short)["wake"])


class CompareTraces(unittest.TestCase):
    """compare_traces.py: tandemd's captured trace beside torch.profiler's."""

    def setUp(self):
        sys.path.insert(0, HERE)
        import compare_traces
        self.ct = compare_traces

    @staticmethod
    def doc(kernels, ns, gap=10):
        return {"format": "tandem-trace/1", "job": "j", "class": "inference", "source": "measured",
                "ops": [{"op": "kernel", "name": f"k{i}", "duration_ns": ns, "host_gap_ns": gap}
                        for i in range(kernels)] + [{"op": "sync", "host_gap_ns": gap}]}

    def test_each_captured_job_is_set_beside_its_profiler_trace(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            prof, cap = os.path.join(d, "p"), os.path.join(d, "c")
            os.makedirs(prof)
            os.makedirs(cap)
            for name, doc in (("p/resnet50_b32.json", self.doc(10, 1000)),
                              ("c/resnet50_b32-resnet50_train-r0-tandem_mps-inference.json", self.doc(10, 1100)),
                              ("c/resnet50_b32-resnet50_train-r0-tandem_mps-training.json", self.doc(4, 50))):
                with open(os.path.join(d, name), "w") as f:
                    json.dump(doc, f)
            rows = self.ct.compare(prof, cap)
            self.assertEqual([(r["job"], r["role"], r["cell"]) for r in rows],
                             [("resnet50_b32", "inference", "tandem_mps r0"),
                              ("resnet50_train", "training", "tandem_mps r0")])
            self.assertEqual(rows[0]["kernel_count_ratio"], 1.0)
            self.assertAlmostEqual(rows[0]["kernel_time_ratio"], 1.1)
            self.assertEqual(rows[0]["captured"]["host_ns"], 110)
            self.assertIsNone(rows[1]["profiler"])
            table = self.ct.markdown(rows)
            self.assertIn("| resnet50_b32 | tandem_mps r0 | 10 / 10 | 0.011 / 0.010 | 1.100 |", table)
            self.assertIn("no profiler trace of this job", table)
        with self.assertRaises(ValueError):
            self.ct.summarise({"format": "tandem-trace/2", "ops": []})
        with self.assertRaises(ValueError):
            self.ct.job_of("trace-inference.json")


if __name__ == "__main__":
    unittest.main()


class SmMask(unittest.TestCase):
    """smmask.py's launch callback against launch descriptors laid out in
    memory here: what it writes where, and what it leaves alone."""

    def setUp(self):
        import ctypes

        import smmask

        self.ct, self.sm = ctypes, smmask
        self.tmd = ctypes.create_string_buffer(512)
        self.params = (ctypes.c_uint64 * 6)(48, 0, 0, 0, ctypes.addressof(self.tmd), 0)

    def word(self, off):
        return self.ct.c_uint32.from_buffer(self.tmd, off).value

    def call(self, hook):
        hook.cb(None, self.sm.QMD_DOMAIN, self.sm.QMD_PRE_UPLOAD,
                self.ct.addressof(self.params))
        return hook.seen[-1]

    def test_a_hopper_descriptor_gets_the_mask_and_its_enable_bit(self):
        self.tmd[72] = 0x40
        self.tmd[316] = 0x7
        hook = self.sm.MaskHook(40)
        hook.armed = True
        rec = self.call(hook)
        self.assertEqual(rec["masked_tpcs"], 40)
        self.assertEqual(rec["words_before"], ["0x0", "0x0", "0x0", "0x7"])
        self.assertFalse(rec["enable_bit_before"])
        self.assertEqual((self.word(304), self.word(308)), (0xFFFFFFFF, 0xFF))
        self.assertEqual((self.word(312), self.word(316)), (0, 0), "TPCs 64-127 enabled")
        self.assertEqual(self.word(0) & 0x80000000, 0x80000000)
        self.assertEqual((self.word(84), self.word(88)), (0, 0))

    def test_the_hook_records_what_the_shims_descriptor_check_reads(self):
        ct = self.ct
        self.tmd[72] = 0x40
        ct.c_uint32.from_buffer(self.tmd, 0).value = 2 << 23
        ct.c_uint32.from_buffer(self.tmd, 128).value = 528
        for at, v in ((132, 1), (136, 1), (144, 128), (146, 1), (148, 1)):
            ct.c_uint16.from_buffer(self.tmd, at).value = v
        hook = self.sm.MaskHook(4)
        hook.armed = True
        rec = self.call(hook)
        self.assertEqual((rec["qmd_type"], rec["grid"], rec["block"]), (2, [528, 1, 1], [128, 1, 1]))
        self.assertTrue(rec["on_launch_thread"])
        match = self.sm.shim_would_match
        self.assertTrue(match(hook.seen, [528, 1, 1], [128, 1, 1]))
        self.assertFalse(match(hook.seen, [527, 1, 1], [128, 1, 1]), "another grid")
        self.assertFalse(match([dict(rec, on_launch_thread=False)], [528, 1, 1], [128, 1, 1]))
        self.assertFalse(match([dict(rec, qmd_type=3)], [528, 1, 1], [128, 1, 1]), "a cluster's")
        self.assertIsNone(match([{"domain": 11}], [528, 1, 1], [128, 1, 1]), "no descriptor seen")
        # The older layout: V03_00's offsets.
        self.tmd[72] = 0x30
        ct.c_uint32.from_buffer(self.tmd, 48).value = 7
        ct.c_uint16.from_buffer(self.tmd, 74).value = 64
        rec = self.call(hook)
        self.assertEqual((rec["grid"], rec["block"]), ([7, 0, 0], [64, 0, 0]))
        self.assertNotIn("qmd_type", rec)

    def test_an_ampere_descriptor_gets_the_mask_at_its_own_offsets(self):
        self.tmd[72] = 0x20
        hook = self.sm.MaskHook(3)
        hook.armed = True
        self.call(hook)
        self.assertEqual((self.word(84), self.word(88)), (0b111, 0))
        self.assertEqual(self.word(304), 0)
        self.assertEqual(self.word(0), 0, "no enable bit before version 0x40")

    def test_unknown_layouts_and_a_disarmed_hook_leave_the_descriptor_alone(self):
        hook = self.sm.MaskHook(4)
        self.tmd[72] = 0x40
        self.call(hook)
        self.assertEqual(bytes(self.tmd), bytes([0] * 72 + [0x40] + [0] * 439), "disarmed")
        hook.armed = True
        self.tmd[72] = 0x06
        self.assertIn("no TPC mask", self.call(hook)["left_alone"])
        self.params[0] = 32
        self.assertIn("too short", self.call(hook)["left_alone"])
        self.params[0], self.params[4] = 48, 0
        self.assertIn("NULL", self.call(hook)["left_alone"])
        self.assertEqual(self.word(84), 0)

    def test_a_profiler_that_loses_its_kernels_beside_the_callback_is_a_problem(self):
        sm = self.sm
        saved = sm.profiled_kernels, sm.subscribe_hook
        try:
            counts = iter([5, 0])
            sm.profiled_kernels = lambda: next(counts)
            sm.subscribe_hook = lambda drv: (object(), None)
            got = sm.part_cupti(None, {}, False, "profiler_first")
            self.assertEqual((got["kernels_before"], got["kernels"]), (5, 0))
            self.assertIn("no CUDA kernel beside the launch callback (5 before it)",
                          got["problems"][0])
            # The callback refused, the profiler fine: recorded, no problem.
            sm.profiled_kernels = lambda: 4
            sm.subscribe_hook = lambda drv: (None, "subscribe returned 1")
            got = sm.part_cupti(None, {}, False, "callback_first")
            self.assertEqual((got["subscribed"], got["kernels"], got["problems"]),
                             (False, 4, []))
            # The profiler raising beside the callback is the finding, named.
            counts = iter([6, "RuntimeError: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"])
            sm.profiled_kernels = lambda: next(counts)
            sm.subscribe_hook = lambda drv: (object(), None)
            got = sm.part_cupti(None, {}, False, "profiler_first")
            self.assertIn("failed beside the launch callback: RuntimeError", got["problems"][0])
            self.assertEqual(got["kernels"], 0)
            # No torch here: skipped, whatever the order.
            sm.profiled_kernels = lambda: None
            for order in ("profiler_first", "callback_first"):
                self.assertIn("no torch", sm.part_cupti(None, {}, False, order)["skipped"])
        finally:
            sm.profiled_kernels, sm.subscribe_hook = saved

    def test_a_mask_is_judged_by_how_many_sms_it_left_not_which(self):
        judge = self.sm.judge_mask
        every = list(range(16))
        # TPC k = SMs 2k, 2k+1: 2 TPCs masked leave SMs 0-3.
        v = judge(16, 2, every, every[4:], True)
        self.assertTrue(v["confined"], v)
        self.assertEqual((v["sms_left_count"], v["numbering"]), (4, "tpc k is SMs 2k and 2k+1"))
        self.assertEqual(v["bits_on_absent_tpcs"], 0)
        # Hopper's bits count TPCs before floorsweeping: 3 bits masked, one of
        # them a TPC the GPU lacks, leave 4 SMs elsewhere: still confined.
        v = judge(16, 3, every, [s for s in every if s not in (6, 7, 10, 11)], True)
        self.assertTrue(v["confined"], v)
        self.assertEqual((v["numbering"], v["bits_on_absent_tpcs"]), ("other", 1))
        # The mask written and every SM still reached: not confined, a problem.
        v = judge(16, 2, every, every, True)
        self.assertFalse(v["confined"])
        self.assertIn("still reached every SM", v["problems"][0])
        # More SMs left than the mask can account for.
        v = judge(16, 2, every, every[6:], True)
        self.assertFalse(v["confined"])
        self.assertIn("left 6 SMs", v["problems"][0])
        # An unmasked run that missed SMs cannot judge which a mask left.
        v = judge(16, 2, every[1:], every[4:], True)
        self.assertFalse(v["confined"])
        self.assertIn("reached 15 of 16", v["problems"][0])
        # Never written: not confined, whatever the SMs say.
        self.assertFalse(judge(16, 2, every, every[4:], False)["confined"])


class EngineRules(unittest.TestCase):
    """engine_rules.py's reading of its measurements: which of the model's
    rules each pattern supports (the GPU run gives the figures), and its
    copy kernel's PTX agreeing with the LLVM source it is generated from."""

    def setUp(self):
        import engine_rules

        self.mp = engine_rules

    def runs(self, **waits_us):
        """Each config's probe latencies: 200 samples at 20 us alone, plus a
        spread of waits up to the given one."""
        out = {"alone": {"latency_us": [20.0] * 200}}
        for name, top in waits_us.items():
            out[name] = {"latency_us": [20.0 + top * (i + 1) / 200 for i in range(200)]}
        return out

    def test_strict_priority_and_two_read_as_normal(self):
        s = self.mp.mps_summary(self.runs(equal=1000, lowprio=50, both_low=1000, tally=50,
                                        resident=1900))
        f = s["findings"]
        self.assertTrue(f["strict"])
        self.assertGreater(f["priority_p99_gain"], 10)
        self.assertEqual(f["priority_2_reads_as"], "normal (0)")
        self.assertAlmostEqual(f["resident_p99_over_block"], 0.94, places=2)
        self.assertIn("reads as normal (0)", " ".join(s["headline"]))

    def test_two_read_as_below_normal_when_the_probe_waits_as_both_low(self):
        f = self.mp.mps_summary(self.runs(equal=1000, lowprio=50, both_low=1000,
                                        tally=950))["findings"]
        self.assertEqual(f["priority_2_reads_as"], "below normal (1)")

    def test_a_priority_that_moves_nothing_is_neither_strict_nor_telling(self):
        f = self.mp.mps_summary(self.runs(equal=1000, lowprio=900, both_low=1000,
                                        tally=950))["findings"]
        self.assertFalse(f["strict"])
        self.assertLess(f["priority_p99_gain"], 1.2)
        self.assertTrue(f["priority_2_reads_as"].startswith("indistinguishable"))

    def test_strict_allows_for_the_probes_own_jitter_alone(self):
        runs = self.runs(equal=1000, lowprio=150)
        self.assertFalse(self.mp.mps_summary(runs)["findings"]["strict"])
        # The same waits over a probe that alone spreads 100 us at its p99.
        runs["alone"]["latency_us"] = [20.0] * 190 + [120.0] * 10
        f = self.mp.mps_summary(runs)["findings"]
        self.assertEqual(f["alone_jitter_us"], 100.0)
        self.assertTrue(f["strict"])

    def test_the_copys_bandwidth_by_sms_names_where_it_saturates(self):
        # 132 SMs; one SM pulls 50 GB/s, DRAM saturates at 3,000 from 60.
        rungs = [{"blocks": k, "sms": min(k, 132), "gb_per_s": min(3000.0, 50.0 * k)}
                 for k in self.mp.sm_ladder(132)]
        f = self.mp.bandwidth_findings(rungs, 132)
        self.assertEqual(f["best_gb_per_s"], 3000.0)
        self.assertEqual(f["sms_for_90pct"], 64)
        self.assertEqual(f["half_over_whole"], 1.0)
        self.assertEqual(f["one_sm_gb_per_s"], 50.0)
        self.assertEqual(f["packed"], [])
        # The engine's rule today: bandwidth in proportion to the SMs.
        rungs = [dict(r, gb_per_s=3000.0 * min(r["blocks"], 132) / 132) for r in rungs]
        f = self.mp.bandwidth_findings(rungs, 132)
        self.assertEqual(f["sms_for_90pct"], 128)  # the first rung at 90% or more
        self.assertEqual(f["half_over_whole"], 0.5)
        # Blocks the GPU packed two to an SM count as the SMs they used.
        rungs[0:3] = [{"blocks": 4, "sms": 2, "gb_per_s": 3000.0}]
        f = self.mp.bandwidth_findings(rungs, 132)
        self.assertEqual(f["packed"], [4])
        self.assertEqual(f["sms_for_90pct"], 2)

    def test_the_launch_floor_is_the_empty_bursts_time_and_the_gap_the_busy_ones_excess(self):
        floor = {"kernels": 1000, "busy_spin_ns": 20_000, "empty_ns": 1_800.0,
                 "busy_ns": 21_100.0, "host_bound": False}
        f = self.mp.floor_findings(floor)
        self.assertEqual(f, {"empty_back_to_back_ns": 1_800.0, "gap_ns": 1_100.0})
        self.assertEqual(self.mp.floor_headline(f), [
            "launch floor: an empty kernel queued back to back takes 1.80 us (the model "
            "assumes 2.5); 20 us kernels run 1.10 us apart"])
        # A burst the host could not queue ahead of the GPU measures the host.
        f = self.mp.floor_findings(dict(floor, host_bound=True))
        self.assertEqual(f, {"host_bound": True})
        self.assertIn("not measured", self.mp.floor_headline(f)[0])
        self.assertEqual(self.mp.floor_findings(None), {})
        self.assertEqual(self.mp.floor_headline({}), [])

    def test_half_an_sms_shared_memory_keeps_every_other_block_off_it(self):
        # H100 (228 KiB an SM, 227 KiB a block opted in) and A100 (164, 163)
        self.assertEqual(self.mp.exclusive_smem(233_472, 232_448), 116_736)
        self.assertEqual(self.mp.exclusive_smem(167_936, 166_912), 83_968)
        # a block may not ask for half the SM: no exclusivity to be had
        self.assertIsNone(self.mp.exclusive_smem(233_472, 49_152))
        self.assertIsNone(self.mp.exclusive_smem(0, 0))

    def test_the_aggressor_outlasts_the_victim_three_times(self):
        self.assertEqual(self.mp.aggressor_launches(1_000_000, 200_000), 17)
        self.assertEqual(self.mp.aggressor_launches(100, 1_000_000), 3)
        self.assertEqual(self.mp.aggressor_launches(1_000_000, 0), 2)
        self.assertEqual(self.mp.aggressor_launches(1e12, 1),
                         self.mp.MAX_AGGRESSOR_LAUNCHES)

    def test_a_refused_opt_in_measures_the_neighbours_unconfined_and_says_why(self):
        err = self.mp.smmask.CudaError

        class Drv:
            dev = 0

            def call(self, name, *args):
                if name == "cuDeviceGetAttribute":
                    args[0]._obj.value = {81: 233_472, 97: 232_448}[args[1]]
                elif name == "cuFuncSetAttribute":
                    raise err("cuFuncSetAttribute returned 1")

            def load_function(self, image, name):
                return None, name

        nb = self.mp.Neighbours(Drv(), {"sms": 132}, dry=True)
        self.assertEqual((nb.k, nb.smem), (16, None))
        self.assertEqual(nb.why_shared, "opt-in refused: cuFuncSetAttribute returned 1")

    def neighbours(self, shared=0, seen=16, exclusive=True):
        def cell(ratios):
            return {"alone_ns": 1000, "beside": {
                a: {"ns": 1000 * r, "ratio": r, "aggressor_launches": 5,
                    "victim_sms": seen, "shared_sms": shared} for a, r in ratios.items()}}
        return {"victim_blocks": 16, "aggressor_blocks": 116, "exclusive": exclusive,
                "cells": {"copy": cell({"copy": 1.42, "burn": 1.01}),
                          "burn": cell({"copy": 1.0, "burn": 1.03})}}

    def test_the_neighbours_slowdowns_and_whether_they_kept_apart(self):
        f = self.mp.neighbours_findings(self.neighbours())
        self.assertEqual(f, {"copy_beside_copy": 1.42, "copy_beside_burn": 1.01,
                             "burn_beside_copy": 1.0, "burn_beside_burn": 1.03,
                             "disjoint": True, "victim_sms": 16, "aggressor_sms": 116})
        self.assertEqual(self.mp.neighbours_headline(f), [
            "neighbours on SMs of their own (16 beside 116): a copy takes 1.42x its time "
            "alone beside a copy, 1.01x beside compute; compute 1.00x beside a copy, "
            "1.03x beside compute"])
        # an SM both sides ran on, or blocks that could share one: not disjoint
        for doc in (self.neighbours(shared=1), self.neighbours(exclusive=False)):
            f = self.mp.neighbours_findings(doc)
            self.assertIs(f["disjoint"], False)
            self.assertIn("NOT disjoint", self.mp.neighbours_headline(f)[0])
        # no block recorded its SM (the fake driver): unchecked, not disjoint
        f = self.mp.neighbours_findings(self.neighbours(seen=0))
        self.assertIsNone(f["disjoint"])
        self.assertIn("placement not recorded", self.mp.neighbours_headline(f)[0])
        self.assertEqual(self.mp.neighbours_findings({}), {})
        self.assertEqual(self.mp.neighbours_headline({}), [])

    def test_the_ladder_runs_powers_of_two_half_whole_and_every_slot(self):
        self.assertEqual(self.mp.sm_ladder(132),
                         [1, 2, 4, 8, 16, 32, 64, 66, 128, 132, 264])
        self.assertEqual(self.mp.sm_ladder(108)[-3:], [64, 108, 216])

    def test_the_committed_ptx_is_what_llc_makes_of_the_source(self):
        ptx = self.mp.ptx_from_ll()
        if ptx is None:
            self.skipTest("llc is not installed")
        with open(self.mp.STREAM_PTX) as f:
            self.assertEqual(f.read(), ptx,
                             "stream.ptx is stale: python3 scripts/gpu/engine_rules.py "
                             "--regenerate-ptx")

    def test_findings_need_their_configs(self):
        f = self.mp.mps_summary(self.runs(equal=1000))["findings"]
        self.assertEqual(set(f), {"alone_p50_us", "alone_jitter_us"})
        self.assertEqual(self.mp.mps_summary({})["headline"], ["no probe timings alone"])
