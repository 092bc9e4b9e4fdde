//! Loaded modules and their functions: the module image format, what each kernel does
//! (its op and duration), and the work a launch hands to the device.

use std::collections::BTreeMap;
use std::ffi::{c_uint, CString};

use crate::types::*;

pub const IMAGE_HEADER: &str = "tandem-fake-module v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Noop,
    AddU32,
    FillU32,
    SumU32,
}

impl Op {
    pub(crate) fn parse(s: &str) -> Option<Op> {
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
    /// `regs=N`: registers per thread (`CU_FUNC_ATTRIBUTE_NUM_REGS`); 0 when not given.
    pub regs: u32,
    /// `smem=M`: static shared memory per block, bytes; 0 when not given.
    pub smem: u32,
    /// `cluster=W`: a compile-time thread-block cluster `W` blocks wide
    /// (`CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`); 0 when not given: none.
    pub cluster: u32,
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
        let [kw, name, duration, op, ref attrs @ ..] = tokens[..] else {
            return Err(format!(
                "line {}: expected `kernel <name> <duration_ns> <op> [regs=N] [smem=M] [cluster=W]`",
                i + 1
            ));
        };
        let (mut regs, mut smem, mut cluster) = (None, None, None);
        for a in attrs {
            let (slot, v) = match a.split_once('=') {
                Some(("regs", v)) => (&mut regs, v),
                Some(("smem", v)) => (&mut smem, v),
                Some(("cluster", v)) => (&mut cluster, v),
                _ => return Err(format!("line {}: unknown attribute `{a}`", i + 1)),
            };
            let v = v
                .parse::<u32>()
                .map_err(|_| format!("line {}: bad attribute `{a}`", i + 1))?;
            if slot.replace(v).is_some() {
                return Err(format!("line {}: attribute `{a}` given twice", i + 1));
            }
        }
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
            regs: regs.unwrap_or(0),
            smem: smem.unwrap_or(0),
            cluster: cluster.unwrap_or(0),
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
    /// Blocks in the grid (one a SM, one wave, on the shared device's SMs).
    pub blocks: u64,
    /// The TPCs its launch callback's mask kept it off (`None`: none).
    pub sms: Option<crate::shared::TpcMask>,
}

pub(crate) struct Function {
    pub(crate) module: usize,
    pub(crate) name: CString,
    pub(crate) duration_ns: u64,
    pub(crate) op: Op,
    /// Registers per thread, static shared memory and the compile-time
    /// cluster width (`cuFuncGetAttribute`).
    pub(crate) regs: u32,
    pub(crate) smem: u32,
    pub(crate) cluster: u32,
    /// The dynamic shared memory its launches may ask for
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
    pub(crate) max_dynamic_smem: u32,
}

pub struct Modules {
    /// module -> its functions (name, handle).
    pub(crate) modules: BTreeMap<usize, Vec<(String, usize)>>,
    pub(crate) functions: BTreeMap<usize, Function>,
}

impl Modules {
    pub const fn new() -> Self {
        Self {
            modules: BTreeMap::new(),
            functions: BTreeMap::new(),
        }
    }

    /// A live function, by its handle.
    pub fn func(&self, f: Handle) -> CuResult<&Function> {
        self.functions.get(&key(f)).ok_or(CUDA_ERROR_INVALID_HANDLE)
    }

    /// The op and duration of a live function.
    pub fn function(&self, f: Handle) -> CuResult<(Op, u64, u32)> {
        self.func(f)
            .map(|f| (f.op, f.duration_ns, f.max_dynamic_smem))
    }
}

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared: c_uint,
}
