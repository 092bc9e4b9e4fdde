"""Follow mode for PyTorch jobs: an inference job maps a training job's live
weights read-only, so its outputs track training without a copy.

Both jobs run under ``LD_PRELOAD=.../libtandem.so`` with ``TANDEM_FOLLOW=on``,
and tandemd must run. Identity, not content, decides what follows what: the
jobs name the region.

Training job::

    import tandem_follow
    model = build_model().cuda()
    tandem_follow.share(model, "resnet50/v1")       # BEFORE the optimizer is created
    opt = torch.optim.AdamW(model.parameters())
    ...                                              # train as usual

Inference job (same architecture, built the same way; its own initial weights
do not matter)::

    model = build_model().cuda().eval()
    tandem_follow.follow(model, "resnet50/v1", timeout_s=30)
    torch.cuda.empty_cache()                          # hand its own copy back to the GPU

What follow mode means (state these to the people running the jobs):

- Reads are live, with no snapshot. A request may see a half-applied optimizer
  step: some layers already updated, others not, or even a tensor half
  written. Follow mode trades that for zero copies; if a request needs one
  consistent version, serve from a checkpoint instead.
- The follower cannot write. Its mapping is read-only: a kernel that writes
  into the weights (``p.data.add_(1)``, ``model.train()`` updating BatchNorm
  running stats, ``load_state_dict``) faults the follower's CUDA context (its
  process only), and a driver copy into them (``p.data.copy_(cpu_tensor)``)
  fails with an error.
- When the trainer exits or frees the region, followers keep the last weights
  (frozen) and run on with them. A trainer restarted later is not followed
  automatically: call ``follow`` again, in a new process.

What is shared: every parameter of the module, as ``named_parameters()``
lists it (a tied weight once), packed into one region by ``plan``. Buffers
(BatchNorm running statistics and the like) are NOT shared by default: the
trainer updates them in train mode, and they are not weights. Pass
``include_buffers=True`` to both ``share`` and ``follow`` to include them (a
follower of a model with BatchNorm needs them to reproduce the trainer's eval
outputs). The layout tag covers names, shapes, dtypes and order, so both
sides must pass the same ``include_buffers`` or the map fails with MISMATCH.

Rules for the module after ``share`` or ``follow``:

- Each parameter's ``.data`` becomes a contiguous view of the region (a
  channels-last parameter becomes contiguous). Do not convert the module
  afterwards (``.to(...)``, ``.half()``, ``.cuda()`` to another device,
  ``.to(memory_format=...)``): PyTorch replaces the parameters' memory and
  the module silently stops sharing or following. ``Region.detached(module)``
  lists the tensors that left the region. In-place updates (optimizers,
  ``load_state_dict`` in the trainer, BatchNorm statistics) stay in it.
- ``share`` must run BEFORE the optimizer, EMA copies, DDP or anything else
  that captures the parameters' tensors is created: it rebinds ``p.data``, so
  objects built earlier on the old tensors (optimizer state created eagerly,
  fused-optimizer flat buffers) would keep updating memory nobody shares.
  This cannot be checked from here.
- The region's memory lives as long as any tensor views it. ``share`` and
  ``follow`` return a ``Region`` and also keep it as ``module._tandem_follow``;
  the memory is freed (``tandem_follow_free``: the trainer stops offering it,
  a follower unmaps it) once the Region is closed or dropped AND no tensor
  views it any more, e.g. after ``del model``. ``Region.close()`` never frees
  memory that a tensor still uses. Nothing is freed explicitly at interpreter
  exit: the process's CUDA context goes, and libtandem.so withdraws the offer.

The ctypes layer (``library``, ``share_raw``, ``map_raw``, ``free_raw``) and
``plan``/``layout_tag`` need only the standard library; torch is imported
inside ``share`` and ``follow``. Zero-copy wrapping goes through
``__cuda_array_interface__``, for which PyTorch needs NumPy installed.
"""

import collections
import ctypes
import hashlib
import json
import math
import threading
import warnings
import weakref

__all__ = [
    "FollowError",
    "FollowWarning",
    "Region",
    "Slot",
    "library",
    "share_raw",
    "map_raw",
    "free_raw",
    "strerror",
    "shared_bytes",
    "mapped_bytes",
    "describe",
    "plan",
    "plan_tag",
    "layout_tag",
    "share",
    "follow",
]

# ---- constants -------------------------------------------------------------

#: Region sizes are whole granules (libtandem.so maps 2 MiB granules).
GRANULE = 2 << 20
#: Every tensor's slot starts at a multiple of this (cudaMalloc's alignment).
ALIGN = 256

# Return codes of the C API: include/tandem.h TANDEM_FOLLOW_* (generated from
# proto/src/follow.rs, module api, the one table).
OK = 0
DISABLED = -1
NO_COORDINATOR = -2
NOT_FOUND = -3
MISMATCH = -4
NOT_PERMITTED = -5
NAME_TAKEN = -6
LIMIT = -7
TIMEOUT = -8
DRIVER = -9
INVALID = -10

CODE_NAMES = {
    OK: "OK",
    DISABLED: "DISABLED",
    NO_COORDINATOR: "NO_COORDINATOR",
    NOT_FOUND: "NOT_FOUND",
    MISMATCH: "MISMATCH",
    NOT_PERMITTED: "NOT_PERMITTED",
    NAME_TAKEN: "NAME_TAKEN",
    LIMIT: "LIMIT",
    TIMEOUT: "TIMEOUT",
    DRIVER: "DRIVER",
    INVALID: "INVALID",
}

# What to do about a code, where the C text alone does not say.
_HINTS = {
    DISABLED: "set TANDEM_FOLLOW=on in this job's environment",
    NO_COORDINATOR: "start tandemd, and point TANDEM_SOCKET at it if it is not at the default path",
    NOT_FOUND: "is the training job running and has it called share() with this name, "
    "as the same user (trust group) and on the same GPU?",
    MISMATCH: "both jobs must build the same architecture (names, shapes, dtypes, order) "
    "and pass the same include_buffers",
    NOT_PERMITTED: "see tandemd's configuration",
    NAME_TAKEN: "another live job shares this name: pick another, or stop that job",
    TIMEOUT: "tandemd did not answer: is it overloaded or stopped?",
}

LIBRARY_HINT = (
    "libtandem.so is not loaded: run under LD_PRELOAD=.../libtandem.so with TANDEM_FOLLOW=on"
)

# ---- errors ----------------------------------------------------------------


class FollowError(RuntimeError):
    """A follow-mode call failed.

    ``code`` is the C API's return code (``NOT_FOUND``, ...) or None when the
    failure is on the Python side (libtandem.so not loaded, PyTorch could not
    wrap the memory); ``text`` is ``tandem_follow_strerror(code)``, or None.
    """

    def __init__(self, message, code=None, text=None):
        super().__init__(message)
        self.code = code
        self.text = text

    @property
    def code_name(self):
        """``"NOT_FOUND"`` etc., or None."""
        if self.code is None:
            return None
        return CODE_NAMES.get(self.code, f"code {self.code}")


class FollowWarning(RuntimeWarning):
    """share() could not offer the region; the job runs on (fail-open)."""


# ---- the ctypes layer ------------------------------------------------------

_Layout = ctypes.c_uint8 * 16
_SYMBOLS = (
    ("tandem_follow_alloc", ctypes.c_int, [ctypes.c_uint64, ctypes.POINTER(ctypes.c_ulonglong)]),
    (
        "tandem_follow_offer",
        ctypes.c_int,
        [ctypes.c_ulonglong, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint8)],
    ),
    (
        "tandem_follow_map",
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint8), ctypes.c_uint,
         ctypes.POINTER(ctypes.c_ulonglong)],
    ),
    ("tandem_follow_free", ctypes.c_int, [ctypes.c_ulonglong]),
    ("tandem_follow_strerror", ctypes.c_char_p, [ctypes.c_int]),
    ("tandem_follow_shared_bytes", ctypes.c_uint64, []),
    ("tandem_follow_mapped_bytes", ctypes.c_uint64, []),
)
_libraries = {}
_libraries_lock = threading.Lock()


def library(path=None):
    """libtandem.so's follow API as a ``ctypes.CDLL`` with argtypes and
    restypes set.

    With no ``path``, the symbols are looked up in the process's global
    namespace (``ctypes.CDLL(None)``), where an LD_PRELOADed libtandem.so puts
    them. ``path`` loads that library instead (tests use a fake one). Raises
    FollowError when the library cannot be loaded or lacks a symbol.
    """
    with _libraries_lock:
        lib = _libraries.get(path)
        if lib is not None:
            return lib
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise FollowError(f"cannot load {path}: {e}") from None
        missing = [name for name, _, _ in _SYMBOLS if not hasattr(lib, name)]
        if missing:
            if path is None:
                raise FollowError(f"{LIBRARY_HINT} (no {missing[0]} in this process)")
            raise FollowError(
                f"{path} does not export {', '.join(missing)}: "
                "is it a libtandem.so with follow mode?"
            )
        for name, restype, argtypes in _SYMBOLS:
            f = getattr(lib, name)
            f.restype = restype
            f.argtypes = argtypes
        _libraries[path] = lib
        return lib


def strerror(code, lib=None):
    """``tandem_follow_strerror(code)`` as text."""
    lib = lib or library()
    raw = lib.tandem_follow_strerror(int(code))
    if raw is None:
        return f"unknown tandem_follow code {code}"
    return raw.decode("utf-8", "replace")


def shared_bytes(lib=None):
    """Device bytes of the regions this process allocated for sharing
    (offered or not) and holds now, each rounded up to the allocation
    granularity (2 MiB on current GPUs)."""
    return int((lib or library()).tandem_follow_shared_bytes())


def mapped_bytes(lib=None):
    """Device bytes of other jobs' regions this process maps read-only now,
    each rounded up to the allocation granularity."""
    return int((lib or library()).tandem_follow_mapped_bytes())


def _error(lib, call, name, code, nbytes=None):
    text = strerror(code, lib)
    what = f"{call}({name!r}" + ("" if nbytes is None else f", {nbytes} bytes") + ")"
    msg = f"{what}: {text} [{CODE_NAMES.get(code, 'unknown')} {code}]"
    hint = _HINTS.get(code)
    if hint:
        msg += f"; {hint}"
    return FollowError(msg, code=code, text=text)


def _name_arg(name):
    if isinstance(name, bytes):
        raw = name
    elif isinstance(name, str):
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"region name {name!r} is not encodable as UTF-8: {e}") from None
    else:
        raise TypeError(f"region name must be str, not {type(name).__name__}")
    if b"\0" in raw:
        raise ValueError(f"region name {name!r} contains a NUL byte")
    # Everything else (length, spaces, non-ASCII) is libtandem.so's to judge:
    # it answers INVALID, which is passed through.
    return raw


def _layout_arg(layout):
    layout = bytes(layout)
    if len(layout) != 16:
        raise ValueError(f"layout tag must be 16 bytes, got {len(layout)}")
    return _Layout.from_buffer_copy(layout)


def _size_arg(nbytes):
    nbytes = int(nbytes)
    if nbytes < 0 or nbytes >= 1 << 64:
        raise ValueError(f"region size {nbytes} is out of range")
    return nbytes


def alloc_raw(nbytes, *, lib=None):
    """``tandem_follow_alloc``: ``(ptr, code)``; ``ptr`` is non-zero exactly
    when device memory was allocated (in the current context; free it with
    ``free_raw``)."""
    lib = lib or library()
    size = _size_arg(nbytes)
    dptr = ctypes.c_ulonglong(0)
    code = lib.tandem_follow_alloc(size, ctypes.byref(dptr))
    return int(dptr.value), int(code)


def offer_raw(ptr, name, layout, *, lib=None):
    """``tandem_follow_offer``: offers the region at ``ptr`` (from
    ``alloc_raw``) as ``name``; returns the code (``OK``, or why it is not
    offered now: the memory stays the caller's either way). Waits at most 5 s
    for tandemd."""
    lib = lib or library()
    raw, tag = _name_arg(name), _layout_arg(layout)
    return int(lib.tandem_follow_offer(int(ptr), raw, tag))


def share_raw(name, nbytes, layout, fill=None, *, lib=None):
    """Allocates, calls ``fill(ptr)`` (if given) and only then offers, so no
    follower maps a half-filled region. Returns ``(ptr, code)``: ``ptr`` is
    non-zero exactly when memory was allocated (free it with ``free_raw``),
    whatever ``code`` says: ``OK``, or why it is not offered ("allocated, not
    shared")."""
    lib = lib or library()
    # Checked before anything is allocated.
    _name_arg(name), _layout_arg(layout)
    ptr, code = alloc_raw(_size_arg(nbytes), lib=lib)
    if ptr == 0:
        return 0, code
    if fill is not None:
        try:
            fill(ptr)
        except BaseException:
            free_raw(ptr, lib=lib)
            raise
    return ptr, offer_raw(ptr, name, layout, lib=lib)


def map_raw(name, nbytes, layout, timeout_ms, *, lib=None):
    """``tandem_follow_map``: the device pointer of region ``name`` mapped
    read-only into the current context. ``nbytes`` and ``layout`` must equal
    the sharer's. Waits up to ``timeout_ms`` for the region to appear (0:
    libtandem.so's default, 5000). Raises FollowError on any other outcome.
    """
    lib = lib or library()
    raw, tag, size = _name_arg(name), _layout_arg(layout), _size_arg(nbytes)
    timeout_ms = int(timeout_ms)
    if not 0 <= timeout_ms < 1 << 32:
        raise ValueError(f"timeout_ms {timeout_ms} is out of range")
    dptr = ctypes.c_ulonglong(0)
    code = lib.tandem_follow_map(raw, size, tag, timeout_ms, ctypes.byref(dptr))
    if code != OK:
        raise _error(lib, "tandem_follow_map", name, int(code), size)
    if not dptr.value:
        raise FollowError(
            f"tandem_follow_map({name!r}) returned OK but no address (a libtandem.so bug)",
            code=DRIVER,
        )
    return int(dptr.value)


def free_raw(ptr, *, lib=None):
    """``tandem_follow_free``: release a region from ``share_raw`` (no longer
    offered; followers keep what they mapped) or ``map_raw``. Raises
    FollowError if libtandem.so refuses (e.g. an unknown address)."""
    lib = lib or library()
    code = lib.tandem_follow_free(int(ptr))
    if code != OK:
        raise _error(lib, "tandem_follow_free", hex(int(ptr)), int(code))


# ---- plans and layout tags (no torch) --------------------------------------


Slot = collections.namedtuple("Slot", "name offset nbytes numel shape dtype")
Slot.__doc__ = """Where one tensor lives in a region: offset and nbytes in bytes, numel
elements of dtype (a string) in shape."""


def _round_up(n, to):
    return (n + to - 1) // to * to


def plan(named_params):
    """Packs tensors into one region.

    ``named_params``: ``(name, numel, element_size, shape, dtype)`` tuples in
    order (``dtype`` a string such as ``"torch.float32"``). Returns
    ``(slots, total_bytes)``: one ``Slot`` per tensor, in the given order, each
    at an offset aligned to ``ALIGN`` (256) bytes, and the total rounded up to
    whole ``GRANULE``s (2 MiB); 0 for no tensors. Pure Python.
    """
    slots, end, seen = [], 0, set()
    for item in named_params:
        try:
            name, numel, element_size, shape, dtype = item
        except (TypeError, ValueError):
            raise ValueError(
                f"plan() wants (name, numel, element_size, shape, dtype) tuples, got {item!r}"
            ) from None
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor name must be a non-empty str, got {name!r}")
        if name in seen:
            raise ValueError(f"tensor {name!r} appears twice")
        seen.add(name)
        shape = tuple(int(d) for d in shape)
        numel, element_size = int(numel), int(element_size)
        if any(d < 0 for d in shape) or numel != math.prod(shape):
            raise ValueError(f"{name}: numel {numel} does not match shape {shape}")
        if element_size <= 0:
            raise ValueError(f"{name}: element size must be positive, got {element_size}")
        if not isinstance(dtype, str) or not dtype:
            raise ValueError(f"{name}: dtype must be a non-empty str, got {dtype!r}")
        offset = _round_up(end, ALIGN)
        nbytes = numel * element_size
        slots.append(Slot(name, offset, nbytes, numel, shape, dtype))
        end = offset + nbytes
    return slots, _round_up(end, GRANULE)


# Bump when the tag's encoding changes: jobs on different versions then get
# MISMATCH rather than misreading each other's memory.
_TAG_FORMAT = b"tandem-follow-layout/1\n"


def plan_tag(slots, total_bytes):
    """The 16-byte layout tag of a plan: blake2b over the ordered (name,
    shape, dtype, offset) of every slot and the total size."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_TAG_FORMAT)
    body = [[s.name, list(s.shape), s.dtype, s.offset] for s in slots]
    h.update(json.dumps([body, int(total_bytes)], separators=(",", ":")).encode())
    return h.digest()


def _tensors(module, include_buffers):
    """``(key, tensor, is_param)`` for what a region holds, in order:
    parameters, then buffers if asked. Duck-typed: any object with
    ``named_parameters()`` (and ``named_buffers()``) of tensor-likes."""
    out = [("param:" + n, p, True) for n, p in module.named_parameters()]
    if include_buffers:
        out += [("buffer:" + n, b, False) for n, b in module.named_buffers()]
    return out


def describe(module, include_buffers=False):
    """The ``plan`` input for a module: ``(name, numel, element_size, shape,
    dtype)`` of every parameter (and buffer, if asked), in order. Reads only
    metadata, never values; needs no torch import."""
    return [
        (key, int(t.numel()), int(t.element_size()), tuple(int(d) for d in t.shape), str(t.dtype))
        for key, t, _ in _tensors(module, include_buffers)
    ]


def layout_tag(module, include_buffers=False):
    """16 bytes identifying ``module``'s parameter layout as ``plan`` packs it:
    equal for two processes that built the same architecture, different if any
    name, shape, dtype or the order differs."""
    return plan_tag(*plan(describe(module, include_buffers)))


# ---- regions ---------------------------------------------------------------


class _DeviceMemory:
    """Device memory seen as a 1-D uint8 CUDA array. PyTorch's tensor from it
    holds a reference to this object until the tensor's storage dies; the
    region is freed when this object is collected."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),  # PyTorch rejects read-only; writes are the driver's to stop
            "strides": None,
            "stream": None,  # nothing pending on it
        }


def _release(lib, ptr, name, role):
    """Frees a region once no tensor views it (a weakref.finalize callback)."""
    try:
        free_raw(ptr, lib=lib)
    except Exception as e:  # noqa: BLE001 - nobody to raise to at collection time
        warnings.warn(f"tandem_follow: freeing {role} region {name!r} failed: {e}", FollowWarning)


class Region:
    """A region made by ``share`` or ``follow``.

    ``ptr`` (0 if nothing was allocated), ``nbytes``, ``name``, ``code`` (the
    C API's code; None if libtandem.so was not loaded), ``role`` ("share" or
    "follow"), ``device``, ``slots`` (the plan) and ``reason`` (the text of a
    non-OK code). While open it keeps the memory alive; see ``close``.
    """

    def __init__(self, role, name, nbytes, ptr, code, reason=None, device=None, slots=(),
                 memory=None, finalizer=None):
        self.role = role
        self.name = name
        self.nbytes = nbytes
        self.ptr = ptr
        self.code = code
        self.reason = reason
        self.device = device
        self.slots = list(slots)
        self._memory = memory
        self._finalizer = finalizer

    @property
    def shared(self):
        """Whether followers can map it (a ``share`` region offered with OK)."""
        return self.role == "share" and self.ptr != 0 and self.code == OK

    @property
    def freed(self):
        """Whether the memory has been handed back (or never was allocated)."""
        return self._finalizer is None or not self._finalizer.alive

    def close(self):
        """Drops this handle's hold on the memory. If no tensor views it any
        more, it is freed now; otherwise as soon as the last one is gone (e.g.
        ``del model``). Memory a tensor still uses is never freed. Returns
        whether it is freed."""
        self._memory = None
        return self.freed

    def detached(self, module, include_buffers=None):
        """Names of the module's tensors that no longer live in this region
        (e.g. after ``module.to(...)``); empty while all do."""
        if include_buffers is None:
            include_buffers = any(s.name.startswith("buffer:") for s in self.slots)
        end = self.ptr + self.nbytes
        return [
            key for key, t, _ in _tensors(module, include_buffers)
            if not (self.ptr and self.ptr <= t.data_ptr() < end)
        ]

    def __repr__(self):
        state = "freed" if self.freed else "open"
        return (f"<tandem_follow.Region {self.role} {self.name!r} {self.nbytes} bytes at "
                f"{self.ptr:#x} code={CODE_NAMES.get(self.code, self.code)} {state}>")

    # A deepcopy of a module (an EMA copy, say) gets private parameters; its
    # copy of the handle is this one, which keeps nothing extra alive.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("a tandem_follow.Region cannot be pickled; save model.state_dict() instead")


def _cuda_device(torch, tensors, call):
    devices = {t.device for _, t, _ in tensors}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        found = ", ".join(sorted(str(d) for d in devices))
        raise ValueError(
            f"{call}() needs every tensor of the module on one CUDA device (found {found}); "
            "move the model with .cuda() first"
        )
    for key, t, _ in tensors:
        if t.layout != torch.strided:
            raise ValueError(f"{call}(): {key} is not a dense (strided) tensor")
    device = devices.pop()
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _own(lib, ptr, nbytes, name, role):
    """The object that owns region memory: freed (``tandem_follow_free``) when
    it is collected, i.e. once no tensor and no Region holds it."""
    memory = _DeviceMemory(ptr, nbytes)
    finalizer = weakref.finalize(memory, _release, lib, ptr, name, role)
    finalizer.atexit = False  # at exit the context goes anyway; tensors may still use it
    return memory, finalizer


def _as_tensor(torch, memory, ptr, nbytes, device, name):
    """A uint8 CUDA tensor over ``memory``, without a copy."""
    try:
        buf = torch.as_tensor(memory, device=device)
    except Exception as e:  # noqa: BLE001 - re-raised with the cause
        raise FollowError(
            f"PyTorch could not wrap region {name!r} as a tensor ({type(e).__name__}: {e}); "
            "wrapping device memory through __cuda_array_interface__ needs NumPy installed"
        ) from None
    if (buf.data_ptr(), buf.dtype, buf.numel(), buf.device) != (ptr, torch.uint8, nbytes, device):
        got = f"{buf.device} {buf.dtype} x{buf.numel()} at {buf.data_ptr():#x}"
        raise FollowError(f"PyTorch copied region {name!r} instead of wrapping it "
                          f"(got {got}, want {device} torch.uint8 x{nbytes} at {ptr:#x})")
    return buf


def _views(buf, slots, tensors):
    """One view of ``buf`` per tensor, with its dtype and shape, contiguous."""
    out = []
    for slot, (key, t, _) in zip(slots, tensors):
        v = buf[slot.offset:slot.offset + slot.nbytes].view(t.dtype).view(t.shape)
        if v.numel() != slot.numel:
            raise FollowError(f"{key}: its view has {v.numel()} elements, the plan {slot.numel}")
        out.append(v)
    return out


def _discard(torch, device, finalizer):
    """Frees a region after a failure before any tensor of the module was
    rebound to it: only this call's own views (dead now) ever used it."""
    try:
        torch.cuda.synchronize(device)  # a copy into it may still run
    except Exception:  # noqa: BLE001 - the failure being handled may be a CUDA error
        pass
    finalizer()


def _timeout_ms(timeout_s):
    if timeout_s < 0:
        raise ValueError(f"timeout_s must be >= 0, got {timeout_s}")
    # 0 means libtandem.so's default (5 s) to the C API: ask for 1 ms instead.
    return min(max(1, math.ceil(timeout_s * 1000)), (1 << 32) - 1)


def share(module, name, *, strict=True, include_buffers=False):
    """Training job: moves ``module``'s parameters into one region offered to
    followers as ``name``. Call it BEFORE creating the optimizer (see the
    module docs; this cannot be checked).

    Allocates with ``tandem_follow_alloc`` in the module's CUDA device,
    copies every parameter into its slot, offers the filled region with
    ``tandem_follow_offer`` and rebinds ``p.data`` to it. Outcomes:

    - offered (code OK): returns the Region; ``region.shared`` is True;
    - allocated but not offered (no tandemd, not permitted, name taken, ...):
      the module is still rebound and training runs on (fail-open); one
      FollowWarning gives the reason; ``region.shared`` is False;
    - nothing allocated (libtandem.so not loaded, follow mode off, ...): the
      module is untouched; raises FollowError when ``strict``, else warns and
      returns a Region with ``ptr == 0``.

    The Region is also kept as ``module._tandem_follow``: the memory lives
    while it or any parameter does (see ``Region.close``). Raises ValueError
    for a module with no parameters or not on one CUDA device.
    """
    tensors = _tensors(module, include_buffers)
    slots, total = plan(describe(module, include_buffers))
    if total == 0:
        raise ValueError(f"share({name!r}): the module has no parameters to share")
    tag = plan_tag(slots, total)
    import torch

    device = _cuda_device(torch, tensors, "share")

    def not_allocated(err):
        if strict:
            raise err
        warnings.warn(f"tandem_follow.share({name!r}): nothing shared, the job runs on: {err}",
                      FollowWarning, stacklevel=3)
        return Region("share", name, total, 0, err.code, reason=str(err), device=device,
                      slots=slots)

    try:
        lib = library()
    except FollowError as e:
        return not_allocated(e)
    with torch.cuda.device(device):
        # Makes the device's context current on this thread (libtandem.so
        # allocates in the current context) and lets pending updates land.
        torch.cuda.synchronize(device)
        _name_arg(name)  # a bad name fails here, before anything is allocated
        ptr, code = alloc_raw(total, lib=lib)
        if ptr == 0:
            if code == OK:
                return not_allocated(FollowError(
                    f"tandem_follow_alloc({name!r}) returned OK but no memory "
                    "(a libtandem.so bug)", code=DRIVER))
            return not_allocated(_error(lib, "tandem_follow_alloc", name, code, total))
        memory, finalizer = _own(lib, ptr, total, name, "share")
        try:
            buf = _as_tensor(torch, memory, ptr, total, device, name)
            views = _views(buf, slots, tensors)
            with torch.no_grad():
                for v, (_, t, _) in zip(views, tensors):
                    v.copy_(t)
            torch.cuda.current_stream(device).synchronize()
            # Offered only now that it is filled: no follower maps it half written.
            code = offer_raw(ptr, name, tag, lib=lib)
        except BaseException:
            _discard(torch, device, finalizer)
            raise
    for v, (_, t, _) in zip(views, tensors):
        t.data = v
    reason = None
    if code != OK:
        err = _error(lib, "tandem_follow_offer", name, code, total)
        reason = str(err)
        warnings.warn(f"tandem_follow.share({name!r}): allocated but not shared, training runs "
                      f"on and no job can follow it: {err}", FollowWarning, stacklevel=2)
    region = Region("share", name, total, ptr, code, reason=reason, device=device, slots=slots,
                    memory=memory, finalizer=finalizer)
    module._tandem_follow = region
    return region


def follow(module, name, *, timeout_s=30, include_buffers=False):
    """Inference job: rebinds every parameter of ``module`` to a read-only
    view of region ``name``, shared by a training job that built the same
    architecture. Waits up to ``timeout_s`` seconds for the region to appear.

    Parameters get ``requires_grad_(False)``. The module's own parameter
    memory goes back to PyTorch's caching allocator once nothing else
    references it; ``torch.cuda.empty_cache()`` hands it back to the GPU.
    Never write into the weights (see the module docs); keep the module in
    eval mode if it has BatchNorm and ``include_buffers`` is on.

    Returns the Region (also kept as ``module._tandem_follow``). Raises
    FollowError on failure (``.code`` says why: NOT_FOUND, MISMATCH, TIMEOUT,
    ...) and then leaves the module untouched.
    """
    tensors = _tensors(module, include_buffers)
    slots, total = plan(describe(module, include_buffers))
    if total == 0:
        raise ValueError(f"follow({name!r}): the module has no parameters to follow")
    tag = plan_tag(slots, total)
    import torch

    device = _cuda_device(torch, tensors, "follow")
    lib = library()
    with torch.cuda.device(device):
        torch.cuda.synchronize(device)  # the device's context current on this thread
        ptr = map_raw(name, total, tag, _timeout_ms(timeout_s), lib=lib)
        memory, finalizer = _own(lib, ptr, total, name, "follow")
        try:
            views = _views(_as_tensor(torch, memory, ptr, total, device, name), slots, tensors)
        except BaseException:
            _discard(torch, device, finalizer)
            raise
    for v, (_, t, is_param) in zip(views, tensors):
        t.data = v
        if is_param:
            t.requires_grad_(False)
            t.grad = None
    region = Region("follow", name, total, ptr, OK, device=device, slots=slots, memory=memory,
                    finalizer=finalizer)
    module._tandem_follow = region
    return region
