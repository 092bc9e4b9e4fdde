#!/usr/bin/env python3
"""smmask: can this driver keep a launch off some SMs? (issue 23, prove's smmask stage)

Scheduler v3's candidates leave inference SMs of its own while it is active
by confining training's launches to the others. Before the shim relies on a
mechanism, the real driver must show two things: that the mechanism is there
(a capability probe), and that a kernel launched under it runs only where it
was told (a `%smid` probe kernel, PTX loaded with cuModuleLoadData, so no
compiler is needed). Each part runs as its own process, so a crash in one
(the launch callback writes into the driver's launch descriptor) loses only
its own result:

    smmask.py --part probe    --out DIR   # versions, SMs, what is there
    smmask.py --part plain    --out DIR   # the probe kernel unconfined: the SMs it reaches
    smmask.py --part green    --out DIR   # in a green context of half the SMs (documented API)
    smmask.py --part callback --out DIR   # under a TPC mask set in the launch callback
    smmask.py --part cupti_after  --out DIR  # the callback subscribed after torch.profiler ran
    smmask.py --part cupti_before --out DIR  # ... and before it: does the profiler still see kernels?

Each writes DIR/smmask-<part>.json. The mechanisms:

* **Green contexts** (CUDA 12.4+, documented): cuDeviceGetDevResource,
  cuDevSmResourceSplitByCount, cuDevResourceGenerateDesc, cuGreenCtxCreate,
  cuGreenCtxStreamCreate (CUDA driver API, "Green Contexts").
* **The launch callback** (undocumented; the mechanism of libsmctrl, Bakita
  and Anderson, RTAS 2023, and of LithOS): the driver's export table of
  callback functions (its UUID as libsmctrl gives it) has a subscribe entry
  (index 3) and an enable entry (index 6); the callback of domain 0xb, id 0x1
  is called before each launch's descriptor (QMD/TMD) is uploaded, with a
  pointer to it as the fifth 8-byte word of its parameters. The descriptor's
  version byte is at offset 72; from version 0x40 (Hopper) the disable mask
  of TPCs 0-63 is at offsets 304 and 308 and of TPCs 64-127 at 312 and 316,
  with an enable bit (bit 31 of the first word); from 0x16 it is at 84 and
  88. A set bit disables a TPC. Anything else (no table, a short parameter
  block, a NULL descriptor, an unknown version) is recorded and the launch
  is left alone: the fail-open the shim must keep.

The probe kernel records each block's `%smid`; blocks spin about 50 us so
that they spread over the SMs at once. The callback part is judged by how
many SMs the masked run leaves, not which ([`judge_mask`]): libsmctrl's
README says Hopper's descriptors number the mask's TPCs before
floorsweeping (so bit k need not be SMs 2k and 2k + 1, and some bits may
name TPCs the GPU does not have), and `%smid` is not physical under MPS.
The record keeps the raw SM ids and says which numbering showed.

With --dry-run (the fake driver, no PTX): the probe runs, the kernel parts
report "skipped".
"""

import argparse
import ctypes
import json
import os
import sys
import threading
import time

CALLBACK_TABLE_UUID = bytes([0x2C, 0x8E, 0x0A, 0xD8, 0x07, 0x10, 0xAB, 0x4E,
                             0x90, 0xDD, 0x54, 0x71, 0x9F, 0xE5, 0xF7, 0x4B])
QMD_DOMAIN, QMD_PRE_UPLOAD = 0xB, 0x1
GREEN_SYMBOLS = ("cuDeviceGetDevResource", "cuDevSmResourceSplitByCount",
                 "cuDevResourceGenerateDesc", "cuGreenCtxCreate", "cuGreenCtxStreamCreate",
                 "cuCtxFromGreenCtx", "cuGreenCtxDestroy")
ATTR_SMS, ATTR_CC_MAJOR, ATTR_CC_MINOR = 16, 75, 76
CU_DEV_RESOURCE_TYPE_SM = 1
# CUdevResource is 144 bytes in CUDA 12.4 (type, 92 bytes of padding, a
# 48-byte union whose first field is smCount); later versions may append
# fields, so one resource gets a larger buffer and only one is ever split off.
RESOURCE_BYTES, SM_COUNT_OFFSET = 512, 96
SPIN_CYCLES = 100_000
THREADS = 128

PTX = rb"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry smid_probe(.param .u64 out, .param .u64 spin)
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [spin];
  cvta.to.global.u64 %rd1, %rd1;
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %smid;
  mov.u32 %r3, %tid.x;
  setp.ne.u32 %p1, %r3, 0;
  @%p1 bra WAIT;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd3, %rd1, %rd3;
  st.global.u32 [%rd3], %r2;
WAIT:
  mov.u64 %rd4, %clock64;
LOOP:
  mov.u64 %rd5, %clock64;
  sub.s64 %rd6, %rd5, %rd4;
  setp.lt.s64 %p2, %rd6, %rd2;
  @%p2 bra LOOP;
  ret;
}
"""


class CudaError(Exception):
    pass


class Driver:
    """The few driver calls the probe makes, by ctypes, each checked."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)

    def has(self, name):
        return hasattr(self.lib, name)

    def call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise CudaError(f"{name} returned {rc}")

    def init(self):
        self.call("cuInit", 0)
        ver = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(ver))
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        name = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", name, 256, dev)
        attrs = {}
        for key, attr in (("sms", ATTR_SMS), ("cc_major", ATTR_CC_MAJOR),
                          ("cc_minor", ATTR_CC_MINOR)):
            v = ctypes.c_int()
            self.call("cuDeviceGetAttribute", ctypes.byref(v), attr, dev)
            attrs[key] = v.value
        self.dev = dev
        return {"driver_version": ver.value, "device": name.value.decode(errors="replace"),
                **attrs}

    def primary_context(self):
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.dev)
        self.call("cuCtxSetCurrent", ctx)
        return ctx

    def export_table(self):
        """The callback table's address, or (None, why)."""
        if not self.has("cuGetExportTable"):
            return None, "cuGetExportTable is not exported"
        tbl = ctypes.c_void_p()
        uuid = ctypes.create_string_buffer(CALLBACK_TABLE_UUID, 16)
        rc = self.lib.cuGetExportTable(ctypes.byref(tbl), uuid)
        if rc != 0:
            return None, f"cuGetExportTable returned {rc} for the callback table"
        if not tbl.value:
            return None, "cuGetExportTable gave a NULL callback table"
        return tbl.value, None

    def load_function(self, image, name):
        """(module, function): `image` (PTX, or the fake driver's module
        text) loaded with cuModuleLoadData, and its kernel `name` (bytes)."""
        module = ctypes.c_void_p()
        self.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image + b"\0"))
        func = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(func), module, name)
        return module, func

    def run_probe(self, blocks, stream=None):
        """Launches the probe kernel in the current context; the sorted SM
        ids its blocks ran on, one per block."""
        module, func = self.load_function(PTX, b"smid_probe")
        dptr = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(dptr), ctypes.c_size_t(blocks * 4))
        self.call("cuMemsetD32_v2", dptr, ctypes.c_uint(0xFFFFFFFF), ctypes.c_size_t(blocks))
        spin = ctypes.c_uint64(SPIN_CYCLES)
        params = (ctypes.c_void_p * 2)(ctypes.addressof(dptr), ctypes.addressof(spin))
        t0 = time.monotonic()
        self.call("cuLaunchKernel", func, blocks, 1, 1, THREADS, 1, 1, 0, stream, params, None)
        self.call("cuCtxSynchronize")
        wall_ms = (time.monotonic() - t0) * 1e3
        host = (ctypes.c_uint32 * blocks)()
        self.call("cuMemcpyDtoH_v2", host, dptr, ctypes.c_size_t(blocks * 4))
        self.call("cuMemFree_v2", dptr)
        self.call("cuModuleUnload", module)
        ids = list(host)
        return {"blocks": blocks, "unwritten": sum(1 for i in ids if i == 0xFFFFFFFF),
                "sms": sorted({i for i in ids if i != 0xFFFFFFFF}), "wall_ms": round(wall_ms, 2)}


def part_probe(drv, info, dry):
    tbl, why = drv.export_table()
    green = [s for s in GREEN_SYMBOLS if not drv.has(s)]
    return {"callback_table": tbl is not None, "callback_why": why,
            "green_contexts": not green, "green_missing": green, "problems": []}


def part_plain(drv, info, dry):
    if dry:
        return {"skipped": "dry run: the fake driver runs no PTX", "problems": []}
    drv.primary_context()
    got = drv.run_probe(4 * info["sms"])
    problems = [] if not got["unwritten"] else [f"{got['unwritten']} blocks wrote no SM id"]
    return {"run": got, "problems": problems}


def part_green(drv, info, dry):
    if dry:
        return {"skipped": "dry run: the fake driver runs no PTX", "problems": []}
    missing = [s for s in GREEN_SYMBOLS if not drv.has(s)]
    if missing:
        return {"supported": False, "why": "missing: " + ", ".join(missing), "problems": []}
    drv.primary_context()
    full = ctypes.create_string_buffer(RESOURCE_BYTES)
    drv.call("cuDeviceGetDevResource", drv.dev, full, CU_DEV_RESOURCE_TYPE_SM)
    total = ctypes.c_uint.from_buffer(full, SM_COUNT_OFFSET).value
    if total != info["sms"]:
        return {"supported": True, "device_sms": total, "problems": [
            f"the SM resource reads {total} SMs at offset {SM_COUNT_OFFSET}, the device has "
            f"{info['sms']}: CUdevResource's layout differs from CUDA 12.4's"]}
    want = max(8, (info["sms"] // 2) // 8 * 8)
    group = ctypes.create_string_buffer(RESOURCE_BYTES)
    rest = ctypes.create_string_buffer(RESOURCE_BYTES)
    n = ctypes.c_uint(1)
    drv.call("cuDevSmResourceSplitByCount", group, ctypes.byref(n), full, rest, 0, want)
    got_sms = ctypes.c_uint.from_buffer(group, SM_COUNT_OFFSET).value
    desc = ctypes.c_void_p()
    drv.call("cuDevResourceGenerateDesc", ctypes.byref(desc), group, 1)
    gctx = ctypes.c_void_p()
    drv.call("cuGreenCtxCreate", ctypes.byref(gctx), desc, drv.dev, 1)
    ctx = ctypes.c_void_p()
    drv.call("cuCtxFromGreenCtx", ctypes.byref(ctx), gctx)
    drv.call("cuCtxSetCurrent", ctx)
    stream = ctypes.c_void_p()
    drv.call("cuGreenCtxStreamCreate", ctypes.byref(stream), gctx, 1, 0)
    run = drv.run_probe(4 * info["sms"], stream)
    drv.call("cuGreenCtxDestroy", gctx)
    problems = []
    if run["unwritten"]:
        problems.append(f"{run['unwritten']} blocks wrote no SM id")
    if len(run["sms"]) > got_sms:
        problems.append(f"blocks ran on {len(run['sms'])} SMs, the green context has {got_sms}")
    return {"supported": True, "device_sms": total, "asked": want, "partition_sms": got_sms,
            "run": run, "confined": len(run["sms"]) <= got_sms, "problems": problems}


class MaskHook:
    """The launch callback: while armed, disables TPCs [0, off_tpcs) in each
    launch's descriptor; records what it saw."""

    CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)

    def __init__(self, off_tpcs):
        self.off_tpcs, self.armed, self.seen = off_tpcs, False, []
        self.launch_thread = threading.get_native_id()
        self.cb = self.CB(self._called)

    def _called(self, _ukwn, domain, cbid, params):
        rec = {"domain": domain, "cbid": cbid,
               # The shim masks only launches whose callback comes on their
               # own thread (shim/src/client/spatial.rs, NoCallback).
               "on_launch_thread": threading.get_native_id() == self.launch_thread}
        self.seen.append(rec)
        if not self.armed or not params:
            return
        size = ctypes.c_uint32.from_address(params).value
        rec["params_bytes"] = size
        if size < 5 * 8:
            rec["left_alone"] = "parameter block too short for a descriptor pointer"
            return
        tmd = ctypes.c_void_p.from_address(params + 4 * 8).value
        if not tmd:
            rec["left_alone"] = "NULL descriptor"
            return
        ver = ctypes.c_uint8.from_address(tmd + 72).value
        rec["descriptor_version"] = ver
        rec.update(launch_fields(tmd, ver))
        mask = (1 << self.off_tpcs) - 1
        if ver >= 0x40:
            words = (304, 308, 312, 316)
            rec["enable_bit_before"] = bool(ctypes.c_uint32.from_address(tmd).value >> 31)
        elif ver >= 0x16:
            words = (84, 88)
        else:
            rec["left_alone"] = f"descriptor version {ver:#x} has no TPC mask"
            return
        # What the driver put there itself (a stream mask, MPS's provisioning):
        # the shim keeps it and adds its own; this records whether there is any.
        rec["words_before"] = [f"{ctypes.c_uint32.from_address(tmd + off).value:#x}"
                               for off in words]
        if ver >= 0x40:
            ctypes.c_uint32.from_address(tmd).value |= 0x80000000
        for i, off in enumerate(words):
            ctypes.c_uint32.from_address(tmd + off).value = (mask >> (32 * i)) & 0xFFFFFFFF
        rec["masked_tpcs"] = self.off_tpcs


def launch_fields(tmd, ver):
    """The grid, block and (V04) QMD type a descriptor carries where the
    shim reads them to know it is the armed launch's (NVIDIA open-gpu-doc,
    classes/compute/clcbc0qmd.h: V04_00 GRID_WIDTH/HEIGHT/DEPTH at bytes
    128/132/136, CTA_THREAD_DIMENSION0-2 at 144/146/148, QMD_TYPE bits 23-25
    of word 0; V03_00 CTA_RASTER_WIDTH/HEIGHT/DEPTH at 48/52/56 and the block
    at 74/76/78)."""
    u32 = lambda at: ctypes.c_uint32.from_address(tmd + at).value  # noqa: E731
    u16 = lambda at: ctypes.c_uint16.from_address(tmd + at).value  # noqa: E731
    if ver >= 0x40:
        return {"qmd_type": (u32(0) >> 23) & 7, "grid": [u32(128), u16(132), u16(136)],
                "block": [u16(144), u16(146), u16(148)]}
    if ver >= 0x16:
        return {"grid": [u32(48), u16(52), u16(56)], "block": [u16(74), u16(76), u16(78)]}
    return {}


def shim_would_match(seen, grid, block):
    """Whether the shim's checks (shim/src/client/spatial.rs) would take the
    armed launches' descriptors as theirs: a callback on the launching
    thread, whose descriptor carries the launch's grid and block (and, V04,
    the plain-grid QMD type 2). None when no armed callback carried a
    descriptor."""
    armed = [r for r in seen if "descriptor_version" in r]
    if not armed:
        return None
    return any(r["on_launch_thread"] and r.get("grid") == grid and r.get("block") == block
               and r.get("qmd_type", 2) == 2 for r in armed)


def part_callback(drv, info, dry):
    tbl, why = drv.export_table()
    if tbl is None:
        return {"supported": False, "why": why, "problems": []}
    if dry:
        return {"supported": True, "skipped": "dry run: the fake driver runs no PTX",
                "problems": []}
    off_tpcs = max(1, info["sms"] // 4 // 2)
    hook = MaskHook(off_tpcs)
    # The table's first word: dark-API dumpers read it as the table's size
    # (the shim reads entries 3 and 6 of it).
    table_word0 = ctypes.c_uint64.from_address(tbl).value
    why = subscribe(tbl, hook)
    if why:
        return {"supported": False, "why": why, "problems": []}
    drv.primary_context()
    blocks = 4 * info["sms"]
    before = drv.run_probe(blocks)
    hook.armed = True
    masked = drv.run_probe(blocks)
    hook.armed = False
    # The descriptor is the driver's own buffer: a launch after the masked
    # one must reach every SM again.
    after = drv.run_probe(blocks)
    applied = [r for r in hook.seen if "masked_tpcs" in r]
    verdict = judge_mask(info["sms"], off_tpcs, before["sms"], masked["sms"], bool(applied))
    if not applied:
        verdict["problems"].insert(0, "the callback never masked a launch: "
                                   + json.dumps(hook.seen[-3:]))
    if len(after["sms"]) < len(before["sms"]):
        verdict["problems"].append(f"the launch after the masked one reached {len(after['sms'])} "
                                   f"SMs, the one before {len(before['sms'])}: the mask stayed")
    return {"supported": True, "disabled_tpcs": off_tpcs, "unmasked": before, "masked": masked,
            "after": after, "table_word0": table_word0,
            "shim_would_match": shim_would_match(hook.seen, [blocks, 1, 1], [THREADS, 1, 1]),
            "callbacks": hook.seen[-8:], **verdict}


def judge_mask(sms, off_tpcs, unmasked, masked, applied):
    """Whether the masked probe run was confined, judged by how many SMs it
    left, not by which: libsmctrl's README says the mask bits of Hopper's
    descriptors (version 0x40 on) count TPCs before floorsweeping, so bit k
    need not be SMs 2k and 2k + 1 of `%smid` (nor are `%smid`s physical
    under MPS). Confined: the mask was written, and the masked run left
    between 1 and `off_tpcs` TPCs' worth of the SMs the unmasked run
    reached (fewer than `off_tpcs` when some of the bits fall on TPCs this
    GPU does not have). `numbering` says whether the SMs left were SMs
    0 to 2 x off_tpcs - 1."""
    reached, kept = set(unmasked), set(masked)
    left = sorted(reached - kept)
    problems = []
    if len(reached) < sms:
        problems.append(f"the unmasked run reached {len(reached)} of {sms} SMs: "
                        "the SMs a mask leaves cannot all be told")
    if applied and not left:
        problems.append("the mask was written, and the masked blocks still reached every SM")
    elif applied and len(left) > 2 * off_tpcs:
        problems.append(f"{off_tpcs} TPCs masked, and the masked blocks left {len(left)} SMs")
    confined = applied and 0 < len(left) <= 2 * off_tpcs and not problems
    if not left:
        numbering = None
    elif left == list(range(2 * off_tpcs)):
        numbering = "tpc k is SMs 2k and 2k+1"
    else:
        numbering = "other"
    return {"sms_left": left, "sms_left_count": len(left),
            "bits_on_absent_tpcs": off_tpcs - len(left) // 2 if confined else None,
            "numbering": numbering,
            "blocks_outside_unmasked_sms": sorted(kept - reached),
            "confined": confined, "problems": problems}


def subscribe(tbl, hook):
    """Subscribes `hook` to the descriptor callback through the callback
    table `tbl` (entry 3 subscribes, entry 6 enables): None, or why not."""
    entries = ctypes.cast(tbl, ctypes.POINTER(ctypes.c_void_p))
    sub = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint32), MaskHook.CB,
                           ctypes.c_void_p)(entries[3])
    enable = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int,
                              ctypes.c_int)(entries[6])
    handle = ctypes.c_uint32()
    rc = sub(ctypes.byref(handle), hook.cb, None)
    if rc:
        return f"subscribe returned {rc}"
    rc = enable(1, handle.value, QMD_DOMAIN, QMD_PRE_UPLOAD)
    if rc:
        return f"enable returned {rc}"
    return None


def subscribe_hook(drv):
    """Subscribes a disarmed MaskHook as the shim's probe does: (hook, None)
    or (None, why)."""
    tbl, why = drv.export_table()
    if tbl is None:
        return None, why
    hook = MaskHook(1)
    why = subscribe(tbl, hook)
    return (None, why) if why else (hook, None)


def profiled_kernels():
    """CUDA kernels torch.profiler (Kineto, on CUPTI) records around a few
    matmuls; None without torch or a GPU; the error's text where profiling
    raised."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    try:
        a = torch.randn(256, 256, device="cuda")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                a = a @ a
            torch.cuda.synchronize()
        cuda = torch.autograd.DeviceType.CUDA
        return sum(1 for e in prof.events() if getattr(e, "device_type", None) == cuda)
    except Exception as e:  # any failure of the profiler is the finding
        return f"{type(e).__name__}: {e}"


def part_cupti(drv, info, dry, order):
    """Whether a profiler on CUPTI (torch.profiler) and the shim's launch
    callback get along in one process: `order` "profiler_first" profiles,
    subscribes as the shim's probe does, profiles again; "callback_first"
    subscribes, then profiles. Losing the profiler's kernels is a problem
    (a training job's own profiling would break under tandem's SM
    reservation); a refused subscription is recorded (the shim would run
    unmasked, its fail-open)."""
    if dry:
        return {"skipped": "dry run: no profiler on the fake driver", "problems": []}
    out, problems = {"order": order}, []
    if order == "profiler_first":
        out["kernels_before"] = profiled_kernels()
        if out["kernels_before"] is None:
            return {"skipped": "no torch with CUDA here", "problems": []}
        if isinstance(out["kernels_before"], str):
            return {"skipped": "torch.profiler failed on its own: " + out["kernels_before"],
                    "problems": []}
    hook, why = subscribe_hook(drv)
    out["subscribed"] = hook is not None
    out["subscribe_why"] = why
    out["kernels"] = profiled_kernels()
    if out["kernels"] is None:
        return {"skipped": "no torch with CUDA here", "problems": []}
    if isinstance(out["kernels"], str):
        out["profiler_error"], out["kernels"] = out["kernels"], 0
        problems.append("torch.profiler failed beside the launch callback: "
                        + out["profiler_error"])
    elif not out["kernels"] and out.get("kernels_before", 1):
        problems.append("torch.profiler recorded no CUDA kernel beside the launch callback"
                        + (f" ({out['kernels_before']} before it)" if order == "profiler_first"
                           else ""))
    out["problems"] = problems
    return out


PARTS = {"probe": part_probe, "plain": part_plain, "green": part_green,
         "callback": part_callback,
         "cupti_after": lambda d, i, dry: part_cupti(d, i, dry, "profiler_first"),
         "cupti_before": lambda d, i, dry: part_cupti(d, i, dry, "callback_first")}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=sorted(PARTS), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lib", default="libcuda.so.1")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    out = os.path.join(a.out, f"smmask-{a.part}.json")
    doc = {"part": a.part, "dry_run": a.dry_run}
    try:
        drv = Driver(a.lib)
        doc["info"] = drv.init()
        doc.update(PARTS[a.part](drv, doc["info"], a.dry_run))
    except (OSError, CudaError) as e:
        doc["problems"] = [f"{type(e).__name__}: {e}"]
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(json.dumps(doc)[:2000])
    return 1 if doc.get("problems") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
