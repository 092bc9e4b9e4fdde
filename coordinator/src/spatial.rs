//! Scheduler v3's SM reservation, tandemd's side (issue 23 (a)): how many of
//! a GPU's SMs the masked training jobs leave to inference, learnt from the
//! widths of inference's own kernels, as the GPU-sharing model's
//! `tandem_spatial` does (one rule: [`tandem_sched::reserve`]).
//!
//! * A GPU's shape comes from its shims' Device message (`DeviceShape`:
//!   the SM count and one SM's threads, registers, shared memory and block
//!   slots, as `cuDeviceGetAttribute` reports them).
//! * Each LAUNCH or LAUNCH_EX record of an inference client on that GPU
//!   gives a width: its blocks over the blocks an SM holds of its function
//!   (block size from the record, registers and static shared memory from
//!   the function's FuncName, plus the launch's dynamic shared memory), at
//!   most the GPU. Graph launches carry no grid and give none, nor does a
//!   launch drained before its function's FuncName was read (without the
//!   registers its width comes out too narrow), except of a function the
//!   shim could not name, which never sends one.
//! * `R` is the 0.9 quantile of the last 128 widths in whole TPCs, at least
//!   8 SMs and at most `[scheduler] spatial_reserve` of the GPU
//!   ([`tandem_sched::reserve::ReserveRule`]'s defaults, the model's).
//! * tandemd publishes it to each training client it asked the reservation
//!   of, in its control block (`spatial_reserve`, thousandths of the TPCs:
//!   [`permille_for`]), whenever it changes. Until a width is learnt (no
//!   shape, no inference launch seen, or inference that launches only
//!   graphs) the client keeps the configured share, the most.

use tandem_proto::record::{EventKind, Record};
use tandem_proto::wire::{DeviceShape, FuncAttrs};
use tandem_sched::reserve::{blocks_per_sm, width, ReserveRule, SmLimits, Widths};

/// Most SMs a GPU may claim; a shape beyond is ignored (today's largest
/// GPUs have under 200).
pub const MAX_SMS: u32 = 1024;

/// What tandemd learns of one GPU's inference launches.
#[derive(Clone, Debug)]
pub struct GpuWidths {
    limits: SmLimits,
    widths: Widths,
}

impl GpuWidths {
    /// None learnt yet, on a GPU of `shape`, `R` at most `max_share` of it;
    /// `None` for a shape of fewer than two TPCs or more than [`MAX_SMS`]
    /// SMs. A per-SM limit of 0 (not reported) binds nothing.
    #[must_use]
    pub fn new(shape: DeviceShape, max_share: f64) -> Option<GpuWidths> {
        if !(4..=MAX_SMS).contains(&shape.sms) {
            return None;
        }
        Some(GpuWidths {
            limits: SmLimits {
                threads: shape.threads_per_sm,
                regs: shape.regs_per_sm,
                smem: shape.smem_per_sm,
                blocks: shape.blocks_per_sm,
            },
            widths: Widths::new(
                shape.sms,
                ReserveRule {
                    max_reserve_share: max_share,
                    ..ReserveRule::default()
                },
            ),
        })
    }

    /// One record of inference client `client`; `attrs` its function's,
    /// where the client sent them. Only kernel launches count.
    pub fn observe(&mut self, client: u64, r: &Record, attrs: Option<FuncAttrs>) {
        if r.kind != EventKind::LAUNCH.raw() && r.kind != EventKind::LAUNCH_EX.raw() {
            return;
        }
        let blocks = u64::from(r.grid_x) * u64::from(r.grid_y) * u64::from(r.grid_z);
        if blocks == 0 {
            return;
        }
        // The client's claim: 65535^3 does not fit a u32 (two factors do).
        let threads =
            (u32::from(r.block_x) * u32::from(r.block_y)).saturating_mul(u32::from(r.block_z));
        let a = attrs.unwrap_or_default();
        let smem = a.static_smem_bytes.saturating_add(r.shared_mem_bytes);
        let bps = blocks_per_sm(self.limits, threads, a.regs_per_thread, smem);
        self.widths
            .push_from(client, width(blocks, bps, self.widths.sms()));
    }

    /// Take back the widths client `client` gave (it turned out to train);
    /// how many it had.
    pub fn forget(&mut self, client: u64) -> usize {
        self.widths.forget(client)
    }

    /// The GPU's SMs.
    #[must_use]
    pub fn sms(&self) -> u32 {
        self.widths.sms()
    }

    /// Widths held (at most the window).
    #[must_use]
    pub fn seen(&self) -> usize {
        self.widths.len()
    }

    /// The SMs left to inference now; `None` before any width.
    #[must_use]
    pub fn reserve_sms(&self) -> Option<u32> {
        (!self.widths.is_empty()).then(|| self.widths.reserve())
    }

    /// [`Self::reserve_sms`] as the control block's thousandths.
    #[must_use]
    pub fn permille(&self) -> Option<u64> {
        Some(permille_for(self.sms(), self.reserve_sms()?))
    }
}

/// The control block's `spatial_reserve` (thousandths of the TPCs) that
/// makes the shim leave `reserve_sms` SMs, rounded up to whole TPCs, on a
/// GPU of `sms` SMs: `tandem_proto::spatial::reserve_tpcs(sms, p)` gives
/// back that TPC count (below 1000 TPCs, rounding twice cannot move it).
#[must_use]
pub fn permille_for(sms: u32, reserve_sms: u32) -> u64 {
    let tpcs = u64::from(sms / 2).max(1);
    let want = u64::from(reserve_sms.div_ceil(2)).clamp(1, tpcs);
    ((want * 1000 + tpcs / 2) / tpcs).max(1)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tandem_proto::spatial::{reserve_tpcs, MAX_RESERVE_PERMILLE};

    /// An H100's shape, as its shims report it (the registry's tests too).
    pub(crate) const H100: DeviceShape = DeviceShape {
        sms: 132,
        threads_per_sm: 2048,
        regs_per_sm: 65_536,
        smem_per_sm: 233_472,
        blocks_per_sm: 32,
    };

    fn launch(grid: u32, block: u16, dyn_smem: u32) -> Record {
        Record {
            kind: EventKind::LAUNCH.raw(),
            grid_x: grid,
            grid_y: 1,
            grid_z: 1,
            block_x: block,
            block_y: 1,
            block_z: 1,
            shared_mem_bytes: dyn_smem,
            ..Record::default()
        }
    }

    #[test]
    fn every_reserve_round_trips_through_the_control_block() {
        for sms in [8u32, 68, 108, 114, 132, 144, 1000] {
            for r in 1..=sms {
                let p = permille_for(sms, r);
                let tpcs = u64::from(r.div_ceil(2));
                if p <= MAX_RESERVE_PERMILLE {
                    assert_eq!(
                        u64::from(reserve_tpcs(sms, p)),
                        tpcs,
                        "{r} of {sms} SMs: {p}"
                    );
                }
            }
        }
    }

    #[test]
    fn widths_come_from_the_launch_and_its_function() {
        let mut g = GpuWidths::new(H100, 0.25).expect("a shape");
        assert_eq!(g.reserve_sms(), None, "nothing learnt");
        // 40 blocks of 256 threads at 255 registers: one per SM, 40 SMs;
        // the same at 64 registers: four per SM, 10 SMs.
        let wide = FuncAttrs {
            regs_per_thread: 255,
            static_smem_bytes: 0,
        };
        for _ in 0..10 {
            g.observe(1, &launch(40, 256, 0), Some(wide));
        }
        assert_eq!(g.reserve_sms(), Some(34), "40 SMs: the cap, 33 to a TPC");
        let mut g = GpuWidths::new(H100, 0.25).expect("a shape");
        let narrow = FuncAttrs {
            regs_per_thread: 64,
            static_smem_bytes: 0,
        };
        for _ in 0..10 {
            g.observe(1, &launch(40, 256, 0), Some(narrow));
        }
        assert_eq!(g.reserve_sms(), Some(10));
        // Dynamic shared memory counts: 100 KB a block, two per SM, 20 SMs.
        for _ in 0..200 {
            g.observe(1, &launch(40, 256, 100 << 10), Some(narrow));
        }
        assert_eq!(g.reserve_sms(), Some(20));
        assert_eq!(g.seen(), 128);
    }

    #[test]
    fn only_kernel_launches_with_a_grid_count() {
        let mut g = GpuWidths::new(H100, 0.25).expect("a shape");
        g.observe(
            1,
            &Record {
                kind: EventKind::GRAPH_LAUNCH.raw(),
                ..launch(0, 0, 0)
            },
            None,
        );
        g.observe(
            1,
            &Record {
                kind: EventKind::ALLOC.raw(),
                ..launch(1000, 1, 0)
            },
            None,
        );
        assert_eq!(g.seen(), 0);
        g.observe(
            1,
            &Record {
                kind: EventKind::LAUNCH_EX.raw(),
                ..launch(2, 1, 0)
            },
            None,
        );
        assert_eq!(g.reserve_sms(), Some(8), "one SM wide: the minimum");
    }

    #[test]
    fn implausible_shapes_learn_nothing_and_missing_limits_bind_nothing() {
        for sms in [0, 3, MAX_SMS + 1, u32::MAX] {
            assert!(GpuWidths::new(DeviceShape { sms, ..H100 }, 0.25).is_none());
        }
        let mut g = GpuWidths::new(
            DeviceShape {
                sms: 132,
                ..DeviceShape::default()
            },
            0.5,
        )
        .expect("a count is enough");
        // No limits: every block of a one-thread kernel fits one SM.
        g.observe(1, &launch(1000, 1, 1 << 20), None);
        assert_eq!(g.reserve_sms(), Some(8));
    }
}
