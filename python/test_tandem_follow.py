"""Tests of python/tandem_follow.py that need no torch and no GPU.

    python3 -m unittest python/test_tandem_follow.py

Covers the packing plan, the layout tag, the return codes against
include/tandem.h, the ctypes layer against a fake libtandem.so (a small C
file compiled here with `cc`; skipped without a C compiler), and the parts of
scripts/gpu/follow.py that need no GPU (its --help without torch, its memory
and stderr judgements). The module is
imported once in a process where importing torch fails. Tests that need torch
(layout tags of real nn.Modules, share/follow without libtandem.so) are
skipped when it is absent; those needing CUDA also without a GPU.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import tandem_follow as tf  # noqa: E402

MiB = 1 << 20

try:
    import torch
except ImportError:
    torch = None


# ---------------------------------------------------------------- fakes


class FakeTensor:
    """Metadata of a tensor, as describe() reads it, plus an address."""

    def __init__(self, shape, dtype="torch.float32", element_size=4, data_ptr=0):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._element_size = element_size
        self._data_ptr = data_ptr

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self._element_size

    def data_ptr(self):
        return self._data_ptr


class FakeModule:
    def __init__(self, params, buffers=()):
        self.params = list(params)
        self.buffers = list(buffers)

    def named_parameters(self):
        return iter(self.params)

    def named_buffers(self):
        return iter(self.buffers)


def mlp(hidden=64, dtype="torch.float32", element_size=4, swap=False, bn=True):
    params = [
        ("0.weight", FakeTensor((hidden, 32), dtype, element_size)),
        ("0.bias", FakeTensor((hidden,), dtype, element_size)),
        ("2.weight", FakeTensor((10, hidden), dtype, element_size)),
        ("2.bias", FakeTensor((10,), dtype, element_size)),
    ]
    if swap:
        params[0], params[1] = params[1], params[0]
    buffers = []
    if bn:
        buffers = [
            ("1.running_mean", FakeTensor((hidden,))),
            ("1.running_var", FakeTensor((hidden,))),
            ("1.num_batches_tracked", FakeTensor((), "torch.int64", 8)),
        ]
    return FakeModule(params, buffers)


FAKE_LIBTANDEM = r"""
/* A stand-in for libtandem.so's follow API: regions live in host memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ALLOCS 64
struct alloc {
    int used;
    int offered;                 /* a shared region followers may map */
    int mapping;                 /* a follower's mapping (else a share) */
    char name[64];
    uint64_t bytes;
    uint8_t layout[16];
    unsigned long long ptr;
};
static struct alloc allocs[MAX_ALLOCS];
static int share_code, share_allocates = 1;
static uint64_t last_bytes;
static unsigned last_timeout;
static unsigned long long last_free;
static int calls;

void fake_reset(void) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].used) free((void *)(uintptr_t)allocs[i].ptr);
    memset(allocs, 0, sizeof allocs);
    share_code = 0;
    share_allocates = 1;
    last_bytes = 0;
    last_timeout = 0;
    last_free = 0;
    calls = 0;
}
void fake_set_share(int code, int allocates) { share_code = code; share_allocates = allocates; }
uint64_t fake_last_bytes(void) { return last_bytes; }
unsigned fake_last_timeout(void) { return last_timeout; }
unsigned long long fake_last_free(void) { return last_free; }
int fake_calls(void) { return calls; }

static int valid_name(const char *n) {
    size_t len = strlen(n);
    if (len == 0 || len > 56) return 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)n[i] <= 0x20 || (unsigned char)n[i] >= 0x7f) return 0;
    return 1;
}

static struct alloc *add(const char *name, uint64_t bytes, const uint8_t *layout, int mapping) {
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].used) continue;
        void *p = malloc(mapping ? 1 : bytes);
        if (!p) return 0;
        allocs[i].used = 1;
        allocs[i].mapping = mapping;
        allocs[i].offered = 0;
        strcpy(allocs[i].name, name);
        allocs[i].bytes = bytes;
        memcpy(allocs[i].layout, layout, 16);
        allocs[i].ptr = (unsigned long long)(uintptr_t)p;
        return &allocs[i];
    }
    return 0;
}

int tandem_follow_alloc(uint64_t bytes, unsigned long long *dptr) {
    static const uint8_t none[16];
    calls++;
    last_bytes = bytes;
    if (!dptr) return -10;
    *dptr = 0;
    if (bytes == 0 || bytes > (64ull << 20)) return -10;
    if (!share_allocates) return share_code;
    struct alloc *a = add("", bytes, none, 0);
    if (!a) return -9;
    *dptr = a->ptr;
    return 0;
}

int tandem_follow_offer(unsigned long long dptr, const char *name, const uint8_t layout[16]) {
    calls++;
    if (!name || !layout || !valid_name(name)) return -10;
    struct alloc *a = 0;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].used && !allocs[i].mapping && allocs[i].ptr == dptr) a = &allocs[i];
    if (!a) return -10;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].used && allocs[i].offered && !strcmp(allocs[i].name, name)) return -6;
    strcpy(a->name, name);
    memcpy(a->layout, layout, 16);
    a->offered = share_code == 0;
    return share_code;
}

int tandem_follow_map(const char *name, uint64_t bytes, const uint8_t layout[16],
                      unsigned timeout_ms, unsigned long long *dptr) {
    calls++;
    last_bytes = bytes;
    last_timeout = timeout_ms;
    if (!dptr) return -10;
    *dptr = 0;
    if (!name || !layout || !valid_name(name) || bytes == 0) return -10;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        struct alloc *s = &allocs[i];
        if (!s->used || !s->offered || strcmp(s->name, name)) continue;
        if (s->bytes != bytes || memcmp(s->layout, layout, 16)) return -4;
        struct alloc *m = add(name, bytes, layout, 1);
        if (!m) return -9;
        *dptr = m->ptr;
        return 0;
    }
    return -3;
}

int tandem_follow_free(unsigned long long dptr) {
    calls++;
    last_free = dptr;
    for (int i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].used && allocs[i].ptr == dptr) {
            free((void *)(uintptr_t)dptr);
            memset(&allocs[i], 0, sizeof allocs[i]);
            return 0;
        }
    }
    return -10;
}

const char *tandem_follow_strerror(int code) {
    switch (code) {
    case 0: return "fake: ok";
    case -1: return "fake: follow mode is off";
    case -2: return "fake: no coordinator";
    case -3: return "fake: no such region";
    case -4: return "fake: size or layout differ";
    case -6: return "fake: name taken";
    case -7: return "fake: too many regions";
    case -10: return "fake: invalid argument";
    default: return "fake: other";
    }
}

static uint64_t total(int mapping) {
    uint64_t n = 0;
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].used && allocs[i].mapping == mapping && (mapping || allocs[i].offered))
            n += allocs[i].bytes;
    return n;
}
uint64_t tandem_follow_shared_bytes(void) { return total(0); }
uint64_t tandem_follow_mapped_bytes(void) { return total(1); }
"""


def c_compiler():
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def poisoned_path(tmp):
    """A folder where importing torch (or numpy) fails loudly."""
    for mod in ("torch", "numpy"):
        os.makedirs(os.path.join(tmp, mod), exist_ok=True)
        with open(os.path.join(tmp, mod, "__init__.py"), "w") as f:
            f.write(f"raise ImportError('imported {mod}')\n")
    return tmp


# ---------------------------------------------------------------- plan


class PlanTest(unittest.TestCase):
    def test_every_slot_is_aligned_and_in_order(self):
        items = [
            ("a", 3, 4, (3,), "torch.float32"),  # 12 bytes
            ("b", 1, 2, (), "torch.float16"),  # 2 bytes, a 0-d tensor
            ("c", 100, 8, (10, 10), "torch.float64"),
            ("d", 1000, 1, (1000,), "torch.uint8"),
        ]
        slots, total = tf.plan(items)
        self.assertEqual([s.name for s in slots], ["a", "b", "c", "d"])
        self.assertEqual([s.offset for s in slots], [0, 256, 512, 1536])
        self.assertEqual([s.nbytes for s in slots], [12, 2, 800, 1000])
        self.assertEqual(slots[1].shape, ())
        self.assertEqual(slots[2].dtype, "torch.float64")
        for s in slots:
            self.assertEqual(s.offset % tf.ALIGN, 0, s)
        for prev, nxt in zip(slots, slots[1:]):
            self.assertLessEqual(prev.offset + prev.nbytes, nxt.offset)
        self.assertEqual(total, 2 * MiB)

    def test_total_is_whole_2mib_granules(self):
        def total_for(nbytes):
            return tf.plan([("w", nbytes, 1, (nbytes,), "torch.uint8")])[1]

        self.assertEqual(total_for(1), 2 * MiB)
        self.assertEqual(total_for(2 * MiB), 2 * MiB)
        self.assertEqual(total_for(2 * MiB + 1), 4 * MiB)
        # Alignment padding counts: the second tensor starts at 256, so 2 MiB - 255 overflows.
        slots, total = tf.plan([("a", 1, 1, (1,), "u8"), ("b", 2 * MiB - 255, 1, (2 * MiB - 255,), "u8")])
        self.assertEqual(slots[1].offset, 256)
        self.assertEqual(total, 4 * MiB)

    def test_empty_model(self):
        self.assertEqual(tf.plan([]), ([], 0))
        self.assertEqual(tf.describe(FakeModule([])), [])

    def test_zero_size_tensor_takes_no_room(self):
        slots, total = tf.plan([("a", 0, 4, (0, 5), "f"), ("b", 4, 4, (4,), "f")])
        self.assertEqual([(s.offset, s.nbytes) for s in slots], [(0, 0), (0, 16)])
        self.assertEqual(total, 2 * MiB)

    def test_bad_input_is_named(self):
        cases = [
            ([("a", 6, 4, (2, 2), "f")], "does not match shape"),
            ([("a", 4, 0, (4,), "f")], "element size"),
            ([("a", 4, 4, (4,), "f"), ("a", 4, 4, (4,), "f")], "appears twice"),
            ([("", 4, 4, (4,), "f")], "non-empty str"),
            ([("a", 4, 4, (4,), "")], "dtype"),
            ([("a", 4, 4)], "tuples"),
        ]
        for items, text in cases:
            with self.subTest(items=items):
                with self.assertRaisesRegex(ValueError, text):
                    tf.plan(items)


class LayoutTagTest(unittest.TestCase):
    def test_equal_for_the_same_architecture(self):
        a, b = mlp(), mlp()
        b.params[0][1]._data_ptr = 0xABC000  # values and addresses do not count
        self.assertEqual(len(tf.layout_tag(a)), 16)
        self.assertIsInstance(tf.layout_tag(a), bytes)
        self.assertEqual(tf.layout_tag(a), tf.layout_tag(b))
        self.assertEqual(tf.layout_tag(a, include_buffers=True), tf.layout_tag(b, include_buffers=True))

    def test_differs_for_a_changed_shape_dtype_order_or_name(self):
        base = tf.layout_tag(mlp())
        renamed = mlp()
        renamed.params[3] = ("3.bias", renamed.params[3][1])
        variants = {
            "shape": mlp(hidden=65),
            "dtype": mlp(dtype="torch.bfloat16", element_size=2),
            "same size, other dtype": mlp(dtype="torch.int32", element_size=4),
            "order": mlp(swap=True),
            "name": renamed,
        }
        tags = {k: tf.layout_tag(m) for k, m in variants.items()}
        for what, tag in tags.items():
            self.assertNotEqual(tag, base, what)
        self.assertEqual(len(set(tags.values())), len(tags))

    def test_buffers_count_only_when_included(self):
        with_bn, without_bn = mlp(bn=True), mlp(bn=False)
        self.assertEqual(tf.layout_tag(with_bn), tf.layout_tag(without_bn))
        self.assertNotEqual(tf.layout_tag(with_bn, include_buffers=True), tf.layout_tag(with_bn))
        self.assertNotEqual(tf.layout_tag(with_bn, include_buffers=True),
                            tf.layout_tag(without_bn, include_buffers=True))
        names = [d[0] for d in tf.describe(with_bn, include_buffers=True)]
        self.assertEqual(names[-1], "buffer:1.num_batches_tracked")
        self.assertEqual(names[0], "param:0.weight")

    def test_tag_is_the_plans(self):
        m = mlp()
        slots, total = tf.plan(tf.describe(m))
        self.assertEqual(tf.layout_tag(m), tf.plan_tag(slots, total))
        # An offset is part of the tag, not just names, shapes and dtypes.
        moved = [slots[0]._replace(offset=slots[0].offset + 256)] + slots[1:]
        self.assertNotEqual(tf.plan_tag(moved, total), tf.plan_tag(slots, total))

    def test_encoding_is_pinned(self):
        # Trainer and follower may run different copies of this module: a change
        # of the tag's encoding must bump _TAG_FORMAT (and then this value).
        slots, total = tf.plan([("param:w", 6, 4, (2, 3), "torch.float32"),
                                ("param:b", 2, 4, (2,), "torch.float32")])
        self.assertEqual(tf.plan_tag(slots, total).hex(), PINNED_TAG)


PINNED_TAG = "acfcfdfc77d95dc51e259e86204e1cb8"


class CodesTest(unittest.TestCase):
    def test_codes_match_include_tandem_h(self):
        header = os.path.join(ROOT, "include", "tandem.h")
        if not os.path.exists(header):
            self.skipTest("include/tandem.h not found beside python/")
        defines = {}
        with open(header) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[0] == "#define" and parts[1].startswith("TANDEM_FOLLOW_"):
                    defines[parts[1][len("TANDEM_FOLLOW_"):]] = int(parts[2].strip("()"))
        self.assertEqual(defines, {name: code for code, name in tf.CODE_NAMES.items()})
        for name, code in defines.items():
            self.assertEqual(getattr(tf, name), code)


# ---------------------------------------------------------------- ctypes layer


class ImportTest(unittest.TestCase):
    def test_imports_and_plans_without_torch(self):
        with tempfile.TemporaryDirectory() as tmp:
            code = (
                "import tandem_follow as tf\n"
                "s, t = tf.plan([('a', 2, 4, (2,), 'f')])\n"
                "assert t == 2 << 20 and len(tf.plan_tag(s, t)) == 16\n"
                "try:\n"
                "    tf.library()\n"
                "except tf.FollowError as e:\n"
                "    print('no library:', e)\n"
            )
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([poisoned_path(tmp), HERE]))
            env.pop("LD_PRELOAD", None)
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("LD_PRELOAD=.../libtandem.so with TANDEM_FOLLOW=on", p.stdout)


class LibraryLookupTest(unittest.TestCase):
    def test_missing_libtandem_says_how_to_run(self):
        try:
            tf.library()
        except tf.FollowError as e:
            self.assertIn("libtandem.so is not loaded", str(e))
            self.assertIn("TANDEM_FOLLOW=on", str(e))
            self.assertIsNone(e.code)
        else:
            self.skipTest("libtandem.so is preloaded into this process")

    def test_unloadable_path_is_named(self):
        with self.assertRaisesRegex(tf.FollowError, "cannot load /nonexistent/libtandem.so"):
            tf.library("/nonexistent/libtandem.so")

    def test_library_without_the_symbols_is_named(self):
        cc = c_compiler()
        if cc is None:
            self.skipTest("no C compiler")
        with tempfile.TemporaryDirectory() as tmp:
            src, so = os.path.join(tmp, "other.c"), os.path.join(tmp, "libother.so")
            with open(src, "w") as f:
                f.write("int tandem_follow_alloc(void) { return 0; }\n")
            subprocess.run([cc, "-shared", "-fPIC", "-o", so, src], check=True,
                           capture_output=True, timeout=120)
            with self.assertRaises(tf.FollowError) as cm:
                tf.library(so)
            self.assertIn("tandem_follow_map", str(cm.exception))
            self.assertNotIn("tandem_follow_alloc,", str(cm.exception))
            self.assertIn(so, str(cm.exception))


class FakeLibraryTest(unittest.TestCase):
    """The ctypes layer against the fake libtandem.so."""

    @classmethod
    def setUpClass(cls):
        cc = c_compiler()
        if cc is None:
            raise unittest.SkipTest("no C compiler (cc, gcc or clang) to build the fake libtandem.so")
        cls.tmp = tempfile.mkdtemp(prefix="tandem-follow-test-")
        src = os.path.join(cls.tmp, "fake_tandem.c")
        cls.path = os.path.join(cls.tmp, "libfaketandem.so")
        with open(src, "w") as f:
            f.write(FAKE_LIBTANDEM)
        p = subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", cls.path, src],
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"building the fake libtandem.so failed:\n{p.stderr}")
        cls.lib = tf.library(cls.path)
        import ctypes

        cls.lib.fake_set_share.argtypes = [ctypes.c_int, ctypes.c_int]
        cls.lib.fake_last_bytes.restype = ctypes.c_uint64
        cls.lib.fake_last_timeout.restype = ctypes.c_uint
        cls.lib.fake_last_free.restype = ctypes.c_ulonglong

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.lib.fake_reset()
        self.tag = bytes(range(16))

    def test_library_is_cached_per_path(self):
        self.assertIs(tf.library(self.path), self.lib)

    def test_share_map_free_round_trip(self):
        ptr, code = tf.share_raw("model/v1", 4 * MiB, self.tag, lib=self.lib)
        self.assertEqual(code, tf.OK)
        self.assertNotEqual(ptr, 0)
        self.assertEqual(tf.shared_bytes(lib=self.lib), 4 * MiB)
        mapped = tf.map_raw("model/v1", 4 * MiB, self.tag, 2500, lib=self.lib)
        self.assertNotEqual(mapped, 0)
        self.assertNotEqual(mapped, ptr)
        self.assertEqual(self.lib.fake_last_timeout(), 2500)
        self.assertEqual(tf.mapped_bytes(lib=self.lib), 4 * MiB)
        tf.free_raw(mapped, lib=self.lib)
        self.assertEqual(self.lib.fake_last_free(), mapped)
        self.assertEqual(tf.mapped_bytes(lib=self.lib), 0)
        tf.free_raw(ptr, lib=self.lib)
        self.assertEqual(tf.shared_bytes(lib=self.lib), 0)

    def test_sizes_and_addresses_keep_64_bits(self):
        big = (5 << 40) + 12345  # past 32 bits; the fake refuses it as too large
        ptr, code = tf.share_raw("huge", big, self.tag, lib=self.lib)
        self.assertEqual((ptr, code), (0, tf.INVALID))
        self.assertEqual(self.lib.fake_last_bytes(), big)
        addr = 0xDEADBEEF00001000
        with self.assertRaises(tf.FollowError) as cm:
            tf.free_raw(addr, lib=self.lib)
        self.assertEqual(cm.exception.code, tf.INVALID)
        self.assertEqual(self.lib.fake_last_free(), addr)
        self.assertIn(hex(addr), str(cm.exception))

    def test_allocated_but_not_shared(self):
        self.lib.fake_set_share(tf.NO_COORDINATOR, 1)
        ptr, code = tf.share_raw("model/v1", 2 * MiB, self.tag, lib=self.lib)
        self.assertEqual(code, tf.NO_COORDINATOR)
        self.assertNotEqual(ptr, 0, "memory was allocated although the code is not OK")
        self.assertEqual(tf.shared_bytes(lib=self.lib), 0)
        with self.assertRaises(tf.FollowError) as cm:
            tf.map_raw("model/v1", 2 * MiB, self.tag, 1, lib=self.lib)
        self.assertEqual(cm.exception.code, tf.NOT_FOUND)
        tf.free_raw(ptr, lib=self.lib)  # it must still be freed

    def test_nothing_allocated(self):
        self.lib.fake_set_share(tf.DISABLED, 0)
        self.assertEqual(tf.share_raw("model/v1", 2 * MiB, self.tag, lib=self.lib), (0, tf.DISABLED))

    def test_not_found_raises_with_code_and_text(self):
        with self.assertRaises(tf.FollowError) as cm:
            tf.map_raw("nobody/shares/this", 2 * MiB, self.tag, 10, lib=self.lib)
        e = cm.exception
        self.assertIsInstance(e, RuntimeError)
        self.assertEqual(e.code, tf.NOT_FOUND)
        self.assertEqual(e.code_name, "NOT_FOUND")
        self.assertEqual(e.text, "fake: no such region")  # the library's own text
        for part in ("fake: no such region", "NOT_FOUND", "-3", "'nobody/shares/this'", "trust group"):
            self.assertIn(part, str(e))

    def test_mismatch_on_size_or_layout(self):
        ptr, _ = tf.share_raw("m", 2 * MiB, self.tag, lib=self.lib)
        for nbytes, tag in ((4 * MiB, self.tag), (2 * MiB, bytes(16))):
            with self.assertRaises(tf.FollowError) as cm:
                tf.map_raw("m", nbytes, tag, 10, lib=self.lib)
            self.assertEqual(cm.exception.code, tf.MISMATCH)
            self.assertIn("same architecture", str(cm.exception))
        tf.free_raw(ptr, lib=self.lib)

    def test_invalid_name_is_the_librarys_call(self):
        for name in ("two words", "", "x" * 57, "caf\u00e9"):
            with self.subTest(name=name):
                before = self.lib.fake_calls()
                with self.assertRaises(tf.FollowError) as cm:
                    tf.map_raw(name, 2 * MiB, self.tag, 10, lib=self.lib)
                self.assertEqual(cm.exception.code, tf.INVALID)
                self.assertEqual(cm.exception.text, "fake: invalid argument")
                self.assertEqual(self.lib.fake_calls(), before + 1, "not passed to the library")
                ptr, code = tf.share_raw(name, 2 * MiB, self.tag, lib=self.lib)
                self.assertEqual(code, tf.INVALID)
                tf.free_raw(ptr, lib=self.lib)  # the memory is the caller's

    def test_name_taken_is_passed_through(self):
        ptr, _ = tf.share_raw("m", 2 * MiB, self.tag, lib=self.lib)
        twin, code = tf.share_raw("m", 2 * MiB, self.tag, lib=self.lib)
        self.assertEqual(code, tf.NAME_TAKEN)
        self.assertNotEqual(twin, 0, "allocated, not shared")
        tf.free_raw(twin, lib=self.lib)
        tf.free_raw(ptr, lib=self.lib)

    def test_a_region_is_offered_only_after_fill_returns(self):
        seen = []

        def fill(ptr):
            # While filling, no follower may find it.
            with self.assertRaises(tf.FollowError) as cm:
                tf.map_raw("filled", 2 * MiB, self.tag, 1, lib=self.lib)
            seen.append((ptr, cm.exception.code))

        ptr, code = tf.share_raw("filled", 2 * MiB, self.tag, fill, lib=self.lib)
        self.assertEqual((code, seen), (tf.OK, [(ptr, tf.NOT_FOUND)]))
        mapped = tf.map_raw("filled", 2 * MiB, self.tag, 1, lib=self.lib)
        tf.free_raw(mapped, lib=self.lib)
        tf.free_raw(ptr, lib=self.lib)

    def test_a_failed_fill_frees_the_region_and_offers_nothing(self):
        def fill(ptr):
            raise RuntimeError("copy failed")

        with self.assertRaisesRegex(RuntimeError, "copy failed"):
            tf.share_raw("broken", 2 * MiB, self.tag, fill, lib=self.lib)
        self.assertNotEqual(self.lib.fake_last_free(), 0)
        self.assertEqual(tf.shared_bytes(lib=self.lib), 0)

    def test_arguments_python_cannot_pass_are_refused_before_the_call(self):
        before = self.lib.fake_calls()
        with self.assertRaisesRegex(ValueError, "NUL"):
            tf.map_raw("a\0b", 2 * MiB, self.tag, 10, lib=self.lib)
        with self.assertRaisesRegex(ValueError, "16 bytes"):
            tf.share_raw("m", 2 * MiB, b"short", lib=self.lib)
        with self.assertRaisesRegex(ValueError, "out of range"):
            tf.share_raw("m", -1, self.tag, lib=self.lib)
        with self.assertRaisesRegex(ValueError, "out of range"):
            tf.map_raw("m", 2 * MiB, self.tag, 1 << 32, lib=self.lib)
        with self.assertRaises(TypeError):
            tf.share_raw(7, 2 * MiB, self.tag, lib=self.lib)
        self.assertEqual(self.lib.fake_calls(), before)

    def test_double_free_raises(self):
        ptr, _ = tf.share_raw("m", 2 * MiB, self.tag, lib=self.lib)
        tf.free_raw(ptr, lib=self.lib)
        with self.assertRaises(tf.FollowError) as cm:
            tf.free_raw(ptr, lib=self.lib)
        self.assertEqual(cm.exception.code, tf.INVALID)

    def test_strerror_is_the_librarys(self):
        self.assertEqual(tf.strerror(tf.NAME_TAKEN, lib=self.lib), "fake: name taken")
        self.assertEqual(tf.strerror(-99, lib=self.lib), "fake: other")

    def test_region_memory_is_freed_with_its_last_holder(self):
        # What share()/follow() build, minus torch: the memory object is what
        # PyTorch's tensor keeps alive; the Region is one more holder.
        ptr, _ = tf.share_raw("m", 2 * MiB, self.tag, lib=self.lib)
        memory, finalizer = tf._own(self.lib, ptr, 2 * MiB, "m", "share")
        region = tf.Region("share", "m", 2 * MiB, ptr, tf.OK, memory=memory, finalizer=finalizer)
        self.assertTrue(region.shared)
        cai = memory.__cuda_array_interface__
        self.assertEqual((cai["version"], cai["shape"], cai["typestr"], cai["data"]),
                         (3, (2 * MiB,), "|u1", (ptr, False)))
        tensor_holds = memory  # stands for a tensor's storage
        del memory
        self.assertFalse(region.close(), "freed while a tensor still holds it")
        self.assertEqual(tf.shared_bytes(lib=self.lib), 2 * MiB)
        del tensor_holds
        self.assertTrue(region.freed)
        self.assertEqual(self.lib.fake_last_free(), ptr)
        self.assertEqual(tf.shared_bytes(lib=self.lib), 0)
        self.assertTrue(region.close())  # idempotent

    def test_region_close_frees_when_no_tensor_holds_it(self):
        ptr, _ = tf.share_raw("m", 2 * MiB, self.tag, lib=self.lib)
        memory, finalizer = tf._own(self.lib, ptr, 2 * MiB, "m", "share")
        region = tf.Region("share", "m", 2 * MiB, ptr, tf.OK, memory=memory, finalizer=finalizer)
        del memory
        self.assertFalse(region.freed)
        self.assertTrue(region.close())
        self.assertEqual(tf.shared_bytes(lib=self.lib), 0)

    def test_a_failed_free_at_collection_warns(self):
        memory, _ = tf._own(self.lib, 0x1000, 2 * MiB, "ghost", "follow")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del memory
        self.assertEqual(len(caught), 1)
        self.assertIs(caught[0].category, tf.FollowWarning)
        self.assertIn("'ghost'", str(caught[0].message))
        self.assertIn("fake: invalid argument", str(caught[0].message))


class RegionTest(unittest.TestCase):
    def test_detached_lists_tensors_outside_the_region(self):
        m = mlp()
        slots, total = tf.plan(tf.describe(m))
        base = 0x7F0000000000
        for (_, t), s in zip(m.params, slots):
            t._data_ptr = base + s.offset
        region = tf.Region("follow", "m", total, base, tf.OK, slots=slots)
        self.assertEqual(region.detached(m), [])
        m.params[2][1]._data_ptr = 0x1000  # e.g. after module.to(...)
        self.assertEqual(region.detached(m), ["param:2.weight"])
        self.assertIn("buffer:1.running_mean", region.detached(m, include_buffers=True))

    def test_not_allocated_region(self):
        r = tf.Region("share", "m", 2 * MiB, 0, None, reason="libtandem.so is not loaded")
        self.assertFalse(r.shared)
        self.assertTrue(r.freed)
        self.assertIn("share 'm'", repr(r))
        self.assertEqual(r.detached(mlp()), ["param:0.weight", "param:0.bias", "param:2.weight",
                                            "param:2.bias"])

    def test_copies_share_the_handle_and_pickling_is_refused(self):
        import copy
        import pickle

        r = tf.Region("follow", "m", 2 * MiB, 0x1000, tf.OK)
        self.assertIs(copy.deepcopy({"r": r})["r"], r)
        self.assertIs(copy.copy(r), r)
        with self.assertRaisesRegex(TypeError, "state_dict"):
            pickle.dumps(r)

    def test_timeout_conversion(self):
        self.assertEqual(tf._timeout_ms(30), 30000)
        self.assertEqual(tf._timeout_ms(0.0004), 1)
        self.assertEqual(tf._timeout_ms(0), 1)  # not the C API's 0 = default
        self.assertEqual(tf._timeout_ms(10 ** 9), (1 << 32) - 1)
        with self.assertRaises(ValueError):
            tf._timeout_ms(-1)


# ---------------------------------------------------------------- with torch


@unittest.skipIf(torch is None, "torch is not installed")
class TorchTest(unittest.TestCase):
    def build(self, hidden=32, seed=0):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(16, hidden), torch.nn.BatchNorm1d(hidden),
                                   torch.nn.ReLU(), torch.nn.Linear(hidden, 4))

    def test_layout_tag_of_real_modules(self):
        a, b = self.build(seed=1), self.build(seed=2)
        self.assertFalse(torch.equal(a[0].weight, b[0].weight))
        self.assertEqual(tf.layout_tag(a), tf.layout_tag(b))
        self.assertNotEqual(tf.layout_tag(a), tf.layout_tag(self.build(hidden=33)))
        self.assertNotEqual(tf.layout_tag(a), tf.layout_tag(self.build().double()))
        self.assertNotEqual(tf.layout_tag(a), tf.layout_tag(a, include_buffers=True))
        d = tf.describe(a, include_buffers=True)
        self.assertEqual(d[0], ("param:0.weight", 32 * 16, 4, (32, 16), "torch.float32"))
        self.assertEqual(d[-1], ("buffer:1.num_batches_tracked", 1, 8, (), "torch.int64"))

    def test_share_and_follow_refuse_a_cpu_module(self):
        m = self.build()
        for call in (tf.share, tf.follow):
            with self.assertRaisesRegex(ValueError, "one CUDA device"):
                call(m, "m")

    @unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no CUDA device")
    def test_without_libtandem_the_module_is_untouched(self):
        try:
            tf.library()
            self.skipTest("libtandem.so is preloaded into this process")
        except tf.FollowError:
            pass
        m = self.build().cuda()
        before = [p.data_ptr() for p in m.parameters()]
        with self.assertRaisesRegex(tf.FollowError, "libtandem.so is not loaded"):
            tf.share(m, "m")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = tf.share(m, "m", strict=False)
        self.assertEqual((r.ptr, r.shared), (0, False))
        self.assertEqual([w.category for w in caught], [tf.FollowWarning])
        with self.assertRaisesRegex(tf.FollowError, "libtandem.so is not loaded"):
            tf.follow(m, "m")
        self.assertEqual([p.data_ptr() for p in m.parameters()], before)
        self.assertFalse(hasattr(m, "_tandem_follow"))


# ---------------------------------------------------------------- scripts/gpu/follow.py


class GpuScriptTest(unittest.TestCase):
    """The GPU acceptance check's parts that run anywhere: its help without
    torch, and the judgements it makes from what the jobs report."""

    SCRIPT = os.path.join(ROOT, "scripts", "gpu", "follow.py")

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(cls.SCRIPT):
            raise unittest.SkipTest("scripts/gpu/follow.py not found")
        import importlib.util

        spec = importlib.util.spec_from_file_location("follow_check", cls.SCRIPT)
        cls.fc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.fc)

    def test_help_needs_no_torch(self):
        with tempfile.TemporaryDirectory() as tmp:
            poisoned_path(tmp)
            os.makedirs(os.path.join(tmp, "pynvml"))
            with open(os.path.join(tmp, "pynvml", "__init__.py"), "w") as f:
                f.write("raise ImportError('imported pynvml')\n")
            env = dict(os.environ, PYTHONPATH=tmp, PYTHONDONTWRITEBYTECODE="1")
            p = subprocess.run([sys.executable, self.SCRIPT, "--help"], env=env,
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--bin", p.stdout)
        self.assertIn("--out", p.stdout)

    def test_missing_binaries_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([sys.executable, self.SCRIPT, "--bin", tmp, "--out", tmp],
                               capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("libtandem.so missing", p.stderr)

    def test_memory_judgement(self):
        # Trainer up at 2000 MiB; the control adds its context (500) and its
        # own 300 MiB of weights; a follower that maps adds only a context.
        ok = self.fc.judge_memory(2000, 2800, 3310, control_reserved=300, region=304)
        self.assertTrue(ok["ok"], ok)
        self.assertEqual((ok["job_besides_weights_mib"], ok["follower_beyond_mib"]), (500, 10))
        # A follower that still holds its own copy of the weights fails.
        held = self.fc.judge_memory(2000, 2800, 3600, control_reserved=300, region=304)
        self.assertFalse(held["ok"], held)
        self.assertEqual(held["limit_mib"], 152)

    def test_writer_stderr_naming_the_cause(self):
        self.assertTrue(self.fc.names_cause(["x", "tandem[7]: TANDEM_FOLLOW: kernel wrote into it"]))
        self.assertTrue(self.fc.names_cause(["the region is mapped Read-Only"]))
        self.assertFalse(self.fc.names_cause(["RuntimeError: CUDA error: an illegal memory access"]))


if __name__ == "__main__":
    unittest.main()
