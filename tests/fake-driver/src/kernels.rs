//! Fake modules and kernels: the module image format, `cuModule*`/`cuFuncGetName`, argument
//! decoding (`kernelParams` or `extra`), the kernel ops, and the launch entry points.
//!
//! Image (NUL-terminated text):
//! ```text
//! tandem-fake-module v1
//! kernel <name> <duration_ns> <op>
//! ```
//! ops: `noop`; `add_u32` (params `CUdeviceptr ptr, unsigned n, unsigned value`: `ptr[i] += value`,
//! wrapping); `fill_u32` (same params: `ptr[i] = value`); `sum_u32` (params `CUdeviceptr out,
//! CUdeviceptr in, unsigned n`: `out[0] = in[0] + ... + in[n-1]`, wrapping; `in` is only read).
//! Blank lines and lines starting with `#` are ignored. A kernel's effects are applied at launch;
//! its duration is simulated on the stream.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_uint, c_void, CStr, CString};

use crate::introspect;
use crate::memory::{check_range, device_ptr, Access, RangeFault};
use crate::state::{lock, State};
use crate::streams::{base_ns, now_ns, StreamKey};
use crate::types::*;

pub const IMAGE_HEADER: &str = "tandem-fake-module v1";

/// Dynamic shared memory a function may use without opting in (48 KiB).
const MAX_DYNAMIC_SHARED: c_uint = 48 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Noop,
    AddU32,
    FillU32,
    SumU32,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        match s {
            "noop" => Some(Op::Noop),
            "add_u32" => Some(Op::AddU32),
            "fill_u32" => Some(Op::FillU32),
            "sum_u32" => Some(Op::SumU32),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDef {
    pub name: String,
    pub duration_ns: u64,
    pub op: Op,
}

/// Parses a module image. Pure; the error names the offending line.
pub fn parse_image(text: &str) -> Result<Vec<KernelDef>, String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.trim_end() == IMAGE_HEADER => {}
        _ => return Err(format!("first line is not `{IMAGE_HEADER}`")),
    }
    let mut kernels: Vec<KernelDef> = Vec::new();
    for (i, line) in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let [kw, name, duration, op] = tokens[..] else {
            return Err(format!(
                "line {}: expected `kernel <name> <duration_ns> <op>`",
                i + 1
            ));
        };
        if kw != "kernel" {
            return Err(format!("line {}: unknown directive `{kw}`", i + 1));
        }
        let duration_ns = duration
            .parse::<u64>()
            .map_err(|_| format!("line {}: bad duration `{duration}`", i + 1))?;
        let op = Op::parse(op).ok_or_else(|| format!("line {}: unknown op `{op}`", i + 1))?;
        if kernels.iter().any(|k| k.name == name) {
            return Err(format!("line {}: kernel `{name}` defined twice", i + 1));
        }
        kernels.push(KernelDef {
            name: name.to_owned(),
            duration_ns,
            op,
        });
    }
    Ok(kernels)
}

/// Argument values of a kernel, copied out of the caller's storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelArgs {
    /// `add_u32` / `fill_u32`: `(CUdeviceptr ptr, unsigned n, unsigned value)`.
    Elementwise {
        ptr: CUdeviceptr,
        n: u32,
        value: u32,
    },
    /// `sum_u32`: `(CUdeviceptr out, CUdeviceptr in, unsigned n)`.
    Sum {
        out: CUdeviceptr,
        input: CUdeviceptr,
        n: u32,
    },
}

/// A kernel ready to run: what it does, for how long, with which (copied) arguments.
#[derive(Clone, Copy, Debug)]
pub struct Work {
    pub op: Op,
    pub duration_ns: u64,
    pub args: Option<KernelArgs>,
}

struct Function {
    module: usize,
    name: CString,
    duration_ns: u64,
    op: Op,
}

pub struct Modules {
    /// module -> its functions (name, handle).
    modules: BTreeMap<usize, Vec<(String, usize)>>,
    functions: BTreeMap<usize, Function>,
}

impl Modules {
    pub const fn new() -> Self {
        Self {
            modules: BTreeMap::new(),
            functions: BTreeMap::new(),
        }
    }

    /// The op and duration of a live function.
    pub fn function(&self, f: Handle) -> CuResult<(Op, u64)> {
        self.functions
            .get(&key(f))
            .map(|f| (f.op, f.duration_ns))
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    }
}

/// # Safety
/// `out` must be NULL or valid for a write; `image` NULL or a NUL-terminated string.
pub unsafe fn module_load_data(out: *mut Handle, image: *const c_void) -> CuResult<()> {
    if out.is_null() || image.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL and NUL-terminated (the image format's contract).
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
    let text = text.to_str().map_err(|_| CUDA_ERROR_INVALID_IMAGE)?;
    let defs = parse_image(text).map_err(|_| CUDA_ERROR_INVALID_IMAGE)?;
    let mut st = lock();
    st.require_ctx()?;
    let m = st.new_handle();
    let mut funcs = Vec::with_capacity(defs.len());
    for d in defs {
        let name = CString::new(d.name.clone()).map_err(|_| CUDA_ERROR_INVALID_IMAGE)?;
        let f = st.new_handle();
        st.modules.functions.insert(
            f,
            Function {
                module: m,
                name,
                duration_ns: d.duration_ns,
                op: d.op,
            },
        );
        funcs.push((d.name, f));
    }
    st.modules.modules.insert(m, funcs);
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(m)) }
}

pub fn module_unload(module: Handle) -> CuResult<()> {
    let mut st = lock();
    st.contexts.require_current()?;
    let funcs = st
        .modules
        .modules
        .remove(&key(module))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    for (_, f) in funcs {
        st.modules.functions.remove(&f);
    }
    Ok(())
}

/// # Safety
/// `out` must be NULL or valid for a write; `name` NULL or NUL-terminated.
pub unsafe fn module_get_function(
    out: *mut Handle,
    module: Handle,
    name: *const c_char,
) -> CuResult<()> {
    if out.is_null() || name.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL and NUL-terminated (caller contract).
    let name = unsafe { CStr::from_ptr(name) };
    let st = lock();
    st.contexts.require_current()?;
    let funcs = st
        .modules
        .modules
        .get(&key(module))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    let f = funcs
        .iter()
        .find(|(n, _)| n.as_bytes() == name.to_bytes())
        .map(|&(_, f)| f)
        .ok_or(CUDA_ERROR_NOT_FOUND)?;
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, handle(f)) }
}

/// `cuFuncGetName`: the returned string lives as long as the function's module.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn func_get_name(out: *mut *const c_char, f: Handle) -> CuResult<()> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let st = lock();
    let func = st
        .modules
        .functions
        .get(&key(f))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    debug_assert!(st.modules.modules.contains_key(&func.module));
    // SAFETY: non-NULL, caller contract. The CString's heap buffer does not move while the
    // function exists.
    unsafe { write_out(out, func.name.as_ptr()) }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared: c_uint,
}

/// Validates launch dimensions against the fake device's limits (H100-like).
pub fn check_dims(d: &Dims) -> CuResult<()> {
    let [gx, gy, gz] = d.grid;
    let [bx, by, bz] = d.block;
    let grid_ok = (1..=i32::MAX as u32).contains(&gx)
        && (1..=65535).contains(&gy)
        && (1..=65535).contains(&gz);
    let block_ok = (1..=1024).contains(&bx)
        && (1..=1024).contains(&by)
        && (1..=64).contains(&bz)
        && u64::from(bx) * u64::from(by) * u64::from(bz) <= 1024;
    if grid_ok && block_ok && d.shared <= MAX_DYNAMIC_SHARED {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

const CU_LAUNCH_PARAM_END: usize = 0x0;
const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x1;
const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x2;
/// How many (key, value) pairs of `extra` the fake reads before giving up on a missing END.
const MAX_EXTRA_PAIRS: usize = 64;
/// Packed argument buffer of `(CUdeviceptr, unsigned, unsigned)` with natural alignment.
const PACKED_ELEMENTWISE_SIZE: usize = 16;
/// Packed argument buffer of `(CUdeviceptr, CUdeviceptr, unsigned)` with natural alignment
/// (20 bytes of values, padded to the struct's 8-byte alignment).
const PACKED_SUM_SIZE: usize = 24;

/// Copies the argument values of a kernel out of `kernelParams` or `extra`.
///
/// # Safety
/// `params`, if non-NULL, must hold one valid pointer per kernel argument; `extra`, if
/// non-NULL, must be a `CU_LAUNCH_PARAM_END`-terminated array as in cuda.h.
pub unsafe fn decode_args(
    op: Op,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<Option<KernelArgs>> {
    if !params.is_null() && !extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if op == Op::Noop {
        return Ok(None);
    }
    if !params.is_null() {
        // SAFETY: `params` holds one pointer per argument (3 for these ops; caller contract);
        // each pointed-to value is read only after its NULL check.
        unsafe {
            let arg = |i: usize| params.add(i).read();
            return Ok(Some(if op == Op::SumU32 {
                KernelArgs::Sum {
                    out: read_in(arg(0).cast::<CUdeviceptr>())?,
                    input: read_in(arg(1).cast::<CUdeviceptr>())?,
                    n: read_in(arg(2).cast::<u32>())?,
                }
            } else {
                KernelArgs::Elementwise {
                    ptr: read_in(arg(0).cast::<CUdeviceptr>())?,
                    n: read_in(arg(1).cast::<u32>())?,
                    value: read_in(arg(2).cast::<u32>())?,
                }
            }));
        }
    }
    if extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut buffer: *const u8 = std::ptr::null();
    let mut size: Option<usize> = None;
    for i in 0..MAX_EXTRA_PAIRS {
        // SAFETY: `extra` is an END-terminated array of (key, value) pointers (caller
        // contract); we stop at END, so every index read is inside it.
        let k = unsafe { extra.add(2 * i).read() }.addr();
        if k == CU_LAUNCH_PARAM_END {
            break;
        }
        // SAFETY: as above: a non-END key is followed by its value.
        let v = unsafe { extra.add(2 * i + 1).read() };
        match k {
            CU_LAUNCH_PARAM_BUFFER_POINTER => buffer = v.cast_const().cast(),
            // SAFETY: the value of BUFFER_SIZE points at a size_t (cuda.h).
            CU_LAUNCH_PARAM_BUFFER_SIZE => size = Some(unsafe { read_in(v.cast::<usize>()) }?),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    let need = if op == Op::SumU32 {
        PACKED_SUM_SIZE
    } else {
        PACKED_ELEMENTWISE_SIZE
    };
    match size {
        Some(s) if !buffer.is_null() && s >= need => {}
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    // SAFETY: `buffer` is non-NULL and the caller declared it at least `need` bytes long; every
    // read below ends at or before `need`.
    unsafe {
        Ok(Some(if op == Op::SumU32 {
            KernelArgs::Sum {
                out: buffer.cast::<u64>().read_unaligned(),
                input: buffer.add(8).cast::<u64>().read_unaligned(),
                n: buffer.add(16).cast::<u32>().read_unaligned(),
            }
        } else {
            KernelArgs::Elementwise {
                ptr: buffer.cast::<u64>().read_unaligned(),
                n: buffer.add(8).cast::<u32>().read_unaligned(),
                value: buffer.add(12).cast::<u32>().read_unaligned(),
            }
        }))
    }
}

/// Bytes of `n` u32 words (`None` if that does not fit in `usize`).
fn words(n: u32) -> Option<usize> {
    usize::try_from(u64::from(n) * 4).ok()
}

/// The device ranges a kernel touches, with the access each needs.
fn footprint(w: &Work) -> Vec<(CUdeviceptr, usize, Access)> {
    match w.args {
        None => Vec::new(),
        Some(KernelArgs::Elementwise { ptr, n, .. }) => {
            // A range too large for the address space can never be mapped.
            vec![(ptr, words(n).unwrap_or(usize::MAX), Access::Write)]
        }
        Some(KernelArgs::Sum { out, input, n }) => vec![
            (input, words(n).unwrap_or(usize::MAX), Access::Read),
            (out, 4, Access::Write),
        ],
    }
}

/// Checks every range the kernel touches: `Unmapped` if any lies outside the device memory the
/// fake knows, else `Protected` if any lacks the access it needs.
fn check_work(st: &State, w: &Work) -> Result<(), RangeFault> {
    let mut protected = false;
    for (ptr, len, access) in footprint(w) {
        match check_range(st, ptr, len, access) {
            Ok(()) => {}
            Err(RangeFault::Unmapped) => return Err(RangeFault::Unmapped),
            Err(RangeFault::Protected) => protected = true,
        }
    }
    if protected {
        Err(RangeFault::Protected)
    } else {
        Ok(())
    }
}

/// Applies a kernel's effect. Call only after `check_work` passed under the same lock.
fn apply(w: &Work) {
    match w.args {
        None => {}
        Some(KernelArgs::Elementwise { ptr, n, value }) => {
            let base = device_ptr(ptr).cast::<u32>();
            for i in 0..n as usize {
                // SAFETY: `check_work` proved `[ptr, ptr + 4n)` lies in live, writable
                // fake-device memory, and the state lock held by the caller keeps it so.
                unsafe {
                    let p = base.add(i);
                    let v = match w.op {
                        Op::AddU32 => p.read_unaligned().wrapping_add(value),
                        Op::FillU32 => value,
                        Op::Noop | Op::SumU32 => continue,
                    };
                    p.write_unaligned(v);
                }
            }
        }
        Some(KernelArgs::Sum { out, input, n }) => {
            let src = device_ptr(input).cast::<u32>().cast_const();
            let mut sum = 0u32;
            for i in 0..n as usize {
                // SAFETY: `check_work` proved `[input, input + 4n)` lies in live, readable
                // fake-device memory (kept so by the caller's state lock).
                sum = sum.wrapping_add(unsafe { src.add(i).read_unaligned() });
            }
            // SAFETY: `check_work` proved `[out, out + 4)` lies in live, writable fake-device
            // memory (kept so by the caller's state lock).
            unsafe { device_ptr(out).cast::<u32>().write_unaligned(sum) };
        }
    }
}

/// Runs kernels in order on `stream`: effects applied now, durations queued on the stream.
///
/// A kernel with a range outside every allocation and mapped VMM range fails the launch with
/// `CUDA_ERROR_INVALID_VALUE` before anything runs. A kernel writing into memory mapped without
/// write access (or reading memory mapped without read access) behaves as on the real GPU: the
/// launch itself succeeds, the faulting kernel does not run, and the context gets the sticky
/// error `CUDA_ERROR_ILLEGAL_ADDRESS`, which every later context-bound call returns.
pub fn execute(st: &mut State, works: &[Work], stream: StreamKey) -> CuResult<()> {
    let mut faults = Vec::with_capacity(works.len());
    for w in works {
        match check_work(st, w) {
            Err(RangeFault::Unmapped) => return Err(CUDA_ERROR_INVALID_VALUE),
            r => faults.push(r.is_err()),
        }
    }
    let now = now_ns();
    for (w, faulted) in works.iter().zip(faults) {
        if st.sticky_error.is_none() {
            if faulted {
                st.sticky_error = Some(CUDA_ERROR_ILLEGAL_ADDRESS);
            } else {
                apply(w);
            }
        }
        let (start, end) = match crate::shared::device() {
            None => st.streams.enqueue(stream, now, w.duration_ns),
            Some(dev) => st
                .streams
                .enqueue_with(stream, now, w.duration_ns, |earliest, d| {
                    // The device timeline is in CLOCK_MONOTONIC ns; streams count from `base`
                    // (`earliest >= 0` local, so the absolute start is >= base).
                    let base = base_ns();
                    let (s, e) = dev.run(earliest.saturating_add(base), d);
                    (s - base, e.saturating_sub(base))
                }),
        };
        introspect::last_kernel(start, end);
    }
    introspect::kernels_executed_add(works.len() as u64);
    Ok(())
}

/// `cuLaunchKernel` / `cuLaunchCooperativeKernel` (`extra` NULL) and their `_ptsz` forms.
///
/// # Safety
/// `params`/`extra` as in `decode_args`.
pub unsafe fn launch(
    f: Handle,
    dims: Dims,
    stream: Handle,
    per_thread_default: bool,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    let (op, duration_ns) = st.modules.function(f)?;
    check_dims(&dims)?;
    // SAFETY: forwarded caller contract.
    let args = unsafe { decode_args(op, params, extra) }?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    let work = Work {
        op,
        duration_ns,
        args,
    };
    if let Some(graph) = st.graphs.capture_target(s) {
        return crate::graphs::record_captured(&mut st, graph, work);
    }
    execute(&mut st, &[work], s)
}

/// `cuLaunchKernelEx` and its `_ptsz` form. Launch attributes are accepted and ignored.
///
/// # Safety
/// `config` NULL or valid for a read; `params`/`extra` as in `decode_args`.
pub unsafe fn launch_ex(
    config: *const CUlaunchConfig,
    f: Handle,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    per_thread_default: bool,
) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    let c = unsafe { read_in(config) }?;
    if c.num_attrs > 0 && c.attrs.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let dims = Dims {
        grid: [c.grid_dim_x, c.grid_dim_y, c.grid_dim_z],
        block: [c.block_dim_x, c.block_dim_y, c.block_dim_z],
        shared: c.shared_mem_bytes,
    };
    // SAFETY: forwarded caller contract.
    unsafe { launch(f, dims, c.h_stream, per_thread_default, params, extra) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::*;
    use crate::testing::{ok, Driver, PROT_NONE, PROT_READ, PROT_READWRITE};
    use crate::vmm::GRANULARITY;

    /// Loads a module with one 0 ns `sum_u32` kernel: `(module, function)`.
    fn sum_module() -> (Handle, Handle) {
        let image = c"tandem-fake-module v1\nkernel sum 0 sum_u32\n";
        let (mut m, mut sum): (Handle, Handle) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers and NUL-terminated strings.
        unsafe {
            ok(cuModuleLoadData(&mut m, image.as_ptr().cast()));
            ok(cuModuleGetFunction(&mut sum, m, c"sum".as_ptr()));
        }
        (m, sum)
    }

    /// `sum_u32(out, input, n)` on the legacy stream; the launch's result.
    fn sum(f: Handle, out: CUdeviceptr, input: CUdeviceptr, n: u32) -> CUresult {
        let (mut out, mut input, mut n) = (out, input, n);
        let mut params: [*mut c_void; 3] = [
            (&raw mut out).cast(),
            (&raw mut input).cast(),
            (&raw mut n).cast(),
        ];
        // SAFETY: `params` points at three live values of the kernel's parameter types.
        unsafe {
            cuLaunchKernel(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    }

    fn words(d: &Driver, p: CUdeviceptr, n: usize) -> Vec<u32> {
        d.download(p, 4 * n)
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn upload_words(d: &Driver, p: CUdeviceptr, w: &[u32]) {
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_ne_bytes()).collect();
        d.upload(p, &bytes);
    }

    #[test]
    fn sum_u32_sums_wrapping() {
        let d = Driver::new();
        let (m, f) = sum_module();
        let input = d.alloc(4 * 100);
        let out = d.alloc(8);
        upload_words(&d, out, &[0xaaaa_aaaa, 0xbbbb_bbbb]);
        let w: Vec<u32> = (1..=100).collect();
        upload_words(&d, input, &w);
        ok(sum(f, out, input, 100));
        assert_eq!(
            words(&d, out, 2),
            [5050, 0xbbbb_bbbb],
            "only out[0] is written"
        );
        ok(sum(f, out + 4, input + 4 * 98, 2));
        assert_eq!(words(&d, out, 2), [5050, 99 + 100]);
        upload_words(&d, input, &[u32::MAX, 2, 0x8000_0000, 0x8000_0000]);
        ok(sum(f, out, input, 4));
        assert_eq!(words(&d, out, 1), [1]);
        ok(sum(f, out, input, 0));
        assert_eq!(words(&d, out, 1), [0], "an empty sum is 0");
        assert_eq!(d.sticky(), None);
        // SAFETY: a live module.
        ok(unsafe { cuModuleUnload(m) });
        d.free(input);
        d.free(out);
    }

    #[test]
    fn sum_u32_reads_a_read_only_mapping() {
        let d = Driver::new();
        let (m, f) = sum_module();
        let (ro, h) = d.vmm_granule(PROT_READWRITE);
        let n = GRANULARITY / 4;
        let w: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        upload_words(&d, ro, &w);
        d.set_access(ro, GRANULARITY, PROT_READ);
        let out = d.alloc(4);
        ok(sum(f, out, ro, n as u32));
        let want = w.iter().fold(0u32, |a, &v| a.wrapping_add(v));
        assert_eq!(words(&d, out, 1), [want]);
        assert_eq!(d.sticky(), None);
        // SAFETY: no pending work that could fault.
        ok(unsafe { cuCtxSynchronize() });

        // Writing the sum INTO the read-only mapping faults: nothing written, sticky 700.
        ok(sum(f, ro, out, 1));
        assert_eq!(d.sticky(), Some(CUDA_ERROR_ILLEGAL_ADDRESS));
        // SAFETY: plain calls; every one must now return the sticky error.
        unsafe {
            assert_eq!(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
            assert_eq!(cuMemcpyDtoD_v2(out, ro, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
            assert_eq!(cuMemcpy(out, ro, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
            assert_eq!(
                cuMemcpyAsync(out, ro, 4, std::ptr::null_mut()),
                CUDA_ERROR_ILLEGAL_ADDRESS
            );
            assert_eq!(
                cuMemcpyDtoDAsync_v2(out, ro, 4, std::ptr::null_mut()),
                CUDA_ERROR_ILLEGAL_ADDRESS
            );
        }
        assert_eq!(sum(f, out, ro, 1), CUDA_ERROR_ILLEGAL_ADDRESS);
        crate::state::lock().sticky_error = None;
        assert_eq!(words(&d, ro, 1), [w[0]], "the faulting kernel wrote");
        d.vmm_free(ro, h);
        // SAFETY: a live module.
        ok(unsafe { cuModuleUnload(m) });
        d.free(out);
    }

    #[test]
    fn sum_u32_faults_on_input_it_cannot_read() {
        let d = Driver::new();
        let (m, f) = sum_module();
        let out = d.alloc(4);
        upload_words(&d, out, &[0x1234_5678]);
        let input = d.alloc(64);

        // Outside every device range the fake knows (past the end of an allocation, or a
        // reserved but unmapped VMM range): the launch fails with CUDA_ERROR_INVALID_VALUE and
        // nothing runs, as for add_u32/fill_u32.
        assert_eq!(sum(f, out, input, 17), CUDA_ERROR_INVALID_VALUE);
        let hole = d.reserve(GRANULARITY);
        assert_eq!(sum(f, out, hole, 4), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(words(&d, out, 1), [0x1234_5678]);
        assert_eq!(d.sticky(), None);

        // Mapped without read access: the launch succeeds, the kernel does not run, and the
        // context is poisoned with CUDA_ERROR_ILLEGAL_ADDRESS.
        let (none, h) = d.vmm_granule(PROT_NONE);
        ok(sum(f, out, none, 4));
        assert_eq!(d.sticky(), Some(CUDA_ERROR_ILLEGAL_ADDRESS));
        // SAFETY: no arguments.
        assert_eq!(unsafe { cuCtxSynchronize() }, CUDA_ERROR_ILLEGAL_ADDRESS);
        crate::state::lock().sticky_error = None;
        assert_eq!(
            words(&d, out, 1),
            [0x1234_5678],
            "the faulting kernel wrote"
        );

        // The same for an `out` it may not write, even when `in` is fine.
        d.set_access(none, GRANULARITY, PROT_READ);
        ok(sum(f, none, input, 16));
        assert_eq!(d.sticky(), Some(CUDA_ERROR_ILLEGAL_ADDRESS));
        crate::state::lock().sticky_error = None;
        assert_eq!(words(&d, none, 1), [0]);

        d.vmm_free(none, h);
        // SAFETY: a reservation with nothing mapped; a live module.
        unsafe {
            ok(cuMemAddressFree(hole, GRANULARITY));
            ok(cuModuleUnload(m));
        }
        d.free(input);
        d.free(out);
    }

    #[test]
    fn parses_kernels() {
        let img = "tandem-fake-module v1\n\
                   kernel k_noop 1000 noop\n\
                   \n\
                   # a comment\n\
                   kernel add 250000 add_u32\r\n\
                   kernel fill 0 fill_u32\n\
                   kernel sum 20000 sum_u32\n";
        let ks = parse_image(img).expect("valid image");
        assert_eq!(
            ks,
            vec![
                KernelDef {
                    name: "k_noop".into(),
                    duration_ns: 1000,
                    op: Op::Noop
                },
                KernelDef {
                    name: "add".into(),
                    duration_ns: 250_000,
                    op: Op::AddU32
                },
                KernelDef {
                    name: "fill".into(),
                    duration_ns: 0,
                    op: Op::FillU32
                },
                KernelDef {
                    name: "sum".into(),
                    duration_ns: 20_000,
                    op: Op::SumU32
                },
            ]
        );
    }

    #[test]
    fn rejects_bad_images() {
        assert!(parse_image("").is_err());
        assert!(parse_image("tandem-fake-module v2\n").is_err());
        assert!(parse_image("kernel a 1 noop\n").is_err());
        let bad = [
            "kernel a 1",
            "kernel a x noop",
            "kernel a -5 noop",
            "kernel a 1 mul_u32",
            "kernel a 1 noop extra",
            "kernal a 1 noop",
            "kernel a 1 noop\nkernel a 2 noop",
        ];
        for body in bad {
            let img = format!("{IMAGE_HEADER}\n{body}\n");
            assert!(parse_image(&img).is_err(), "accepted {body:?}");
        }
        assert_eq!(parse_image(&format!("{IMAGE_HEADER}\n")), Ok(vec![]));
    }

    #[test]
    fn dims_limits() {
        let ok = Dims {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared: 0,
        };
        assert!(check_dims(&ok).is_ok());
        assert!(check_dims(&Dims {
            grid: [0, 1, 1],
            ..ok
        })
        .is_err());
        assert!(check_dims(&Dims {
            block: [1024, 2, 1],
            ..ok
        })
        .is_err());
        assert!(check_dims(&Dims {
            block: [1, 1, 65],
            ..ok
        })
        .is_err());
        assert!(check_dims(&Dims {
            shared: 48 * 1024 + 1,
            ..ok
        })
        .is_err());
    }

    #[test]
    fn decodes_params_and_extra() {
        let mut ptr: u64 = 0xdead_0000;
        let mut n: u32 = 7;
        let mut value: u32 = 9;
        let mut params: [*mut c_void; 3] = [
            (&raw mut ptr).cast(),
            (&raw mut n).cast(),
            (&raw mut value).cast(),
        ];
        let want = Some(KernelArgs::Elementwise {
            ptr: 0xdead_0000,
            n: 7,
            value: 9,
        });
        // SAFETY: `params` points at three live values.
        let got = unsafe { decode_args(Op::AddU32, params.as_mut_ptr(), std::ptr::null_mut()) };
        assert_eq!(got, Ok(want));

        let mut buf = [0u8; 16];
        buf[..8].copy_from_slice(&0xdead_0000u64.to_ne_bytes());
        buf[8..12].copy_from_slice(&7u32.to_ne_bytes());
        buf[12..].copy_from_slice(&9u32.to_ne_bytes());
        let mut size: usize = 16;
        let mut extra: [*mut c_void; 5] = [
            std::ptr::without_provenance_mut(CU_LAUNCH_PARAM_BUFFER_POINTER),
            buf.as_mut_ptr().cast(),
            std::ptr::without_provenance_mut(CU_LAUNCH_PARAM_BUFFER_SIZE),
            (&raw mut size).cast(),
            std::ptr::null_mut(),
        ];
        // SAFETY: `extra` is END-terminated and points at live storage.
        let got = unsafe { decode_args(Op::FillU32, std::ptr::null_mut(), extra.as_mut_ptr()) };
        assert_eq!(got, Ok(want));

        // Both, or neither (for an op with params), is invalid; noop needs nothing.
        // SAFETY: as above.
        let both = unsafe { decode_args(Op::AddU32, params.as_mut_ptr(), extra.as_mut_ptr()) };
        assert_eq!(both, Err(CUDA_ERROR_INVALID_VALUE));
        let null = std::ptr::null_mut();
        // SAFETY: NULL pointers are never dereferenced.
        let neither = unsafe { decode_args(Op::AddU32, null, null) };
        assert_eq!(neither, Err(CUDA_ERROR_INVALID_VALUE));
        // SAFETY: as above.
        let noop = unsafe { decode_args(Op::Noop, null, null) };
        assert_eq!(noop, Ok(None));
    }

    #[test]
    fn decodes_sum_params_and_extra() {
        let mut out: u64 = 0x1000;
        let mut input: u64 = 0x2000;
        let mut n: u32 = 5;
        let mut params: [*mut c_void; 3] = [
            (&raw mut out).cast(),
            (&raw mut input).cast(),
            (&raw mut n).cast(),
        ];
        let want = Some(KernelArgs::Sum {
            out: 0x1000,
            input: 0x2000,
            n: 5,
        });
        // SAFETY: `params` points at three live values.
        let got = unsafe { decode_args(Op::SumU32, params.as_mut_ptr(), std::ptr::null_mut()) };
        assert_eq!(got, Ok(want));

        let mut buf = [0u8; 24];
        buf[..8].copy_from_slice(&0x1000u64.to_ne_bytes());
        buf[8..16].copy_from_slice(&0x2000u64.to_ne_bytes());
        buf[16..20].copy_from_slice(&5u32.to_ne_bytes());
        for (size, expect) in [(24usize, Ok(want)), (16, Err(CUDA_ERROR_INVALID_VALUE))] {
            let mut size = size;
            let mut extra: [*mut c_void; 5] = [
                std::ptr::without_provenance_mut(CU_LAUNCH_PARAM_BUFFER_POINTER),
                buf.as_mut_ptr().cast(),
                std::ptr::without_provenance_mut(CU_LAUNCH_PARAM_BUFFER_SIZE),
                (&raw mut size).cast(),
                std::ptr::null_mut(),
            ];
            // SAFETY: `extra` is END-terminated and points at live storage.
            let got = unsafe { decode_args(Op::SumU32, std::ptr::null_mut(), extra.as_mut_ptr()) };
            assert_eq!(got, expect, "buffer size {size}");
        }
    }
}
