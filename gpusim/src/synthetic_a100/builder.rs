//! The trace builder: a job's kernels as launches of a family with a
//! duration from their FLOPs and bytes at the fitted efficiencies, its
//! copies and syncs, each after its host gap.

use super::device::{
    occupancy, Family, A100_FP32_TFLOPS, ATTN_F32_EFF, ELT, FLASH_F16, FOREACH, GEMV, HGEMM,
    MEMEFF_F32, ORT_DECODE_EFF, ORT_ELT, ROWS, SGEMM, SGEMM_EFF, SGEMM_SMALL,
};
use crate::params::Params;
use crate::trace::{JobClass, Kernel, Op, Trace, FORMAT};

/// A job's trace under construction: its ops in issue order.
pub(super) struct B<'a> {
    pub(super) p: &'a Params,
    pub(super) ops: Vec<Op>,
}

impl B<'_> {
    pub(super) fn new(p: &Params) -> B<'_> {
        B { p, ops: Vec::new() }
    }

    pub(super) fn sms(&self) -> u64 {
        u64::from(self.p.gpu.sms)
    }

    pub(super) fn mem_ns(&self, bytes: f64) -> f64 {
        bytes / (self.p.gpu.dram_bytes_per_ns * self.p.mem_eff)
    }

    /// One launch of family `f`, `blocks` blocks, `ns` of work (the floor is added).
    pub(super) fn launch(
        &mut self,
        name: &str,
        f: Family,
        blocks: u64,
        ns: f64,
        bytes: f64,
        gap: u64,
    ) {
        let gx = u32::try_from(blocks.max(1)).unwrap_or(u32::MAX);
        self.ops.push(Op::Kernel(Kernel {
            name: name.to_string(),
            grid: [gx, 1, 1],
            block: [f.threads, 1, 1],
            blocks_per_sm: occupancy(f, self.p.gpu.sm),
            duration_ns: (ns + self.p.kernel_floor_ns as f64).round() as u64,
            sm_share: 1.0,
            regs_per_thread: f.regs,
            smem_per_block: f.smem,
            dram_bytes: bytes.round() as u64,
            graph: 0,
            stream: 0,
            host_gap_ns: gap,
        }));
    }

    /// A GEMM `m x n x k` with `es`-byte elements on tiles of family `big`
    /// (128 x 128) or `small` (64 x 64, narrow shapes), each tile at `eff` of
    /// the per-SM peak `sm_flop_per_ns`; split along `k` when the tiles would
    /// not fill the GPU and `k` is long. `c_read`: the output is read too
    /// (beta = 1).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm_on(
        &mut self,
        name: &str,
        (m, n, k): (u64, u64, u64),
        (big, small): (Family, Family),
        sm_flop_per_ns: f64,
        eff: f64,
        es: f64,
        c_read: bool,
        gap: u64,
    ) {
        let sms = self.sms();
        let (t, f, e) = if m >= 128 && n >= 128 && m.div_ceil(128) * n.div_ceil(128) >= sms / 2 {
            (128, big, eff)
        } else {
            (64, small, eff * 0.7)
        };
        // Each tile family is its own function, named for its tile as
        // cuBLAS names its kernels: one name with two footprints would be
        // one function to the shim (its id is the name's), which captures
        // one footprint for both.
        let name = if t == 64 {
            format!("{name}_64x64")
        } else {
            name.to_string()
        };
        let name = name.as_str();
        let tiles = m.div_ceil(t) * n.div_ceil(t);
        let split = if tiles < sms && k >= 512 {
            sms.div_ceil(tiles).min(k / 256).max(1)
        } else {
            1
        };
        let blocks = tiles * split;
        let bps = u64::from(occupancy(f, self.p.gpu.sm));
        // Blocks that share an SM share its throughput: as many as the grid
        // puts on one SM (the block scheduler spreads a small grid one block
        // per SM), at most its occupancy.
        let sharing = bps.min(blocks.div_ceil(sms)).max(1);
        let tile_flop = 2.0 * (t * t) as f64 * (k as f64 / split as f64);
        let tile_ns = tile_flop * sharing as f64 / (sm_flop_per_ns * e);
        let waves = blocks.div_ceil(sms * bps);
        let c = if c_read { 2.0 } else { 1.0 };
        let bytes = es * ((m * k + k * n) as f64 + c * (m * n) as f64);
        let ns = (waves as f64 * tile_ns).max(self.mem_ns(bytes));
        self.launch(name, f, blocks, ns, bytes, gap);
    }

    /// An fp32 SIMT GEMM (cuBLAS, no TF32).
    pub(super) fn sgemm(&mut self, name: &str, m: u64, n: u64, k: u64, gap: u64) {
        let per_sm = A100_FP32_TFLOPS * 1e3 / f64::from(self.p.gpu.sms);
        self.gemm_on(
            name,
            (m, n, k),
            (SGEMM, SGEMM_SMALL),
            per_sm,
            SGEMM_EFF,
            4.0,
            false,
            gap,
        );
    }

    /// An fp32 SIMT GEMM accumulating into its output (beta = 1).
    pub(super) fn sgemm_acc(&mut self, name: &str, m: u64, n: u64, k: u64, gap: u64) {
        let per_sm = A100_FP32_TFLOPS * 1e3 / f64::from(self.p.gpu.sms);
        self.gemm_on(
            name,
            (m, n, k),
            (SGEMM, SGEMM_SMALL),
            per_sm,
            SGEMM_EFF,
            4.0,
            true,
            gap,
        );
    }

    /// An fp16 tensor-core GEMM (ORT).
    pub(super) fn hgemm(&mut self, name: &str, m: u64, n: u64, k: u64, gap: u64) {
        let per_sm = self.p.sm_flop_per_ns;
        let eff = self.p.gemm_eff;
        self.gemm_on(
            name,
            (m, n, k),
            (HGEMM, HGEMM),
            per_sm,
            eff,
            2.0,
            false,
            gap,
        );
    }

    /// An fp16 GEMV-like GEMM with a few rows (`m` <= 32): reads the
    /// `k x n` weights once at [`ORT_DECODE_EFF`] of DRAM bandwidth.
    pub(super) fn gemv(&mut self, name: &str, m: u64, n: u64, k: u64, gap: u64) {
        let bytes = 2.0 * (k * n + m * k + m * n) as f64;
        let ns = bytes / (self.p.gpu.dram_bytes_per_ns * ORT_DECODE_EFF);
        self.launch(name, GEMV, n.div_ceil(32), ns, bytes, gap);
    }

    /// An element-wise kernel of family `f` (`per_block` elements a block)
    /// over `elems` elements moving `bytes_per` bytes each.
    pub(super) fn elt_on(
        &mut self,
        name: &str,
        f: Family,
        per_block: u64,
        elems: u64,
        bytes_per: f64,
        gap: u64,
    ) {
        let bytes = elems as f64 * bytes_per;
        let ns = self.mem_ns(bytes);
        self.launch(name, f, elems.div_ceil(per_block), ns, bytes, gap);
    }

    /// PyTorch element-wise.
    pub(super) fn elt(&mut self, name: &str, elems: u64, bytes_per: f64, gap: u64) {
        self.elt_on(name, ELT, 512, elems, bytes_per, gap);
    }

    /// ORT element-wise.
    pub(super) fn ort_elt(&mut self, name: &str, elems: u64, bytes_per: f64, gap: u64) {
        self.elt_on(name, ORT_ELT, 1024, elems, bytes_per, gap);
    }

    /// One block per row: `rows` rows of `elems` elements, `bytes_per` each.
    pub(super) fn rows(&mut self, name: &str, rows: u64, elems: u64, bytes_per: f64, gap: u64) {
        let bytes = (rows * elems) as f64 * bytes_per;
        let ns = self.mem_ns(bytes);
        self.launch(name, ROWS, rows, ns, bytes, gap);
    }

    /// Attention over `batch * heads` pairs of `sq` queries and `sk` keys of
    /// head dimension `dh`: `flop_mult` x 2 x sq x sk x dh flops a pair
    /// (2 forward: QK and PV), one block per 64 (fp32) or 128 (fp16) queries.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention(
        &mut self,
        name: &str,
        f: Family,
        (bh, sq, sk, dh): (u64, u64, u64, u64),
        flop_mult: f64,
        per_sm_flop: f64,
        es: f64,
        gap: u64,
    ) {
        let q_tile = if f == FLASH_F16 { 128 } else { 64 };
        let blocks = bh * sq.div_ceil(q_tile);
        let flop = flop_mult * 2.0 * (bh * sq * sk * dh) as f64;
        let occ = u64::from(occupancy(f, self.p.gpu.sm));
        let active = blocks.min(self.sms() * occ) as f64;
        let sharing = occ.min(blocks.div_ceil(self.sms())).max(1);
        let per_block_rate = per_sm_flop / sharing as f64;
        let bytes = es * (bh * (2 * sq + 2 * sk) * dh) as f64;
        let ns = (flop / (per_block_rate * active)).max(self.mem_ns(bytes));
        self.launch(name, f, blocks, ns, bytes, gap);
    }

    /// fp32 memory-efficient attention (PyTorch SDPA).
    pub(super) fn attn_f32(
        &mut self,
        name: &str,
        shape: (u64, u64, u64, u64),
        flop_mult: f64,
        gap: u64,
    ) {
        let per_sm = A100_FP32_TFLOPS * 1e3 / f64::from(self.p.gpu.sms) * ATTN_F32_EFF;
        self.attention(name, MEMEFF_F32, shape, flop_mult, per_sm, 4.0, gap);
    }

    /// A `foreach` op over `numel` fp32 elements in `tensors` tensors with
    /// `lists` tensor lists, moving `bytes_per` bytes an element: as many
    /// `multi_tensor_apply` launches as its limits need.
    pub(super) fn foreach(
        &mut self,
        name: &str,
        numel: u64,
        tensors: u64,
        lists: usize,
        bytes_per: f64,
        gap: u64,
    ) {
        const MAX_TENSORS: [u64; 5] = [110, 64, 48, 36, 30];
        const CHUNK: u64 = 65_536;
        let chunks = numel.div_ceil(CHUNK) + tensors / 2;
        let launches = chunks
            .div_ceil(320)
            .max(tensors.div_ceil(MAX_TENSORS[lists.clamp(1, 5) - 1]))
            .max(1);
        for i in 0..launches {
            let g = if i == 0 { gap } else { 0 };
            let share = numel / launches;
            let blocks = chunks.div_ceil(launches);
            let bytes = share as f64 * bytes_per;
            let ns = self.mem_ns(bytes);
            self.launch(name, FOREACH, blocks, ns, bytes, g);
        }
    }

    pub(super) fn copy(&mut self, bytes: u64, d2h: bool, gap: u64) {
        self.ops.push(Op::copy(bytes, d2h, gap));
    }

    pub(super) fn sync(&mut self, gap: u64) {
        self.ops.push(Op::Sync { host_gap_ns: gap });
    }

    /// Adds `ns` of CPU time before the first op (data loading, Python).
    pub(super) fn prepend_gap(&mut self, ns: u64) {
        match self.ops.first_mut() {
            Some(Op::Kernel(k)) => k.host_gap_ns += ns,
            Some(Op::CopyH2d { host_gap_ns, .. } | Op::CopyD2h { host_gap_ns, .. })
            | Some(Op::Sync { host_gap_ns }) => *host_gap_ns += ns,
            None => {}
        }
    }

    pub(super) fn trace(self, job: &str, class: JobClass, notes: &str) -> Trace {
        Trace {
            format: FORMAT.into(),
            job: job.into(),
            class,
            source: "synthetic".into(),
            device: "A100 40GB (108 SMs, 1555 GB/s), synthetic".into(),
            notes: notes.into(),
            ops: self.ops,
        }
    }
}
