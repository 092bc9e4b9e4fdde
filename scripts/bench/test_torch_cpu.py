"""The GPU scripts' PyTorch code, run on the CPU before it meets a GPU.

    PYTHONDONTWRITEBYTECODE=1 /tmp/torchenv/bin/python -m unittest scripts/bench/test_torch_cpu.py

Runs the scripts' own torch functions with device="cpu" (every GPU call site
keeps the default, "cuda"), small batches and few steps:
  scripts/bench/colocation.py  the inference requests (resnet50, bert) and the
                               training steps (resnet50, gpt2), the OOM retry;
  scripts/bench/dedup.py       prepare (safetensors + torch.save) and every loader,
                               outputs bit-identical to the in-memory model's;
                               the replica's requests, forward, SERVE digest, WRITE;
  scripts/gpu/follow.py        the MLP, its eval digest, the trainer's steps;
  scripts/gpu/interposition.py the eager, cuBLAS, torch.compile and ResNet
                               workloads, the child's region, the train-step child.
Each class is skipped, with the reason, where torch, torchvision, transformers
or safetensors is missing (CI without torch skips the file). Not reachable on
a CPU: CUDA graphs, pinned memory and non_blocking copies, the profiler's CUDA
kernel records, cuDNN/cuBLAS algorithm choice, libtandem.so, and
tandem_follow's share/follow (they need CUDA memory).
"""

import argparse
import contextlib
import hashlib
import importlib
import io
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # no __pycache__ beside the scripts
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "scripts", "gpu"))
sys.path.insert(2, os.path.join(ROOT, "python"))

import colocation as co  # noqa: E402  (stdlib only at import)
import dedup as dd  # noqa: E402
import follow as fo  # noqa: E402
import interposition as ip  # noqa: E402
import tandem_follow as tf  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

DEVICE = "cpu"
# dedup's gpt_1b3 with the same structure (GPT-2, tied lm_head, vocab 50257,
# 1024 positions) but 2 layers of width 64 instead of 24 of 2048.
TINY_GPT = {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 1024}
REQUESTS = 3  # dedup requests per SERVE digest here (1000 on the GPU)


def missing(*mods):
    """The first of `mods` that cannot be imported, else None."""
    for mod in mods:
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001 - ImportError, or a broken install
            return mod
    return None


def needs(*mods):
    m = missing(*mods)
    return unittest.skipIf(m is not None, f"{m} is not installed (pip install {m})")


def finite(t):
    return bool(torch.isfinite(t).all())


def snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def changed(before, model):
    """Names of the parameters that differ from `before`."""
    return [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]


class TorchFlags:
    """follow.py and interposition.py set process-wide determinism flags;
    restored after each test so the tests do not depend on their order."""

    def setUp(self):
        cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
        self._flags = (torch.are_deterministic_algorithms_enabled(),
                       torch.is_deterministic_algorithms_warn_only_enabled(),
                       cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32)

    def tearDown(self):
        cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
        det, warn_only, *rest = self._flags
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, matmul.allow_tf32 = rest


# ---------------------------------------------------------------- colocation.py


@needs("torch", "torchvision", "transformers")
class ColocationInference(unittest.TestCase):
    """_build_inference's request(): host input -> model (fp16) -> float32 on the host."""

    def check(self, model, batch, seq, width):
        request = co._build_inference(model, batch, seq, device=DEVICE)
        out = request()
        self.assertEqual(tuple(out.shape), (batch, width))
        self.assertEqual(out.dtype, torch.float32)
        self.assertEqual(out.device.type, "cpu")
        self.assertTrue(finite(out), f"{model}: non-finite outputs")
        self.assertGreater(float(out.abs().sum()), 0)
        # The same input every request: the same answer (eval mode, no dropout).
        self.assertTrue(torch.equal(out, request()))

    def test_resnet50(self):
        self.check("resnet50", 2, 128, 1000)

    def test_bert(self):
        self.check("bert", 2, 16, 768)  # seq 128 on the GPU; the [CLS] row of hidden 768

    def test_unknown_model_is_refused(self):
        with self.assertRaises(SystemExit):
            co._build_inference("vgg", 1, 8, device=DEVICE)


@needs("torch", "torchvision", "transformers")
class ColocationTraining(unittest.TestCase):
    """_build_training: three warm-up steps inside, then step() -> float loss."""

    def check(self, model, batch, seq):
        step, got = co._build_training(model, batch, seq, device=DEVICE)
        self.assertEqual(got, batch)
        m = step.model
        self.assertTrue(m.training)
        self.assertTrue(all(p.dtype == torch.float32 for p in m.parameters()),
                        "autocast must leave the master weights in float32")
        before = snapshot(m)
        losses = [step(), step()]
        for loss in losses:
            self.assertIsInstance(loss, float)
            self.assertTrue(math.isfinite(loss), losses)
        moved = changed(before, m)
        self.assertGreater(len(moved), 0.9 * len(before), f"{model}: parameters did not change")
        return losses

    def test_resnet50_sgd_steps(self):
        self.check("resnet50", 2, 0)

    def test_gpt2_adamw_steps(self):
        self.check("gpt2", 1, 16)  # seq 512 (batch 8) on the GPU

    def test_out_of_memory_halves_the_batch(self):
        real, tried = co._training_step, []

        def oom_above_one(torch_, model, batch, seq, device="cuda"):
            tried.append(batch)
            if batch > 1:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
            return real(torch_, model, batch, seq, device)

        co._training_step = oom_above_one
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                step, batch = co._build_training("resnet50", 4, 0, device=DEVICE)
        finally:
            co._training_step = real
        self.assertEqual((tried, batch), ([4, 2, 1], 1))
        self.assertIn("out of memory; trying batch 1", err.getvalue())
        self.assertTrue(math.isfinite(step()))


# ---------------------------------------------------------------- dedup.py


@needs("torch", "torchvision", "transformers", "safetensors")
class DedupLoaders(unittest.TestCase):
    """prepare saves, every loader loads back (onto the CPU here), and the
    replica's outputs are the in-memory model's, bit for bit."""

    SEED = 3

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tandem-dedup-cpu-")
        cls.meta = {}
        for model in dd.MODELS:
            d = os.path.join(cls.tmp, model)
            a = argparse.Namespace(model=model, dir=d, seed=cls.SEED)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                dd.prepare_main(a, device=DEVICE, gpt=TINY_GPT)
            line = out.getvalue().strip().splitlines()[-1]
            assert line.startswith("RESULT "), out.getvalue()
            cls.meta[model] = json.loads(line[len("RESULT "):])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def dir(self, model):
        return os.path.join(self.tmp, model)

    def reference(self, model):
        """What prepare built, rebuilt in memory from the same seed."""
        return dd._random_model(model, self.SEED, torch, DEVICE, TINY_GPT)

    def load(self, model, loader):
        return dd.load_model(model, loader, self.dir(model), self.meta[model],
                             device=DEVICE, gpt=TINY_GPT)

    def serve(self, m, model):
        return dd._serve(m, model, REQUESTS, self.SEED, torch, DEVICE)

    def test_prepare_writes_both_files_and_meta(self):
        for model in dd.MODELS:
            with self.subTest(model=model):
                meta = self.meta[model]
                self.assertEqual(dd.bl.read_json(os.path.join(self.dir(model), "meta.json")), meta)
                self.assertEqual(meta["weight_bytes"], 2 * meta["params"])  # fp16
                from safetensors.torch import load_file

                st = load_file(os.path.join(self.dir(model), "model.safetensors"))
                pt = torch.load(os.path.join(self.dir(model), "model.pt"))
                self.assertEqual(sorted(st), sorted(pt))
                for k in st:
                    self.assertTrue(torch.equal(st[k], pt[k]), k)
                ref = self.reference(model)
                self.assertEqual(meta["params"], sum(p.numel() for p in ref.parameters()))
                sd = ref.state_dict()
                self.assertEqual(sorted(st), sorted(set(sd) - set(meta["tied"])))
                for k, v in st.items():
                    self.assertTrue(torch.equal(v, sd[k]), f"{model}: {k} differs from the model")
        self.assertEqual(self.meta["gpt_1b3"]["tied"], {"lm_head.weight": "transformer.wte.weight"})
        self.assertEqual(self.meta["resnet50"]["tied"], {})

    def test_every_loader_gives_the_in_memory_models_outputs(self):
        for model in dd.MODELS:
            ref = self.reference(model)
            want = self.serve(ref, model)
            ref_sd = ref.state_dict()
            for loader in dd.LOADERS:
                with self.subTest(model=model, loader=loader):
                    m = self.load(model, loader)
                    self.assertFalse(m.training)
                    tensors = list(m.parameters()) + list(m.buffers())
                    self.assertEqual({t.device.type for t in tensors}, {DEVICE})
                    self.assertEqual({p.dtype for p in m.parameters()}, {torch.float16})
                    sd = m.state_dict()
                    self.assertEqual(sorted(sd), sorted(ref_sd))
                    for k, v in sd.items():
                        self.assertTrue(torch.equal(v, ref_sd[k]), f"{k} differs")
                    if model == "gpt_1b3":  # tied again: one copy of the embedding
                        self.assertIs(m.lm_head.weight, m.transformer.wte.weight)
                    self.assertEqual(sum(p.numel() for p in m.parameters()),
                                     self.meta[model]["params"])
                    self.assertEqual(self.serve(m, model), want)

    def test_requests_are_deterministic_and_shaped(self):
        for model in dd.MODELS:
            with self.subTest(model=model):
                xs = [dd._request(model, i, self.SEED, torch) for i in range(-1, 12)]
                for i, x in enumerate(xs, -1):
                    self.assertTrue(torch.equal(x, dd._request(model, i, self.SEED, torch)))
                    self.assertIn(x.shape[0], (1, 2, 3, 4))
                    if model == "resnet50":
                        self.assertEqual((tuple(x.shape[1:]), x.dtype),
                                         ((3, 224, 224), torch.float16))
                    else:
                        self.assertEqual((tuple(x.shape[1:]), x.dtype),
                                         ((dd.MODELS[model]["seq"],), torch.int64))
                        self.assertTrue(0 <= int(x.min()) and int(x.max()) < 50257)
                self.assertGreater(len({x.shape[0] for x in xs}), 1, "batch sizes vary")
                other = dd._request(model, 0, self.SEED + 1, torch)
                self.assertFalse(other.shape == xs[1].shape and torch.equal(other, xs[1]))

    def test_forward_shapes(self):
        for model, width in (("resnet50", 1000), ("gpt_1b3", 50257)):
            with self.subTest(model=model):
                m = self.load(model, "safetensors")
                x = dd._request(model, 0, self.SEED, torch)
                with torch.inference_mode():
                    out = dd._forward(m, model, x)
                self.assertEqual(tuple(out.shape), (x.shape[0], width))
                self.assertEqual(out.dtype, torch.float16)
                self.assertTrue(finite(out))

    def test_serve_digest_is_the_sha256_of_the_outputs_in_order(self):
        m = self.load("gpt_1b3", "to_cuda")
        h = hashlib.sha256()
        with torch.inference_mode():
            for i in range(REQUESTS):
                out = dd._forward(m, "gpt_1b3", dd._request("gpt_1b3", i, self.SEED, torch))
                h.update(out.contiguous().view(torch.uint8).numpy().tobytes())
        self.assertEqual(self.serve(m, "gpt_1b3"), h.hexdigest())
        self.assertNotEqual(dd._serve(m, "gpt_1b3", REQUESTS + 1, self.SEED, torch, DEVICE),
                            h.hexdigest())

    def test_write_modes_double_every_weight(self):
        # On the CPU "memcpy" is a CPU-to-CPU copy (p.data.cpu() is p.data
        # itself); on the GPU it is the host-to-device copy tandem must allow.
        for model in dd.MODELS:
            want = self.serve(self.load(model, "safetensors"), model)
            digests = {}
            for how in ("memcpy", "kernel"):
                with self.subTest(model=model, how=how):
                    m = self.load(model, "safetensors")
                    before = snapshot(m)
                    dd._write(m, how, torch)
                    for n, p in m.named_parameters():
                        self.assertTrue(torch.equal(p.detach(), before[n] * 2), n)
                    digests[how] = self.serve(m, model)
                    self.assertNotEqual(digests[how], want)
            self.assertEqual(digests["memcpy"], digests["kernel"])


# ---------------------------------------------------------------- follow.py


@needs("torch")
class FollowChildren(TorchFlags, unittest.TestCase):
    """follow.py's MLP (full size: ~75.5M parameters, float32), its eval
    digest and the trainer's steps. share()/follow() need CUDA memory."""

    def setUp(self):
        super().setUp()
        fo.setup_torch()
        self.x = fo.eval_input(torch, DEVICE)

    def test_eval_sha_same_seed_same_digest_other_seed_other_digest(self):
        a, b = fo.build_model(torch, 0, DEVICE), fo.build_model(torch, 0, DEVICE)
        follower = fo.build_model(torch, 1234, DEVICE).eval()
        self.assertEqual(tuple(self.x.shape), (fo.EVAL_BATCH, fo.IN))
        self.assertTrue(torch.equal(self.x, fo.eval_input(torch, DEVICE)))
        sha = fo.eval_sha(torch, a, self.x)
        self.assertEqual(len(sha), 64)
        self.assertTrue(a.training, "eval_sha restores train mode")
        self.assertEqual(fo.eval_sha(torch, b, self.x), sha)
        self.assertEqual(fo.eval_sha(torch, a, self.x), sha)
        self.assertNotEqual(fo.eval_sha(torch, follower, self.x), sha)
        self.assertFalse(follower.training)
        # Follower and writer build the trainer's layout: the map's tag matches.
        tag = tf.layout_tag(a, include_buffers=True)
        self.assertEqual(tf.layout_tag(follower, include_buffers=True), tag)
        self.assertEqual(tf.layout_tag(fo.build_model(torch, 99, DEVICE), include_buffers=True), tag)
        self.assertEqual(fo.weights_bytes(a),
                         sum(n * size for _, n, size, _, _ in tf.describe(a, include_buffers=True)))

    def test_trainer_steps_change_the_digest_and_the_batchnorm_statistics(self):
        model = fo.build_model(torch, 0, DEVICE)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        data, target = fo.train_data(torch, DEVICE)
        self.assertEqual((tuple(data.shape), tuple(target.shape)),
                         ((fo.BATCH, fo.IN), (fo.BATCH, fo.OUT)))
        sha0 = fo.eval_sha(torch, model, self.x)
        bn = model[1]
        mean0 = bn.running_mean.clone()
        before = snapshot(model)
        step, loss = fo.train_until(torch, model, opt, data, target, 0, 2)
        self.assertEqual(step, 2)
        self.assertTrue(math.isfinite(float(loss.detach())))
        self.assertEqual(int(bn.num_batches_tracked), 2)
        self.assertFalse(torch.equal(bn.running_mean, mean0))
        self.assertEqual(changed(before, model), list(before))
        sha2 = fo.eval_sha(torch, model, self.x)
        self.assertNotEqual(sha2, sha0)
        self.assertEqual(fo.train_until(torch, model, opt, data, target, 2, 2), (2, None))
        self.assertEqual(fo.eval_sha(torch, model, self.x), sha2)  # an eval changes nothing

    def rebind(self, model, buf, slots):
        """What share() and follow() do to the module, with a CPU byte buffer
        standing in for the CUDA region (tandem_follow's own plan and views)."""
        tensors = tf._tensors(model, True)
        views = tf._views(buf, slots, tensors)
        return tensors, views

    def test_a_follower_of_the_trainers_memory_tracks_its_training(self):
        # The premise of follow.py's stops: the trainer's optimizer and
        # BatchNorm updates land in the region (nothing detaches), and a
        # follower whose tensors view the same bytes computes the trainer's
        # eval output bit for bit; the control (its own weights) does not.
        trainer = fo.build_model(torch, 0, DEVICE)
        slots, total = tf.plan(tf.describe(trainer, include_buffers=True))
        buf = torch.zeros(total, dtype=torch.uint8)
        region = tf.Region("share", fo.REGION, total, buf.data_ptr(), tf.OK, slots=slots)
        tensors, views = self.rebind(trainer, buf, slots)
        with torch.no_grad():
            for v, (_, t, _) in zip(views, tensors):
                v.copy_(t)
        for v, (_, t, _) in zip(views, tensors):
            t.data = v
        opt = torch.optim.Adam(trainer.parameters(), lr=1e-4)  # after share(), as it must be
        follower = fo.build_model(torch, 1234, DEVICE).eval()
        control = fo.build_model(torch, 1234, DEVICE).eval()
        tensors, views = self.rebind(follower, buf, slots)
        for v, (_, t, is_param) in zip(views, tensors):
            t.data = v
            if is_param:
                t.requires_grad_(False)
        self.assertEqual(region.detached(follower), [])
        data, target = fo.train_data(torch, DEVICE)
        step, shas = 0, []
        for stop in (1, 2):
            step, _ = fo.train_until(torch, trainer, opt, data, target, step, stop)
            self.assertEqual(region.detached(trainer), [], "an update left the region")
            shas.append(fo.eval_sha(torch, trainer, self.x))
            self.assertEqual(fo.eval_sha(torch, follower, self.x), shas[-1], f"stop {stop}")
            self.assertNotEqual(fo.eval_sha(torch, control, self.x), shas[-1])
        self.assertNotEqual(shas[0], shas[1])
        self.assertEqual(int(follower[1].num_batches_tracked), 2)  # the trainer's statistics


# ---------------------------------------------------------------- interposition.py


def have_cc():
    return any(shutil.which(c) for c in ("cc", "gcc", "clang"))


@needs("torch")
class InterpositionWorkloads(TorchFlags, unittest.TestCase):
    """The plain-vs-plain control of each CPU-able workload: two fresh builds
    give the same digest; and a step changes its state. cudagraph needs CUDA."""

    def digests(self, name, steps=2):
        step = ip.torch_workload(name, DEVICE)
        out = []
        for _ in range(steps):
            ts = step()
            self.assertTrue(all(finite(t.float()) for t in ts), name)
            out.append(ip.digest(ts))
        return out

    def check(self, name):
        first = self.digests(name)
        self.assertNotEqual(first[0], first[1], f"{name}: a step changes nothing")
        self.assertEqual(self.digests(name), first, f"{name}: not deterministic on the CPU")

    def test_digest(self):
        a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        d = ip.digest([a])
        self.assertEqual(d, ip.digest([a.clone()]))
        self.assertEqual(d, ip.digest([a.t().contiguous().t()]))  # layout does not count
        self.assertNotEqual(d, ip.digest([a.reshape(3, 2)]))  # shape does
        self.assertNotEqual(d, ip.digest([a.double()]))  # dtype does
        self.assertNotEqual(d, ip.digest([a, a]))
        self.assertEqual(len(ip.digest([torch.tensor(1.5, dtype=torch.bfloat16)])), 64)

    def test_eager(self):
        self.check("eager")

    def test_cublas(self):
        self.check("cublas")  # plain matmul and a bfloat16 addmm on the CPU

    @needs("torchvision")
    def test_train(self):
        self.check("train")  # ResNet-18, bfloat16 autocast, SGD; batch 32 at 128 px as on the GPU

    @unittest.skipUnless(have_cc(), "torch.compile on the CPU needs a C compiler")
    def test_compile(self):
        # Inductor's C++ backend here (about 20 s cold on 2 cores), Triton on the GPU.
        self.check("compile")

    def test_unknown_workload(self):
        with self.assertRaises(SystemExit):
            ip.torch_workload("cudagraphs", DEVICE)

    def test_child_region(self):
        r = ip.child_torch("eager", False, DEVICE)
        self.assertEqual(set(r), {"digest", "shim_kernels", "cupti_kernels"})
        self.assertIsNone(r["shim_kernels"], "no libtandem.so here: no shim counter")
        self.assertIsNone(r["cupti_kernels"])
        self.assertEqual(ip.child_torch("eager", False, DEVICE)["digest"], r["digest"])
        # child_torch's region is REGION_ITERS steps after one warm-up step.
        step = ip.torch_workload("eager", DEVICE)
        for _ in range(1 + ip.REGION_ITERS):
            out = step()
        self.assertEqual(ip.digest(out), r["digest"])

    def test_cupti_kernels_counts_only_cuda_kernels(self):
        # The profiler's event API as cupti_kernels reads it; a CPU-only
        # profile has no CUDA device events, so nothing counts.
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            torch.randn(64, 64) @ torch.randn(64, 64)
        self.assertGreater(len(prof.events()), 0)
        self.assertEqual(ip.cupti_kernels(prof), 0)

    @needs("torchvision")
    def test_train_step_child(self):
        r = ip.child_train_step(1, device=DEVICE, batch=2, warmup=1)  # 30 steps of 64 on the GPU
        self.assertTrue(math.isfinite(r["ms_per_step"]) and r["ms_per_step"] > 0, r)


if __name__ == "__main__":
    unittest.main()
