//! The trace format (`tandem-trace/1`): what one job does, in the order its
//! CPU thread does it. One definition, shared by the writers (tandemd's
//! capture, `tandemctl trace`, the synthetic traces of `tandem-gpusim`) and
//! the readers (`tandem-sim`, `tandemctl predict`).
//!
//! A trace is one JSON document (`tandem-trace/1`). For an inference job its
//! `ops` are one request (the server repeats them per request); for a
//! training job, one optimiser step (the loop repeats them). Times are
//! nanoseconds.
//!
//! ```json
//! {
//!   "format": "tandem-trace/1",
//!   "job": "resnet50_b4",
//!   "class": "inference",
//!   "source": "synthetic",
//!   "device": "H100 SXM (132 SMs)",
//!   "notes": "how it was made",
//!   "ops": [
//!     {"op": "copy_h2d", "bytes": 1204224, "stream": 0, "host_gap_ns": 30000},
//!     {"op": "kernel", "name": "conv_fwd", "grid": [98, 1, 1], "block": [256, 1, 1],
//!      "blocks_per_sm": 1, "duration_ns": 8000, "stream": 0, "host_gap_ns": 40000},
//!     {"op": "copy_d2h", "bytes": 8000, "stream": 0, "host_gap_ns": 10000},
//!     {"op": "sync", "host_gap_ns": 2000}
//!   ]
//! }
//! ```
//!
//! Every op has `host_gap_ns`: the CPU time the job's thread spends after the
//! previous op was issued (or, for the first op, after the request arrived or
//! the step began) before it issues this one: Python, the framework's
//! dispatcher, the driver's launch call. An eager PyTorch job's gaps are what
//! makes it launch-bound.
//!
//! * `kernel`: `name` (the function; the shim's function id is a hash of it),
//!   `grid` and `block` (launch dimensions), `blocks_per_sm` (how many of its
//!   blocks one SM holds at its occupancy; 0: not known, the model derives
//!   it from the block, `regs_per_thread` and `smem_per_block` by the
//!   occupancy rules of the device it models, as for a live capture, which
//!   sees a kernel's resources but not its occupancy), `duration_ns` (its time on
//!   an otherwise empty GPU, launch to completion), `stream` (an index within
//!   the job; ops on one stream run in order, streams may overlap), and
//!   optionally `sm_share` (the share of an SM's throughput its blocks use,
//!   default 1: a latency-bound kernel leaves the rest of its SMs to
//!   another MPS client's blocks); optionally `regs_per_thread` and
//!   `smem_per_block` (what one block holds: with the block size they
//!   give the share of an SM the kernel holds, gpusim's `footprint`; they
//!   replace `sm_share`), `dram_bytes` (its DRAM traffic alone: kernels
//!   that run at once share the bandwidth) and `graph` (`n > 0`: a node of
//!   the `n`th CUDA graph launch; consecutive nodes of one launch pass
//!   tandem's gate once, as the shim sees one `cuGraphLaunch`).
//! * `copy_h2d` / `copy_d2h`: `bytes`, `stream`. Copies run on the copy
//!   engine, in stream order with the kernels.
//! * `sync`: the thread waits until everything it issued has completed
//!   (`cudaDeviceSynchronize`, a synchronous `.cpu()` or `.item()`); the shim
//!   reports it as SYNC_BEGIN / SYNC_END.
//!
//! `source` is `synthetic` (built by gpusim's `synthetic` modules from
//! public figures) or `measured` (captured from a running job: on a GPU by
//! `scripts/gpu/trace_capture.py` and committed under `tests/traces/`, or
//! live from the ring by tandemd, `tandemctl trace`).

use serde::{Deserialize, Serialize};

/// The format tag every trace carries.
pub const FORMAT: &str = "tandem-trace/1";

/// Inference (requests) or training (steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobClass {
    /// `ops` are one request.
    Inference,
    /// `ops` are one step.
    Training,
}

/// One thing the job's thread issues.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A kernel launch.
    Kernel(Kernel),
    /// Host-to-device copy (asynchronous).
    CopyH2d {
        /// Bytes copied.
        bytes: u64,
        /// Stream index.
        #[serde(default)]
        stream: u32,
        /// CPU time before it is issued, ns.
        host_gap_ns: u64,
    },
    /// Device-to-host copy (asynchronous; a `sync` after it waits for it).
    CopyD2h {
        /// Bytes copied.
        bytes: u64,
        /// Stream index.
        #[serde(default)]
        stream: u32,
        /// CPU time before it is issued, ns.
        host_gap_ns: u64,
    },
    /// Wait for everything issued so far.
    Sync {
        /// CPU time before the wait, ns.
        host_gap_ns: u64,
    },
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// The function's name.
    pub name: String,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Blocks one SM holds at once at this kernel's occupancy; 0: not
    /// known (the model derives it from the block, registers and shared
    /// memory on the device it models).
    pub blocks_per_sm: u32,
    /// Time on an otherwise empty GPU, ns.
    pub duration_ns: u64,
    /// The share (0..=1] of an SM's throughput its blocks use; under MPS
    /// another client's blocks may use the rest of the SMs it holds.
    /// Default 1 (the blocks use their SMs fully).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub sm_share: f64,
    /// Registers per thread (`cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS)`);
    /// 0: unknown. With `smem_per_block` and the block size it gives the
    /// share of an SM one block holds, which decides whether another
    /// client's blocks fit beside it (the engine's co-residence).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub regs_per_thread: u32,
    /// Shared memory per block, static plus dynamic, bytes; 0: none or unknown.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub smem_per_block: u32,
    /// Bytes the kernel moves to and from DRAM alone (its memory traffic);
    /// 0: unknown (taken as compute-bound). Kernels that run at once share
    /// the DRAM bandwidth.
    #[serde(default, skip_serializing_if = "is_zero64")]
    pub dram_bytes: u64,
    /// 0: launched by itself (`cuLaunchKernel` and its siblings). `n > 0`:
    /// a kernel node of CUDA graph launch `n`; consecutive kernels with the
    /// same `n` are one `cuGraphLaunch`, which is all the shim sees (one
    /// launch through tandem's gate), and every node after the first has
    /// no host gap (the GPU, not the job's thread, starts it).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub graph: u32,
    /// Stream index.
    #[serde(default)]
    pub stream: u32,
    /// CPU time before the launch, ns.
    pub host_gap_ns: u64,
}

fn one() -> f64 {
    1.0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if signature
fn is_one(x: &f64) -> bool {
    (*x - 1.0).abs() < f64::EPSILON
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if signature
fn is_zero32(x: &u32) -> bool {
    *x == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if signature
fn is_zero64(x: &u64) -> bool {
    *x == 0
}

impl Kernel {
    /// A launch of `blocks` blocks of `threads` threads, `blocks_per_sm` of
    /// them an SM, `duration_ns` on an empty GPU, and nothing else known: its
    /// blocks use their SMs fully, no registers, shared memory or DRAM
    /// traffic recorded, not a graph node, stream 0, no host gap. Set the
    /// rest with struct update syntax.
    #[must_use]
    pub fn new(
        name: &str,
        blocks: u32,
        threads: u32,
        blocks_per_sm: u32,
        duration_ns: u64,
    ) -> Kernel {
        Kernel {
            name: name.to_string(),
            grid: [blocks, 1, 1],
            block: [threads, 1, 1],
            blocks_per_sm,
            duration_ns,
            sm_share: 1.0,
            regs_per_thread: 0,
            smem_per_block: 0,
            dram_bytes: 0,
            graph: 0,
            stream: 0,
            host_gap_ns: 0,
        }
    }

    /// Blocks in the grid.
    #[must_use]
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g.max(1))).product()
    }
}

impl Op {
    /// A copy on stream 0, device to host (`d2h`) or host to device.
    #[must_use]
    pub fn copy(bytes: u64, d2h: bool, host_gap_ns: u64) -> Op {
        if d2h {
            Op::CopyD2h {
                bytes,
                stream: 0,
                host_gap_ns,
            }
        } else {
            Op::CopyH2d {
                bytes,
                stream: 0,
                host_gap_ns,
            }
        }
    }

    /// CPU time before the op is issued.
    #[must_use]
    pub fn host_gap_ns(&self) -> u64 {
        match self {
            Op::Kernel(k) => k.host_gap_ns,
            Op::CopyH2d { host_gap_ns, .. }
            | Op::CopyD2h { host_gap_ns, .. }
            | Op::Sync { host_gap_ns } => *host_gap_ns,
        }
    }
}

/// A job's trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// [`FORMAT`].
    pub format: String,
    /// The job's name (the benchmark's: `resnet50_b4`, `gpt2_train`, ...).
    pub job: String,
    /// Inference or training.
    pub class: JobClass,
    /// `synthetic` or `measured`.
    pub source: String,
    /// The device it describes.
    #[serde(default)]
    pub device: String,
    /// How it was made.
    #[serde(default)]
    pub notes: String,
    /// One request or one step.
    pub ops: Vec<Op>,
}

/// Why a trace was refused.
#[derive(Debug, PartialEq)]
pub struct TraceError(pub String);

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad trace: {}", self.0)
    }
}

impl std::error::Error for TraceError {}

/// Most streams a job may use (indices 0..MAX_STREAMS).
pub const MAX_STREAMS: u32 = 16;

impl Trace {
    /// Parses and checks a trace.
    ///
    /// # Errors
    /// Malformed JSON, another format, or a trace that breaks a rule of the
    /// format (see [`Trace::check`]).
    pub fn from_json(text: &str) -> Result<Trace, TraceError> {
        let t: Trace = serde_json::from_str(text).map_err(|e| TraceError(e.to_string()))?;
        t.check()?;
        Ok(t)
    }

    /// The trace as pretty JSON.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a trace always serialises")
    }

    /// The rules: the format tag, a known source, at least one kernel, every
    /// kernel with a non-empty grid and block, a
    /// duration of at least 1 ns, streams below [`MAX_STREAMS`], and an
    /// inference request that ends in a `sync` (its result reaches the host).
    ///
    /// # Errors
    /// The first rule broken.
    pub fn check(&self) -> Result<(), TraceError> {
        let bad = |s: String| Err(TraceError(format!("{}: {s}", self.job)));
        if self.format != FORMAT {
            return bad(format!("format {:?}, expected {FORMAT:?}", self.format));
        }
        if self.source != "synthetic" && self.source != "measured" {
            return bad(format!(
                "source {:?} is neither synthetic nor measured",
                self.source
            ));
        }
        let mut kernels = 0;
        for (i, op) in self.ops.iter().enumerate() {
            let stream = match op {
                Op::Kernel(k) => {
                    kernels += 1;
                    if k.grid.contains(&0) || k.block.contains(&0) {
                        return bad(format!("op {i} ({}): empty grid or block", k.name));
                    }
                    if !(k.sm_share > 0.0 && k.sm_share <= 1.0) {
                        return bad(format!("op {i} ({}): sm_share must be in (0, 1]", k.name));
                    }
                    if k.graph != 0
                        && k.host_gap_ns != 0
                        && i > 0
                        && matches!(&self.ops[i - 1], Op::Kernel(p) if p.graph == k.graph)
                    {
                        return bad(format!(
                            "op {i} ({}): a graph's later nodes have no host gap",
                            k.name
                        ));
                    }
                    if k.duration_ns == 0 {
                        return bad(format!("op {i} ({}): duration_ns must be >= 1", k.name));
                    }
                    k.stream
                }
                Op::CopyH2d { stream, .. } | Op::CopyD2h { stream, .. } => *stream,
                Op::Sync { .. } => 0,
            };
            if stream >= MAX_STREAMS {
                return bad(format!("op {i}: stream {stream} >= {MAX_STREAMS}"));
            }
        }
        if kernels == 0 {
            return bad("no kernel".into());
        }
        if self.class == JobClass::Inference && !matches!(self.ops.last(), Some(Op::Sync { .. })) {
            return bad("an inference request must end in a sync".into());
        }
        Ok(())
    }

    /// The kernels, in order.
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.ops.iter().filter_map(|o| match o {
            Op::Kernel(k) => Some(k),
            _ => None,
        })
    }

    /// Sum of the kernels' durations (their GPU time alone, if run one after
    /// another), ns.
    #[must_use]
    pub fn kernel_ns(&self) -> u64 {
        self.kernels().map(|k| k.duration_ns).sum()
    }

    /// Sum of the host gaps (the CPU time of one request or step), ns.
    #[must_use]
    pub fn host_ns(&self) -> u64 {
        self.ops.iter().map(Op::host_gap_ns).sum()
    }
}

/// The shim's function id for a kernel: a hash of its name (FNV-1a).
#[must_use]
pub fn func_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{
      "format": "tandem-trace/1", "job": "t", "class": "inference", "source": "measured",
      "ops": [
        {"op": "copy_h2d", "bytes": 100, "host_gap_ns": 5},
        {"op": "kernel", "name": "k", "grid": [4, 2, 1], "block": [128, 1, 1],
         "blocks_per_sm": 2, "duration_ns": 1000, "stream": 1, "host_gap_ns": 7},
        {"op": "sync", "host_gap_ns": 3}
      ]
    }"#;

    #[test]
    fn parses_writes_and_reparses() {
        let t = Trace::from_json(DOC).unwrap();
        assert_eq!(t.ops.len(), 3);
        let k = t.kernels().next().unwrap();
        assert_eq!((k.blocks(), k.stream, k.blocks_per_sm), (8, 1, 2));
        assert_eq!(t.kernel_ns(), 1000);
        assert_eq!(t.host_ns(), 15);
        let back = Trace::from_json(&t.to_json()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn refuses_what_breaks_the_rules() {
        let cases = [
            (DOC.replace("tandem-trace/1", "tandem-trace/9"), "format"),
            (DOC.replace("measured", "guessed"), "source"),
            (
                DOC.replace("\"duration_ns\": 1000", "\"duration_ns\": 0"),
                "duration_ns must be >= 1",
            ),
            (DOC.replace("[4, 2, 1]", "[4, 0, 1]"), "empty grid"),
            (DOC.replace("\"stream\": 1", "\"stream\": 99"), "stream"),
            (
                DOC.replace(",\n        {\"op\": \"sync\", \"host_gap_ns\": 3}", ""),
                "sync",
            ),
            (
                DOC.replace("\"duration_ns\": 1000", "\"duration_ns\": \"x\""),
                "invalid type",
            ),
        ];
        for (doc, want) in cases {
            let e = Trace::from_json(&doc).expect_err(want);
            assert!(e.0.contains(want), "{want}: {e}");
        }
        // blocks_per_sm 0: not known (a live capture's), for the model to derive.
        assert!(
            Trace::from_json(&DOC.replace("\"blocks_per_sm\": 2", "\"blocks_per_sm\": 0")).is_ok()
        );
        // A training step need not end in a sync.
        let train = DOC
            .replace("\"inference\"", "\"training\"")
            .replace(",\n        {\"op\": \"sync\", \"host_gap_ns\": 3}", "");
        assert!(Trace::from_json(&train).is_ok());
    }
}
