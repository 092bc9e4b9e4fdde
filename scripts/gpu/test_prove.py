"""Tests of scripts/gpu/prove's orchestration: its dry run against the fake driver.

    python3 -m unittest scripts/gpu/test_prove.py

Needs the debug builds of the shim, tandemd and the fake driver under
target/debug (cargo test builds them) and a C compiler; skipped otherwise.
Asserted here, each by a test that fails when the behaviour breaks:
- every stage of every part runs, in the run order, under its budget, and
  each part returns at most 8 files (three: summary, bundle, log);
- part 1 (issue 22) holds the smoke test, the short interposition check, the
  trace capture with the time slice, the co-location pair (mps_lowprio beside
  tandem_mps, paired with the same repetition's alone run) and the
  coordinator, within 8 minutes of stage budgets; dedup, follow mode and the
  overhead loop are in later parts;
- a stage past its timeout is stopped with everything it started and keeps
  what it wrote (in the summary and the bundle); the part's budget skips what
  no longer fits;
- a command killed outright keeps the finished stages and the running one's
  partial files;
- a failed smoke test stops the part with a clear report;
- an exception in prove's own orchestration is recorded and the part goes on;
- the trace stages call trace_capture.py with its interface (its stand-ins in
  the dry run); co-location modes colocation.py lacks (or MPS) are skipped with
  a reason, and --modes names the modes (a later "spatial" by name).
"""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROVE = os.path.join(HERE, "prove")
BIN = os.path.join(ROOT, "target", "debug")
sys.dont_write_bytecode = True


def load_prove():
    loader = importlib.machinery.SourceFileLoader("prove", PROVE)
    spec = importlib.util.spec_from_loader("prove", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


pv = load_prove()
READY = (all(os.path.exists(os.path.join(BIN, n)) for n in ("libtandem.so", "tandemd", "libcuda.so"))
         and shutil.which("cc") is not None)
SKIP = "needs target/debug/{libtandem.so,tandemd,libcuda.so} and cc"


def run_prove(args, env_extra=None, timeout=300):
    env = dict(os.environ)
    for k in ("TANDEM_GPU_FAKE_HANG", pv.INJECT_ENV, "OUT"):
        env.pop(k, None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, PROVE, "--dry-run", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def summary(out, part):
    with open(os.path.join(out, f"prove-part{part}.json")) as f:
        return json.load(f)


def stages(doc):
    return {s["name"]: s for s in doc["stages"]}


def bundle_names(out, part):
    with tarfile.open(os.path.join(out, f"prove-part{part}.tar.gz")) as t:
        return t.getnames()


def bundle_json(out, part, suffix):
    with tarfile.open(os.path.join(out, f"prove-part{part}.tar.gz")) as t:
        for m in t.getmembers():
            if m.name.endswith(suffix):
                return json.load(t.extractfile(m))
    return None


def marked(prefix, cmd_has=""):
    """Processes whose marker starts with prefix (a prove pid), and whose
    command line holds cmd_has."""
    import benchlib as bl

    return [pid for pid, env, cmd in bl.proc_entries()
            if env.get(pv.MARKER_ENV, "").startswith(prefix) and cmd_has in cmd]


class Plan(unittest.TestCase):
    def test_parts_fit_a_device_command_and_keep_the_run_order(self):
        seen = set()
        order = [s.name for s in pv.STAGES]
        for part, names in pv.PARTS.items():
            self.assertLessEqual(pv.PART_BUDGET_S[part], 9 * 60)
            self.assertEqual(names[0], "smoke", part)
            self.assertEqual(names, sorted(names, key=order.index), part)
            total = sum(pv.BY_NAME[n].budget for n in names)
            self.assertLessEqual(total, pv.PART_BUDGET_S[part] - pv.RESERVE_S, part)
            seen.update(names)
        self.assertEqual(seen, set(order))
        ids = [s.sid for s in pv.STAGES]
        self.assertEqual(ids, [str(i) for i in range(1, len(pv.STAGES) + 1)])

    def test_the_short_second_command_gives_each_stage_its_whole_budget(self):
        names = list(pv.FOLLOW_UP_STAGES)
        part = pv.PARTS[pv.FOLLOW_UP_PART]
        self.assertNotIn("smoke", names, "part 1's smoke test passed on this machine")
        self.assertEqual(names, [n for n in part if n in names], "in the part's run order")
        budget = pv.follow_up_budget()
        # run_part gives each stage min(its budget, what is left less the
        # reserve): the last one gets all of its own only if the sum fits.
        used = pv.ORCHESTRATION_S
        for n in names:
            left = budget - used - pv.RESERVE_S
            self.assertGreaterEqual(left, pv.BY_NAME[n].budget, n)
            used += pv.BY_NAME[n].budget
        self.assertLessEqual(budget + 60, 5 * 60, "fits what a window has left after part 1")
        command = f"--part {pv.FOLLOW_UP_PART} --only {','.join(names)}"
        self.assertIn(f"{command} --budget {budget:g} (device call: timeout_s {int(budget) + 60})",
                      pv.plan_text())
        with open(os.path.join(ROOT, "results", "gpu", "README.md")) as f:
            row = next(line for line in f if command in line)
        self.assertIn(f"--budget {budget:g}`", row)
        self.assertTrue(row.rstrip().endswith(f"| {int(budget) + 60} |"), row)

    def test_part_one_settles_the_model_and_the_scheduler_in_eight_minutes(self):
        part1 = pv.PARTS[1]
        self.assertEqual(part1, ["smoke", "interposition", "trace", "colocation", "coordinator"])
        self.assertLessEqual(sum(pv.BY_NAME[n].budget for n in part1), 8 * 60)
        self.assertLessEqual(pv.PART_BUDGET_S[1], 8 * 60)
        for later in ("dedup_replicas", "dedup_adversarial", "follow", "overhead"):
            self.assertNotIn(later, part1)
            self.assertTrue(any(later in pv.PARTS[k] for k in (2, 3)), later)
        # the short interposition check, the rest later
        short = pv.BY_NAME["interposition"].params["workloads"]
        rest = pv.BY_NAME["interposition_rest"].params["workloads"]
        self.assertLessEqual(len(short), 2)
        sys.path.insert(0, HERE)
        import interposition as ip

        self.assertEqual(sorted(short + rest), sorted(ip.WORKLOADS))
        # the time slice and the co-located pair's traces first
        trace = pv.BY_NAME["trace"].params
        self.assertNotEqual(trace.get("timeslice"), False)
        inf, train = pv.COLOCATION_PAIRS[0].split(":")
        self.assertEqual(set(trace["jobs"][:2]), {inf, train})
        # the free baseline beside tandem's best mode, interleaved repetitions
        col = pv.BY_NAME["colocation"].params
        self.assertEqual(tuple(col["modes"]), ("mps_lowprio", "tandem_mps"))
        self.assertGreaterEqual(col["reps"], 2)
        self.assertIn("[modes mps_lowprio,tandem_mps; fallback plain,tandem; reps 2;",
                      pv.plan_text())
        self.assertIn("[modes mps_lowprio,spatial;", pv.plan_text(modes=["mps_lowprio", "spatial"]))

    def test_colocation_modes_it_cannot_run_are_skipped_with_the_reason(self):
        sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
        import colocation as co

        none = lambda *_a, **_k: None  # noqa: E731
        with mock.patch.object(pv.shutil, "which", none):
            run, skipped = pv.colocation_modes(None, ["plain", "mps_lowprio", "tandem",
                                                      "tandem_mps"])
        self.assertEqual(run, ["alone", "plain", "tandem"])
        self.assertIn("not found", skipped["mps_lowprio"])
        self.assertIn("not found", skipped["tandem_mps"])
        # a later mode (issue 23's "spatial") is named, and skipped with the
        # reason until colocation.py runs it
        with mock.patch.object(co, "MODES", [m for m in co.MODES if m != "tandem"]), \
                mock.patch.object(pv.shutil, "which", lambda *_a, **_k: "/usr/bin/x"):
            run, skipped = pv.colocation_modes(None, ["tandem", "tandem_mps", "spatial"])
        self.assertEqual(run, ["alone", "tandem_mps"])
        self.assertIn("does not support mode tandem", skipped["tandem"])
        self.assertIn("does not support mode spatial", skipped["spatial"])
        with mock.patch.object(co, "MODES", co.MODES + ["spatial"]), \
                mock.patch.object(pv.shutil, "which", lambda *_a, **_k: "/usr/bin/x"):
            run, skipped = pv.colocation_modes(None, ["mps_lowprio", "spatial"])
        self.assertEqual((run, skipped), (["alone", "mps_lowprio", "spatial"], {}))

    def test_modes_on_the_command_line_are_colocation_py_names(self):
        p = subprocess.run([sys.executable, PROVE, "--plan", "--modes", "mps_lowprio,spatial"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("unknown mode(s) ['spatial']", p.stderr)
        p = subprocess.run([sys.executable, PROVE, "--plan", "--modes", "plain,tandem"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("[modes plain,tandem;", p.stdout)


class FakeStage:
    """What a stage function sees of its StageRun: a folder, a result, and
    sub() that writes what the step would have written (the GPU-side judges
    cannot run here otherwise)."""

    def __init__(self, d, outputs, rc=0):
        self.dir, self.result, self.outputs, self.rc, self.timeout = d, {}, outputs, rc, 100
        self.calls = []

    def sub(self, label, argv, env_extra=None):
        self.calls.append((label, argv, env_extra or {}))
        for name, doc in self.outputs.get(label, {}).items():
            with open(os.path.join(self.dir, name), "w") as f:
                json.dump(doc, f)
        return self.rc


class GpuJudges(unittest.TestCase):
    """The verdicts of the GPU-only paths, on the files those steps write."""

    CTX = mock.Mock(dry=False, shim="/carry/libtandem.so", bin="/carry")

    def smoke(self, plain, shim):
        with tempfile.TemporaryDirectory() as d:
            st = FakeStage(d, {"torch-plain": {"torch-plain.json": plain},
                               "torch-shim": {"torch-shim.json": shim}})
            problems = pv.smoke_shim_torch(self.CTX, st)
            self.assertEqual(st.calls[1][2]["LD_PRELOAD"], "/carry/libtandem.so")
            self.assertNotIn("LD_PRELOAD", st.calls[0][2])
            return problems

    def test_smoke_needs_the_shim_loaded_counting_and_the_same_output(self):
        ok = {"digest": "a", "shim_kernels": None}
        self.assertEqual(self.smoke(ok, {"digest": "a", "shim_kernels": 12}), [])
        self.assertIn("not loaded", self.smoke(ok, {"digest": "a", "shim_kernels": None})[0])
        self.assertIn("no kernel", self.smoke(ok, {"digest": "a", "shim_kernels": 0})[0])
        self.assertIn("differs", self.smoke(ok, {"digest": "b", "shim_kernels": 3})[0])
        self.assertIn("under the shim failed: boom",
                      self.smoke(ok, {"error": "boom"})[0])

    def overhead(self, loop, train):
        doc = {"complete": True, "overhead": [
            {"benchmark": "launch_loop", "errors": [], "shim_slowdown": loop,
             "shim_tandemd_slowdown": 0.5},
            {"benchmark": "train_step", "errors": [], "shim_slowdown": train}]}
        with tempfile.TemporaryDirectory() as d:
            st = FakeStage(d, {"overhead": {"interposition.json": doc}})
            return pv.stage_overhead(self.CTX, st), st.result

    def test_overhead_holds_the_shim_to_one_percent(self):
        status, res = self.overhead(0.004, 0.009)
        self.assertEqual(status, "pass")
        self.assertTrue(res["target_met"])
        status, res = self.overhead(0.004, 0.03)
        self.assertEqual(status, "fail")
        self.assertEqual(res["problems"], ["target missed: train_step +3.00%"])
        status, res = self.overhead(None, 0.0)
        self.assertEqual(status, "fail")
        self.assertIn("launch_loop not measured", res["problems"][0])

    @staticmethod
    def cell(rep, mode, p99, sps, requests=320):
        return {"rep": rep, "mode": mode, "inference": {"p99_ms": p99, "requests": requests},
                "training": {"steps_per_s": sps}}

    def test_colocation_ratios_are_paired_with_the_same_repetitions_alone_run(self):
        r = self.cell
        doc = {"runs": [r(0, "alone", 10.0, 10.0), r(0, "mps_lowprio", 20.0, 9.0),
                        r(0, "tandem_mps", 10.5, 9.5), r(1, "alone", 12.0, 8.0),
                        r(1, "tandem_mps", 13.8, 7.8), r(1, "mps_lowprio", 18.0, 7.6),
                        r(2, "tandem_mps", 1.0, 10.0),  # no alone cell in rep 3: left out
                        {**r(2, "alone", 1.0, 1.0), "error": "x"}]}
        got = pv.paired(doc, ["alone", "mps_lowprio", "tandem_mps"])
        self.assertEqual(list(got), ["mps_lowprio", "tandem_mps"])
        low, tm = got["mps_lowprio"], got["tandem_mps"]
        self.assertEqual([x["rep"] for x in tm["reps"]], [0, 1])
        self.assertAlmostEqual(low["p99_ratio_median"], 1.75)
        self.assertAlmostEqual(low["p99_ratio_worst"], 2.0)
        self.assertAlmostEqual(low["train_kept_worst"], 0.9)
        self.assertFalse(low["meets_target"])
        # against the median alone p99 (11 ms) rep 2 would read 1.25x; paired, 1.15x
        self.assertAlmostEqual(tm["p99_ratio_worst"], 1.15)
        self.assertAlmostEqual(tm["train_kept_median"], (0.95 + 0.975) / 2)
        self.assertFalse(tm["meets_target"])  # its worst repetition is over 1.10x
        self.assertEqual(tm["reps"][1]["requests"], 320)
        # tandemd saw both jobs with their classes in rep 1 only
        granted = {"inference": {"class": "inference"}, "training": {"class": "training"}}
        doc["runs"][2]["coordinator"] = granted
        self.assertEqual([x.get("classes_granted") for x in tm["reps"]], [False, False])
        self.assertNotIn("classes_granted", low["reps"][0])  # not a tandem mode
        self.assertEqual([x["classes_granted"] for x in pv.paired(doc, ["tandem_mps"])
                          ["tandem_mps"]["reps"]], [True, False])
        self.assertIn("WARNING: tandemd did not see both jobs",
                      pv.paired_line("p", "tandem_mps", pv.paired(doc, ["tandem_mps"])
                                     ["tandem_mps"]))
        doc["runs"][4] = {**r(1, "tandem_mps", 12.6, 7.8), "coordinator": granted}
        self.assertTrue(pv.paired(doc, ["tandem_mps"])["tandem_mps"]["meets_target"])
        self.assertIn("p99 x1.05 of alone (worst x1.05), training kept 0.96 (worst 0.95), "
                      "2 paired rep(s), at least 320 requests a cell, meets the target",
                      pv.paired_line("p", "tandem_mps", pv.paired(doc, ["tandem_mps"])
                                     ["tandem_mps"]))

    def test_the_colocation_stage_runs_the_modes_it_is_given(self):
        r = self.cell
        doc = {"benchmark": "colocation", "pair": "resnet50_b32:resnet50_train",
               "inference": "resnet50_b32", "training": "resnet50_train", "failed": [],
               "runs": [r(0, "alone", 10.0, 10.0), r(0, "mps_lowprio", 16.0, 9.5),
                        r(0, "tandem_mps", 10.8, 9.2)]}
        for override, want in ((None, "mps_lowprio,tandem_mps"), (["tandem"], "tandem")):
            with tempfile.TemporaryDirectory() as d:
                ctx = mock.Mock(dry=False, bin="/carry", pairs=["resnet50_b32:resnet50_train"],
                                colocation_modes=override, env={"PATH": "/x"})
                st = FakeStage(d, {"colocation": {
                    "colocation-resnet50_b32-resnet50_train.json": doc}})
                with mock.patch.object(pv.shutil, "which", lambda *_a, **_k: "/x/mps"):
                    status = pv.stage_colocation(ctx, st, **pv.BY_NAME["colocation"].params)
                self.assertEqual(status, "pass")
                argv = st.calls[0][1]
                self.assertEqual(argv[argv.index("--modes") + 1], want)
                self.assertEqual(argv[argv.index("--reps") + 1], "2")
                self.assertEqual(argv[argv.index("--window") + 1], "8")
        res = st.result
        self.assertEqual(res["modes"], ["alone", "tandem"])
        self.assertEqual(res["pairs"]["resnet50_b32:resnet50_train"]["cells_planned"], 4)
        self.assertIn("resnet50_b32:resnet50_train tandem: no repetition", res["headline"][0])

    def test_without_mps_the_colocation_stage_falls_back_to_time_slicing_and_says_so(self):
        r = self.cell
        doc = {"benchmark": "colocation", "pair": "resnet50_b32:resnet50_train",
               "inference": "resnet50_b32", "training": "resnet50_train", "failed": [],
               "runs": [r(0, "alone", 10.0, 10.0), r(0, "plain", 30.0, 9.0),
                        r(0, "tandem", 11.0, 6.0)]}
        params = pv.BY_NAME["colocation"].params
        for override in (None, ["mps_lowprio"]):
            with tempfile.TemporaryDirectory() as d:
                ctx = mock.Mock(dry=False, bin="/carry", pairs=["resnet50_b32:resnet50_train"],
                                colocation_modes=override, env={"PATH": "/x"})
                st = FakeStage(d, {"colocation": {
                    "colocation-resnet50_b32-resnet50_train.json": doc}})
                with mock.patch.object(pv.shutil, "which", lambda *_a, **_k: None):
                    status = pv.stage_colocation(ctx, st, **params)
                if override:  # the modes asked for by name: no fallback
                    self.assertEqual(status, "skipped")
                    self.assertEqual(st.calls, [])
                    continue
                argv = st.calls[0][1]
                self.assertEqual(argv[argv.index("--modes") + 1], "plain,tandem")
                self.assertEqual(status, "partial")
                self.assertIn("ran plain, tandem instead of mps_lowprio, tandem_mps: "
                              "nvidia-cuda-mps-control not found", st.result["reason"])
                self.assertTrue(st.result["headline"][0].startswith("FALLBACK: "))
                self.assertIn("tandem: p99 x1.10", st.result["headline"][2])

    def test_dedup_and_follow_run_without_expandable_segments(self):
        args = mock.Mock(dry_run=False, bin="/carry", trace_script="x", pairs=None, refresh=1,
                         out=tempfile.mkdtemp(), work=tempfile.mkdtemp(), budget=540)
        try:
            with mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF":
                                              "expandable_segments:True,max_split_size_mb:64"}), \
                    mock.patch.object(pv, "machine_info", lambda dry: {"device": "d", "driver": "v"}):
                ctx = pv.Context(args, 2)
                self.assertEqual(ctx.alloc_env(), {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
                self.assertIn("expandable_segments", ctx.summary["env_changes"]
                              ["PYTORCH_CUDA_ALLOC_CONF"]["was"])
        finally:
            shutil.rmtree(args.out)
            shutil.rmtree(args.work)


    def test_the_spatial_headline_says_the_state_and_the_share_left(self):
        rep = {"pair": "resnet50_b32:resnet50_train", "rep": 0,
               "spatial": {"state": "armed", "masked_launches": 812, "descriptor_version": None,
                           "reserve": 0.061, "reserve_max": 0.25}}
        self.assertEqual(
            pv.spatial_headline(rep),
            "spatial: resnet50_b32:resnet50_train rep 1: armed, 812 launches masked; "
            "leaves 6.1% of the TPCs to inference (at most 25.0%)")
        old = {"pair": "p", "rep": 1, "spatial": {"state": "unknown_descriptor",
                                                  "masked_launches": 0, "descriptor_version": 6}}
        self.assertEqual(pv.spatial_headline(old),
                         "spatial: p rep 2: unknown_descriptor (version 0x06)")
        self.assertEqual(pv.spatial_headline({"pair": "p", "rep": 0, "spatial": None}),
                         "spatial: p rep 1: not reported")

@unittest.skipUnless(READY, SKIP)
class DryRun(unittest.TestCase):
    def test_every_stage_of_every_part_runs_under_its_budget(self):
        with tempfile.TemporaryDirectory() as out:
            p = run_prove(["--out", out])
            self.assertIn(p.returncode, (0,), p.stdout + p.stderr)
            for part, names in pv.PARTS.items():
                doc = summary(out, part)
                self.assertTrue(doc["dry_run"])
                self.assertEqual([s["name"] for s in doc["stages"]], names)
                self.assertIsNotNone(doc["commit"]["commit"])
                self.assertLessEqual(doc["wall_s"], doc["budget_s"])
                got = stages(doc)
                for name in names:
                    s, stage = got[name], pv.BY_NAME[name]
                    if name in ("trace", "trace_rest"):
                        # trace_capture.py's stand-ins (TANDEM_GPU_FAKE=1): each
                        # job's trace, and the timeslice analysis in part 1.
                        jobs = stage.params["jobs"]
                        self.assertEqual(s["status"], "pass", s)
                        self.assertEqual(s["result"]["traces"],
                                         sorted(f"{j}.json" for j in jobs), s)
                        self.assertEqual(s["result"]["timeslice"], name == "trace", s)
                        continue
                    want = {"colocation": ("pass", "partial")}.get(name, ("pass",))
                    self.assertIn(s["status"], want, (part, name, s))
                    self.assertLessEqual(s["timeout_s"], stage.dry_budget)
                    self.assertLessEqual(s["wall_s"], s["timeout_s"] + 1)
                    self.assertTrue(any(n.startswith(f"prove-part{part}/stages/{stage.sid}-{name}/")
                                        for n in bundle_names(out, part)), name)
            # what the stages measured reached the summary
            p1, p2, p3, p4 = (stages(summary(out, k)) for k in (1, 2, 3, 4))
            for part, name in ((p1, "interposition"), (p3, "interposition_rest")):
                got = part[name]["result"]["workloads"]
                self.assertEqual(sorted(got), sorted(pv.BY_NAME[name].params["workloads"]))
                self.assertTrue(all(w["counts_equal"] for w in got.values()), got)
            self.assertIn("time slice 2.00 ms", " ".join(p1["trace"]["result"]["headline"]))
            self.assertTrue(p1["coordinator"]["result"]["metrics_parsed"])
            self.assertEqual(p1["smoke"]["result"]["launch_loop"]["shim"]["shim_kernels"], 1000)
            loop = p2["overhead"]["result"]["launch_loop"]
            self.assertEqual(loop["errors"], [])
            self.assertIn("shim_tandemd", loop)
            self.assertTrue(p2["dedup_replicas"]["result"]["cells"]
                            ["dedup-resnet50-safetensors-r2"]["outputs_identical"])
            self.assertTrue(p2["follow"]["result"]["checks"]["outputs_track_training"])
            adv = p3["dedup_adversarial"]["result"]["cells"]
            self.assertEqual(len(adv), 2)
            self.assertTrue(all(c["writer_as_expected"] for c in adv.values()))
            # part 1's pair: the MPS modes run against tests/fake-mps-control,
            # each paired with the alone cell of its repetition
            col = p1["colocation"]["result"]
            self.assertEqual(col["modes"], ["alone", "mps_lowprio", "tandem_mps"])
            self.assertEqual(col["modes_skipped"], {})
            pair = col["pairs"][pv.COLOCATION_PAIRS[0]]
            self.assertGreaterEqual(pair["cells_done"], 3)
            for mode in ("mps_lowprio", "tandem_mps"):
                reps = pair["paired"][mode]["reps"]
                self.assertGreaterEqual(len(reps), 1, pair)
                self.assertIsNotNone(reps[0]["p99_ratio"])
                self.assertIsNotNone(reps[0]["train_kept"])
            self.assertIn("colocation: resnet50_b32:resnet50_train tandem_mps: p99 x", p.stdout)
            # part 4's SM-mask probe on the fake driver: its launch-callback
            # table answers (the kernel parts need PTX: skipped), green
            # contexts are absent, named (the fail-open side)
            mask = p4["smmask"]["result"]
            self.assertEqual(mask["probe"]["callback_table"], True)
            self.assertEqual(mask["callback"]["supported"], True)
            self.assertIn("no PTX", mask["callback"]["skipped"])
            self.assertEqual(mask["probe"]["green_contexts"], False)
            self.assertIn("cuGreenCtxCreate", mask["probe"]["green_missing"])
            for part in ("cupti_after", "cupti_before"):
                self.assertIn("dry run", mask[part]["skipped"])
            self.assertEqual(mask["problems"], [])
            # part 4's engine rules against the fake driver and
            # tests/fake-mps-control: the copy ran on every rung and every
            # MPS config's clients ran (the fake's figures measure nothing),
            # the findings were read from them
            rules = p4["engine_rules"]["result"]
            self.assertEqual(rules["problems"], [])
            self.assertIn("best_gb_per_s", rules["bandwidth"])
            self.assertIn("empty_back_to_back_ns", rules["launch_floor"])
            self.assertEqual(set(rules["waits"]),
                             {"equal", "lowprio", "both_low", "tally", "resident"})
            self.assertIn("priority_2_reads_as", rules["mps"])
            # the neighbours ran every victim beside every aggressor, on
            # SMs the fake records no placement for
            nb = rules["neighbours"]
            self.assertEqual(set(nb) - {"disjoint", "victim_sms", "aggressor_sms"},
                             {f"{v}_beside_{a}" for v in ("copy", "burn")
                              for a in ("copy", "burn")})
            self.assertIsNone(nb["disjoint"])
            self.assertIn("copy bandwidth: best", rules["headline"][0])
            self.assertIn("launch floor:", rules["headline"][1])
            self.assertIn("neighbours on SMs of their own", rules["headline"][2])
            self.assertIn("probe wait p50/p99 us", rules["headline"][3])
            # part 4's co-location in issue 23's mode: tandemd accepted the
            # spatial config, both modes paired with the alone cell; the
            # fake workers make no CUDA call, so no shim reports the state
            sp = p4["colocation_spatial"]["result"]
            self.assertEqual(sp["modes"], ["alone", "mps_lowprio", "tandem_spatial"])
            sp_pair = sp["pairs"][pv.COLOCATION_PAIRS[0]]
            self.assertEqual(sp_pair["cells_done"], 3)
            for mode in pv.SPATIAL_MODES:
                self.assertIsNotNone(sp_pair["paired"][mode]["reps"][0]["p99_ratio"])
            self.assertEqual([r["rep"] for r in sp["spatial"]], [0])
            # at most 8 files per part come back: here 3 each
            self.assertEqual(sorted(os.listdir(out)), sorted(
                f"prove-part{k}.{e}" for k in (1, 2, 3, 4) for e in ("json", "tar.gz", "log")))

    def test_a_stage_past_its_timeout_is_stopped_and_keeps_what_it_wrote(self):
        with tempfile.TemporaryDirectory() as out:
            p = run_prove(["--part", "1", "--out", out, "--budget", "27",
                           "--stage-timeout", "interposition=6"],
                          {"TANDEM_GPU_FAKE_HANG": "cudagraph"})
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            s = stages(summary(out, 1))
            self.assertEqual(s["smoke"]["status"], "pass")
            ip = s["interposition"]
            self.assertEqual(ip["status"], "timeout")
            self.assertLessEqual(ip["wall_s"], 6 + 2 + 10 + 2)  # budget, grace, wait
            self.assertEqual(ip["partial"]["interposition.json"],
                             {"parsed": True, "complete": False})
            kept = bundle_json(out, 1, "2-interposition/interposition.json")
            self.assertEqual([r["workload"] for r in kept["rows"]], ["cublas"])
            # the part's budget (27 s, 8 s of it kept back) cannot hold another stage
            # once interposition has used its 6 s: at most 13 s are left, under the 15 s minimum
            for name in ("trace", "colocation", "coordinator"):
                self.assertEqual(s[name]["status"], "skipped", name)
                self.assertIn("budget", s[name]["reason"])
            self.assertIn("TIMEOUT", p.stdout)
            self.assertEqual(marked(ip["marker"].split("=", 1)[1]), [])
            time.sleep(0.3)
            pid = ip["steps"][0]["pid"]
            self.assertFalse(os.path.exists(f"/proc/{pid}"), "the stage's process survived")

    def test_a_killed_command_keeps_the_finished_stages(self):
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, TANDEM_GPU_FAKE_HANG="cudagraph")
            env.pop(pv.INJECT_ENV, None)
            p = subprocess.Popen([sys.executable, PROVE, "--dry-run", "--part", "1", "--out", out,
                                  "--refresh", "0.3"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            step_pid = None
            try:
                deadline = time.time() + 60
                while time.time() < deadline:
                    time.sleep(0.2)
                    try:
                        doc = summary(out, 1)
                        kept = bundle_json(out, 1, "2-interposition/interposition.json")
                    except (OSError, ValueError, tarfile.TarError, EOFError):
                        continue
                    ip = stages(doc)["interposition"]
                    if ip["status"] == "running" and kept and kept["rows"]:
                        step_pid = ip["steps"][0]["pid"]
                        break
                self.assertIsNotNone(step_pid, "interposition never showed a row while running")
            finally:
                p.kill()  # the device tool's kill: no cleanup runs
                p.wait(timeout=10)
                for pid in marked(f"{p.pid}-"):
                    os.kill(pid, signal.SIGKILL)
            doc = summary(out, 1)
            shutil.rmtree(doc["work"], ignore_errors=True)  # a killed prove cannot remove it
            s = stages(doc)
            self.assertEqual(doc["verdict"], "running")
            self.assertEqual(s["smoke"]["status"], "pass")
            self.assertEqual(s["interposition"]["status"], "running")
            for name in ("trace", "colocation", "coordinator"):
                self.assertEqual(s[name]["status"], "pending", name)
            names = bundle_names(out, 1)
            self.assertIn("prove-part1/stages/1-smoke/env.json", names)
            kept = bundle_json(out, 1, "2-interposition/interposition.json")
            self.assertFalse(kept["complete"])
            self.assertEqual(kept["rows"][0]["workload"], "cublas")

    def test_sigterm_stops_the_running_stage_and_writes_the_record(self):
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, TANDEM_GPU_FAKE_HANG="cudagraph")
            env.pop(pv.INJECT_ENV, None)
            p = subprocess.Popen([sys.executable, PROVE, "--dry-run", "--part", "1", "--out", out],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
            deadline = time.time() + 60
            hung = []
            while time.time() < deadline and not hung:
                time.sleep(0.2)
                hung = marked(f"{p.pid}-interposition", "--child cudagraph")
            self.assertTrue(hung, "the interposition stage never reached its hanging child")
            p.send_signal(signal.SIGTERM)
            log, _ = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 130, log)
            doc = summary(out, 1)
            s = stages(doc)
            self.assertEqual(doc["verdict"], "interrupted")
            self.assertEqual(s["interposition"]["status"], "interrupted")
            for name in ("trace", "colocation", "coordinator"):
                self.assertEqual(s[name]["status"], "skipped", name)
            self.assertIn("interposition.json", s["interposition"]["partial"])
            self.assertEqual(marked(f"{p.pid}-"), [])
            self.assertIn("INTERRUPTED", log)

    def test_a_failed_smoke_test_stops_the_part_with_a_clear_report(self):
        with tempfile.TemporaryDirectory() as d:
            broken = os.path.join(d, "bin")
            os.makedirs(broken)
            open(os.path.join(broken, "libtandem.so"), "w").close()  # not a library
            shutil.copy(os.path.join(BIN, "tandemd"), broken)
            out = os.path.join(d, "out")
            p = run_prove(["--part", "1", "--bin", broken, "--fake-lib", BIN, "--out", out])
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            s = stages(summary(out, 1))
            self.assertEqual(s["smoke"]["status"], "fail")
            self.assertIn("not loaded", " ".join(s["smoke"]["result"]["problems"]))
            for name in pv.PARTS[1][1:]:
                self.assertEqual(s[name]["status"], "skipped")
                self.assertIn("smoke test", s[name]["reason"])
                self.assertNotIn("steps", s[name])
            self.assertIn("SMOKE TEST FAILED: the shim is not loaded", p.stdout)
            self.assertEqual(summary(out, 1)["verdict"], "smoke test failed")

    def test_missing_builds_say_how_to_make_them(self):
        with tempfile.TemporaryDirectory() as d:
            p = run_prove(["--part", "2", "--bin", d, "--fake-lib", BIN, "--out", d])
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            problems = stages(summary(d, 2))["smoke"]["result"]["problems"]
            self.assertTrue(any("cargo build --release" in x for x in problems), problems)

    def test_an_orchestration_error_is_recorded_and_the_part_goes_on(self):
        with tempfile.TemporaryDirectory() as out:
            p = run_prove(["--part", "1", "--only", "smoke,interposition,coordinator",
                           "--out", out], {pv.INJECT_ENV: "raise:interposition"})
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            s = stages(summary(out, 1))
            self.assertEqual(s["interposition"]["status"], "error")
            self.assertIn("InjectedFault", s["interposition"]["traceback"])
            self.assertEqual(s["coordinator"]["status"], "pass")

    def test_the_trace_stages_call_trace_capture_with_its_interface(self):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "trace_capture.py")
            with open(script, "w") as f:
                f.write("import json, os, sys\n"
                        "a = sys.argv[1:]\nout = a[a.index('--out') + 1]\n"
                        "os.makedirs(os.path.join(out, 'traces'))\n"
                        "open(os.path.join(out, 'traces', 'resnet50_b4.json'), 'w')"
                        ".write('{}\\n')\n"
                        "json.dump({'argv': a}, open(os.path.join(out, 'argv.json'), 'w'))\n"
                        "ts = {'skipped': os.environ.get('STAND_IN_SKIP'),\n"
                        "      'timeslice': {'n': 3, 'median_ns': 5e6},\n"
                        "      'switch': {'n': 2, 'median_ns': 4e4}}\n"
                        "if '--no-timeslice' not in a:\n"
                        "    json.dump(ts, open(os.path.join(out, 'timeslice.json'), 'w'))\n"
                        "jobs = {'resnet50_b4': 'ok', 'bert_b8': 'skipped: budget spent'}\n"
                        "json.dump({'jobs': jobs},\n"
                        "          open(os.path.join(out, 'trace_capture.json'), 'w'))\n")
            for part, name, extra in ((1, "trace", {}), (3, "trace_rest", {}),
                                      (1, "trace", {"STAND_IN_SKIP": "no CuPy"})):
                out = os.path.join(d, f"out-{name}-{len(extra)}")
                p = run_prove(["--part", str(part), "--only", f"smoke,{name}", "--out", out,
                               "--trace-script", script], extra)
                t = stages(summary(out, part))[name]
                self.assertEqual(t["result"]["traces"], ["resnet50_b4.json"])
                self.assertEqual(t["result"]["jobs"]["bert_b8"], "skipped: budget spent")
                stage = pv.BY_NAME[name]
                argv = bundle_json(out, part, f"{stage.sid}-{name}/argv.json")["argv"]
                self.assertEqual(argv[0], "--out")
                self.assertTrue(argv[1].endswith(f"stages/{stage.sid}-{name}"))
                self.assertEqual(argv[2], "--budget")
                self.assertLessEqual(int(argv[3]), stage.dry_budget)
                self.assertEqual(argv[4:8], ["--device", "cpu", "--jobs",
                                             ",".join(stage.params["jobs"])])
                if name == "trace_rest":
                    self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                    self.assertEqual(argv[8:], ["--no-timeslice"])
                    self.assertEqual(t["status"], "pass")
                    self.assertFalse(t["result"]["timeslice"])
                elif not extra:
                    self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                    self.assertEqual(argv[8:], [])
                    self.assertEqual(t["status"], "pass")
                    self.assertIn("trace: time slice 5.00 ms (n 3), switch 40.0 us", p.stdout)
                    self.assertIn("trace: not captured: bert_b8", p.stdout)
                else:  # traces without the time slice: partial, and says why
                    self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                    self.assertEqual(t["status"], "partial")
                    self.assertIn("time slice not measured: no CuPy", p.stdout)


if __name__ == "__main__":
    unittest.main()
