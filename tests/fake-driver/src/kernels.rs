//! Fake modules and kernels: `cuModule*`/`cuFuncGetName` and the launch entry points (argument
//! decoding is `crate::kernel_args`, running the kernels `crate::execute`, the image format and
//! the kernel ops `crate::state::modules`).
//!
//! Image (NUL-terminated text):
//! ```text
//! tandem-fake-module v1
//! kernel <name> <duration_ns> <op> [regs=N] [smem=M] [cluster=W]
//! ```
//! `regs` and `smem` (default 0) are what `cuFuncGetAttribute` reports as the kernel's registers
//! per thread and static shared memory per block; `cluster` (default 0: none) its compile-time
//! thread-block cluster's width (height and depth 1).
//! ops: `noop`; `add_u32` (params `CUdeviceptr ptr, unsigned n, unsigned value`: `ptr[i] += value`,
//! wrapping); `fill_u32` (same params: `ptr[i] = value`); `sum_u32` (params `CUdeviceptr out,
//! CUdeviceptr in, unsigned n`: `out[0] = in[0] + ... + in[n-1]`, wrapping; `in` is only read).
//! Blank lines and lines starting with `#` are ignored. A kernel's effects are applied at launch;
//! its duration is simulated on the stream.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use crate::execute::execute;
use crate::kernel_args::{check_dims, decode_args, MAX_DYNAMIC_SHARED, MAX_SHARED_OPTIN};
use crate::state::lock;
use crate::state::modules::{parse_image, Dims, Function, Work};
use crate::types::*;

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
                regs: d.regs,
                smem: d.smem,
                cluster: d.cluster,
                max_dynamic_smem: MAX_DYNAMIC_SHARED,
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
    let func = st.modules.func(f)?;
    debug_assert!(st.modules.modules.contains_key(&func.module));
    // SAFETY: non-NULL, caller contract. The CString's heap buffer does not move while the
    // function exists.
    unsafe { write_out(out, func.name.as_ptr()) }
}

/// `cuFuncGetAttribute`: the image's `regs` and `smem` (attributes 4 and 1), 1024 threads per
/// block (0), no constant or local memory (2, 3), its `cluster` as the required cluster width
/// (11; height and depth, 12 and 13, 1 with a cluster, else 0) and whether a cluster size must
/// be set (10: 0); any other attribute is refused.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn func_get_attribute(out: *mut c_int, attrib: c_int, f: Handle) -> CuResult<()> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let st = lock();
    let func = st.modules.func(f)?;
    let v = match attrib {
        0 => 1024,
        1 => func.smem,
        2 | 3 => 0,
        4 => func.regs,
        10 => 0,
        11 => func.cluster,
        12 | 13 => u32::from(func.cluster > 0),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, c_int::try_from(v).unwrap_or(c_int::MAX)) }
}

/// `cuFuncSetAttribute`: the dynamic shared memory its launches may ask for
/// (8, `MAX_DYNAMIC_SHARED_SIZE_BYTES`: up to the opt-in limit less its static
/// shared memory) and the preferred carveout (9: -1 to 100, accepted and
/// ignored); any other attribute, or a value out of range, is refused.
pub fn func_set_attribute(f: Handle, attrib: c_int, value: c_int) -> CuResult<()> {
    let mut st = lock();
    let func = st
        .modules
        .functions
        .get_mut(&key(f))
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    match (attrib, u32::try_from(value)) {
        (8, Ok(v)) if v <= MAX_SHARED_OPTIN.saturating_sub(func.smem) => {
            func.max_dynamic_smem = v;
            Ok(())
        }
        (9, _) if (-1..=100).contains(&value) => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
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
    // The launch callbacks run first, without the state lock (a callback may call the
    // driver): they may confine the kernel to some SMs.
    let sms = crate::callbacks::before_launch(dims.grid, dims.block)?;
    let mut st = lock();
    st.require_ctx()?;
    let (op, duration_ns, max_dynamic) = st.modules.function(f)?;
    check_dims(&dims, max_dynamic)?;
    // SAFETY: forwarded caller contract.
    let args = unsafe { decode_args(op, params, extra) }?;
    let s = st.streams.resolve(stream, per_thread_default)?;
    let work = Work {
        op,
        duration_ns,
        args,
        blocks: dims.grid.iter().map(|&g| u64::from(g.max(1))).product(),
        sms,
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
    use crate::kernel_args::{CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE};
    use crate::state::modules::{KernelArgs, KernelDef, Op, IMAGE_HEADER};
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
    fn dynamic_shared_memory_over_48_kib_needs_the_functions_opt_in() {
        let d = Driver::new();
        let image = c"tandem-fake-module v1\nkernel big 0 noop smem=1024\n";
        let (mut m, mut f): (Handle, Handle) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers and NUL-terminated strings.
        unsafe {
            ok(cuModuleLoadData(&mut m, image.as_ptr().cast()));
            ok(cuModuleGetFunction(&mut f, m, c"big".as_ptr()));
        }
        let launch = |shared: std::ffi::c_uint| {
            // SAFETY: a noop kernel reads no parameters; the legacy stream.
            unsafe {
                cuLaunchKernel(
                    f,
                    1,
                    1,
                    1,
                    1024,
                    1,
                    1,
                    shared,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            }
        };
        // SAFETY: takes its arguments by value; the fake checks the handle.
        let set = |f: Handle, attrib: c_int, value: c_int| unsafe {
            cuFuncSetAttribute(f, attrib, value)
        };
        let half_an_sm = 117 * 1024;
        assert_eq!(launch(half_an_sm), CUDA_ERROR_INVALID_VALUE, "not opted in");
        ok(launch(48 * 1024));
        ok(set(f, 8, half_an_sm as c_int));
        ok(launch(half_an_sm));
        assert_eq!(launch(half_an_sm + 1), CUDA_ERROR_INVALID_VALUE);
        let limit = (MAX_SHARED_OPTIN - 1024) as c_int;
        ok(set(f, 8, limit));
        for (attrib, value) in [(8, limit + 1), (8, -1), (3, 0), (9, 101)] {
            assert_eq!(
                set(f, attrib, value),
                CUDA_ERROR_INVALID_VALUE,
                "attribute {attrib} = {value}"
            );
        }
        ok(set(f, 9, 50));
        assert_eq!(set(std::ptr::null_mut(), 8, 0), CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(d.sticky(), None);
        // SAFETY: a live module.
        ok(unsafe { cuModuleUnload(m) });
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
                   kernel add 250000 add_u32 regs=96 smem=4096\r\n\
                   kernel fill 0 fill_u32 smem=512 cluster=2\n\
                   kernel sum 20000 sum_u32\n";
        let ks = parse_image(img).expect("valid image");
        assert_eq!(
            ks,
            vec![
                KernelDef {
                    name: "k_noop".into(),
                    duration_ns: 1000,
                    op: Op::Noop,
                    regs: 0,
                    smem: 0,
                    cluster: 0,
                },
                KernelDef {
                    name: "add".into(),
                    duration_ns: 250_000,
                    op: Op::AddU32,
                    regs: 96,
                    smem: 4096,
                    cluster: 0,
                },
                KernelDef {
                    name: "fill".into(),
                    duration_ns: 0,
                    op: Op::FillU32,
                    regs: 0,
                    smem: 512,
                    cluster: 2,
                },
                KernelDef {
                    name: "sum".into(),
                    duration_ns: 20_000,
                    op: Op::SumU32,
                    regs: 0,
                    smem: 0,
                    cluster: 0,
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
            "kernel a 1 noop regs=x",
            "kernel a 1 noop regs=1 regs=2",
            "kernel a 1 noop smem=-1",
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
        assert!(check_dims(&ok, MAX_DYNAMIC_SHARED).is_ok());
        assert!(check_dims(
            &Dims {
                grid: [0, 1, 1],
                ..ok
            },
            MAX_DYNAMIC_SHARED,
        )
        .is_err());
        assert!(check_dims(
            &Dims {
                block: [1024, 2, 1],
                ..ok
            },
            MAX_DYNAMIC_SHARED,
        )
        .is_err());
        assert!(check_dims(
            &Dims {
                block: [1, 1, 65],
                ..ok
            },
            MAX_DYNAMIC_SHARED,
        )
        .is_err());
        assert!(check_dims(
            &Dims {
                shared: 48 * 1024 + 1,
                ..ok
            },
            MAX_DYNAMIC_SHARED,
        )
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
