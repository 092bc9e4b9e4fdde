//! Scheduler v3's SM reservation (issue 23): while inference is active on a
//! GPU, a training client's launches carry a TPC mask that leaves part of the
//! GPU's SMs to inference, so an inference kernel finds SMs free instead of
//! waiting for training's resident blocks to retire.
//!
//! tandemd turns it on per client in the control block (`[scheduler] spatial
//! = "auto"`, for training clients that joined MPS below normal priority: on
//! a time-sliced GPU the two jobs' kernels never run at once, and a mask
//! would only cost training SMs):
//!
//! * `spatial_reserve` (coordinator): 0, off; else the share of the GPU's
//!   TPCs left to inference, in thousandths ([`reserve_tpcs`] makes a TPC
//!   count of it).
//! * `spatial_min_ns` (coordinator): a launch whose blocks hold their SMs
//!   shorter is not masked ([`block_ns`]: its estimate, the published one or
//!   else the default charge, over its waves at the occupancy its function's
//!   registers and shared memory allow, [`blocks_per_sm`]). MPS client
//!   priority gives a short block's SM to inference's pending blocks when it
//!   retires, so a mask on such a kernel would cost training SMs for its
//!   whole life and buy inference less than one block's wait.
//! * `spatial_standing_ns` (coordinator): 0, the mask only while inference
//!   is active; else a launch whose blocks hold their SMs at least this long
//!   carries it while inference is idle too. tandemd sets it only while an
//!   inference client is on the GPU: launched in inference's idle gap, such
//!   a kernel's resident blocks would otherwise hold every SM when the next
//!   request comes (`[scheduler] spatial_standing_ns`, off by default).
//!
//! The occupancy rules here are the ones tandemd sizes the reservation by
//! (`tandem_sched::reserve`) and the GPU-sharing model runs: one definition.
//!
//! The shim reports what became of it (`spatial_state`, [`SpatialState`])
//! and counts the launches it masked (`masked_launches`): claims, like every
//! counter of the control block's second line.

use core::sync::atomic::Ordering;

use crate::control::ControlBlock;

/// Most of a GPU's TPCs that may be left to inference, in thousandths: a
/// training client always keeps at least half.
pub const MAX_RESERVE_PERMILLE: u64 = 500;

/// What tandemd asks of one training client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spatial {
    /// Share of the GPU's TPCs left to inference while it is active, in
    /// thousandths; 0: no reservation.
    pub reserve_permille: u64,
    /// Launches estimated shorter than this are not masked.
    pub min_ns: u64,
    /// Launches whose blocks hold their SMs at least this long are masked
    /// while inference is idle too; 0: only while it is active.
    pub standing_ns: u64,
}

/// What the shim made of the reservation (`spatial_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpatialState {
    /// Not asked for, or not tried yet (the probe runs at the first launch
    /// that asks).
    Idle,
    /// The driver's launch callback is in place; masked launches go ahead.
    Armed,
    /// The driver offers no launch-callback table.
    NoTable,
    /// The table is there, but subscribing or enabling the callback failed.
    Refused,
    /// The device's SM count could not be read, or is too small to split.
    NoDevice,
    /// A launch descriptor of a layout the shim does not know (its version).
    UnknownDescriptor(u8),
    /// The launch callback came without a descriptor (a short parameter
    /// block, or a NULL one).
    NoDescriptor,
    /// Armed launches saw no descriptor callback on their own thread.
    NoCallback,
    /// Descriptors of a known version (given) never carried the armed
    /// launches' grid and block where the shim reads them.
    Unmatched(u8),
    /// A GPU of a compute capability (its major version) whose descriptors
    /// the shim does not know.
    UnsupportedGpu(u8),
}

impl SpatialState {
    /// The control block's form: the kind in bits 0-7, a descriptor version
    /// in bits 8-15.
    #[must_use]
    pub const fn encode(self) -> u64 {
        match self {
            SpatialState::Idle => 0,
            SpatialState::Armed => 1,
            SpatialState::NoTable => 2,
            SpatialState::Refused => 3,
            SpatialState::NoDevice => 4,
            SpatialState::UnknownDescriptor(v) => 5 | (v as u64) << 8,
            SpatialState::NoDescriptor => 6,
            SpatialState::NoCallback => 7,
            SpatialState::Unmatched(v) => 8 | (v as u64) << 8,
            SpatialState::UnsupportedGpu(v) => 9 | (v as u64) << 8,
        }
    }

    /// Reads the control block's form; garbage reads as [`SpatialState::Idle`].
    #[must_use]
    pub const fn decode(v: u64) -> SpatialState {
        match v & 0xff {
            1 => SpatialState::Armed,
            2 => SpatialState::NoTable,
            3 => SpatialState::Refused,
            4 => SpatialState::NoDevice,
            5 => SpatialState::UnknownDescriptor((v >> 8) as u8),
            6 => SpatialState::NoDescriptor,
            7 => SpatialState::NoCallback,
            8 => SpatialState::Unmatched((v >> 8) as u8),
            9 => SpatialState::UnsupportedGpu((v >> 8) as u8),
            _ => SpatialState::Idle,
        }
    }

    /// A name for stats and logs.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            SpatialState::Idle => "idle",
            SpatialState::Armed => "armed",
            SpatialState::NoTable => "no_callback_table",
            SpatialState::Refused => "callback_refused",
            SpatialState::NoDevice => "no_sm_count",
            SpatialState::UnknownDescriptor(_) => "unknown_descriptor",
            SpatialState::NoDescriptor => "no_descriptor",
            SpatialState::NoCallback => "no_callback_on_thread",
            SpatialState::Unmatched(_) => "descriptor_mismatch",
            SpatialState::UnsupportedGpu(_) => "unsupported_gpu",
        }
    }
}

/// TPCs left to inference on a GPU of `sms` SMs (two per TPC, as on every
/// GPU from Volta on) at `permille` thousandths: rounded to the nearest TPC,
/// at least one, and at most [`MAX_RESERVE_PERMILLE`] of them. 0 when there
/// is nothing to split (fewer than two TPCs) or `permille` is 0.
#[must_use]
pub const fn reserve_tpcs(sms: u32, permille: u64) -> u32 {
    let tpcs = (sms / 2) as u64;
    if tpcs < 2 || permille == 0 {
        return 0;
    }
    let p = if permille > MAX_RESERVE_PERMILLE {
        MAX_RESERVE_PERMILLE
    } else {
        permille
    };
    let r = (tpcs * p + 500) / 1000;
    let max = tpcs * MAX_RESERVE_PERMILLE / 1000;
    (if r < 1 {
        1
    } else if r > max {
        max
    } else {
        r
    }) as u32
}

/// One SM's capacity, as the device reports it
/// (`cuDeviceGetAttribute`: `MAX_THREADS_PER_MULTIPROCESSOR`,
/// `MAX_REGISTERS_PER_MULTIPROCESSOR`, `MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`,
/// `MAX_BLOCKS_PER_MULTIPROCESSOR`). A limit of 0 (not reported) binds
/// nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmLimits {
    /// Resident threads.
    pub threads: u32,
    /// 32-bit registers.
    pub regs: u32,
    /// Shared memory for blocks, bytes.
    pub smem: u32,
    /// Resident blocks.
    pub blocks: u32,
}

/// Blocks of a kernel one SM holds (at least 1): `threads` per block,
/// `regs` per thread and `smem` bytes of shared memory per block (static
/// plus dynamic) on an SM of `sm`. A register count, shared memory or SM
/// limit of 0 (unknown) binds nothing.
#[must_use]
pub fn blocks_per_sm(sm: SmLimits, threads: u32, regs: u32, smem: u32) -> u32 {
    let known = |v: u32| if v == 0 { u32::MAX } else { v };
    let sm = SmLimits {
        threads: known(sm.threads),
        regs: known(sm.regs),
        smem: known(sm.smem),
        blocks: known(sm.blocks),
    };
    let by_threads = sm.threads / threads.max(1);
    // In u64, saturating: tandemd computes this from a client's claims
    // (any `threads` and `regs`), which must not overflow it.
    let warps = u64::from(threads.max(1).div_ceil(32));
    let regs_per_warp = (u64::from(regs).div_ceil(8) * 8 * 32).div_ceil(256) * 256;
    let by_regs = if regs == 0 {
        u32::MAX
    } else {
        // At most sm.regs: fits.
        (u64::from(sm.regs) / regs_per_warp.saturating_mul(warps).max(1)) as u32
    };
    let by_smem = if smem == 0 {
        u32::MAX
    } else {
        sm.smem / smem.saturating_add(1024)
    };
    by_threads.min(by_regs).min(by_smem).min(sm.blocks).max(1)
}

/// The SMs a launch of `blocks` blocks at `blocks_per_sm` fills on a GPU of
/// `sms` SMs: its first wave.
#[must_use]
pub fn width(blocks: u64, blocks_per_sm: u32, sms: u32) -> u32 {
    blocks
        .div_ceil(u64::from(blocks_per_sm.max(1)))
        .min(u64::from(sms)) as u32
}

/// How long one block of a launch holds its SM: its time `est_ns` over its
/// waves (`blocks` at `blocks_per_sm` on `sms` SMs; one wave: the whole
/// time).
#[inline]
#[must_use]
pub fn block_ns(est_ns: u64, blocks: u64, blocks_per_sm: u32, sms: u32) -> u64 {
    let wave = u64::from(sms.max(1)) * u64::from(blocks_per_sm.max(1));
    est_ns / blocks.div_ceil(wave).max(1)
}

impl ControlBlock {
    /// Set the reservation of this client (coordinator; `Default`: off).
    pub fn set_spatial(&self, s: Spatial) {
        self.spatial_min_ns.store(s.min_ns, Ordering::Relaxed);
        self.spatial_standing_ns
            .store(s.standing_ns, Ordering::Relaxed);
        self.spatial_reserve.store(
            s.reserve_permille.min(MAX_RESERVE_PERMILLE),
            Ordering::Relaxed,
        );
    }

    /// The reservation asked of this client (shim: three Relaxed loads).
    #[inline(always)]
    #[must_use]
    pub fn spatial(&self) -> Spatial {
        Spatial {
            reserve_permille: self
                .spatial_reserve
                .load(Ordering::Relaxed)
                .min(MAX_RESERVE_PERMILLE),
            min_ns: self.spatial_min_ns.load(Ordering::Relaxed),
            standing_ns: self.spatial_standing_ns.load(Ordering::Relaxed),
        }
    }

    /// The shim reports what became of the reservation.
    pub fn set_spatial_state(&self, s: SpatialState) {
        self.spatial_state.store(s.encode(), Ordering::Relaxed);
    }

    /// What the shim reports of the reservation (untrusted).
    #[must_use]
    pub fn spatial_state(&self) -> SpatialState {
        SpatialState::decode(self.spatial_state.load(Ordering::Relaxed))
    }

    /// The shim masked one more launch.
    pub fn count_masked(&self) {
        self.masked_launches.fetch_add(1, Ordering::Relaxed);
    }

    /// Launches the shim says it masked (untrusted).
    #[must_use]
    pub fn masked_launches(&self) -> u64 {
        self.masked_launches.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMPERE: SmLimits = SmLimits {
        threads: 2048,
        regs: 65_536,
        smem: 163 * 1024,
        blocks: 32,
    };

    #[test]
    fn occupancy_follows_the_tightest_resource() {
        // A 256-thread GEMM tile at 255 registers: registers bind (one).
        assert_eq!(blocks_per_sm(AMPERE, 256, 255, 0), 1);
        // 128 threads at 168 registers: 65,536 / (5,376 x 4 warps) = 3.
        assert_eq!(blocks_per_sm(AMPERE, 128, 168, 0), 3);
        // Element-wise, 128 threads, 16 registers: threads bind at 16.
        assert_eq!(blocks_per_sm(AMPERE, 128, 16, 0), 16);
        // 80 KB of shared memory and its 1 KB reserve: two fit in 163 KB.
        assert_eq!(blocks_per_sm(AMPERE, 128, 0, 80 * 1024), 2);
        // One-thread blocks: the block slots bind.
        assert_eq!(blocks_per_sm(AMPERE, 1, 0, 0), 32);
        // More than the SM holds still counts one.
        assert_eq!(blocks_per_sm(AMPERE, 1024, 255, 200 * 1024), 1);
        // A limit the device did not report binds nothing: one-thread blocks
        // are then held by the thread slots alone.
        let unknown = SmLimits {
            blocks: 0,
            ..AMPERE
        };
        assert_eq!(blocks_per_sm(unknown, 1, 0, 0), 2048);
    }

    /// tandemd computes occupancy from what a client claims (its FuncName's
    /// registers, its launch records' block sizes): any values give an
    /// answer, at least 1, never an arithmetic overflow (a panic that
    /// aborts tandemd in a debug build, nonsense after wrapping in release).
    #[test]
    fn any_claimed_block_or_register_count_gives_one_block_without_overflow() {
        assert_eq!(blocks_per_sm(AMPERE, 256, u32::MAX, 0), 1);
        assert_eq!(blocks_per_sm(AMPERE, 256, 1 << 27, 0), 1);
        assert_eq!(blocks_per_sm(AMPERE, u32::MAX, 255, 0), 1);
        assert_eq!(blocks_per_sm(AMPERE, u32::MAX, u32::MAX, u32::MAX), 1);
        let unknown = SmLimits {
            threads: 0,
            regs: 0,
            smem: 0,
            blocks: 0,
        };
        assert_eq!(blocks_per_sm(unknown, u32::MAX, u32::MAX, u32::MAX), 1);
    }

    #[test]
    fn a_width_is_the_first_wave_at_most_the_gpu() {
        assert_eq!(width(8, 32, 132), 1);
        assert_eq!(width(33, 32, 132), 2);
        assert_eq!(width(100_000, 2, 132), 132);
        assert_eq!(width(5, 0, 132), 5, "0 per SM counts as 1");
    }

    #[test]
    fn a_block_holds_its_sm_for_the_kernel_over_its_waves() {
        // One wave: the whole kernel.
        assert_eq!(block_ns(1_000_000, 100, 1, 132), 1_000_000);
        // 132 x 4 a wave: 10,000 blocks are 19 waves.
        assert_eq!(block_ns(1_900_000, 10_000, 4, 132), 100_000);
        // Zeros count as one (no division by zero).
        assert_eq!(block_ns(500, 0, 0, 0), 500);
    }

    use crate::ring::control_block;
    use crate::{Consumer, Mapping, RingLayout};

    #[test]
    fn the_reserve_is_a_rounded_share_of_the_tpcs_within_bounds() {
        assert_eq!(
            reserve_tpcs(132, 250),
            17,
            "H100 SXM: 66 TPCs, 16.5 rounds up"
        );
        assert_eq!(reserve_tpcs(108, 250), 14, "A100: 54 TPCs, 13.5 rounds up");
        assert_eq!(reserve_tpcs(132, 1), 1, "at least one TPC");
        assert_eq!(reserve_tpcs(132, 900), 33, "at most half");
        assert_eq!(reserve_tpcs(132, 0), 0, "off");
        assert_eq!(reserve_tpcs(2, 250), 0, "one TPC cannot be split");
        assert_eq!(reserve_tpcs(4, 250), 1);
    }

    #[test]
    fn states_round_trip_and_garbage_reads_idle() {
        for s in [
            SpatialState::Idle,
            SpatialState::Armed,
            SpatialState::NoTable,
            SpatialState::Refused,
            SpatialState::NoDevice,
            SpatialState::UnknownDescriptor(0x06),
            SpatialState::UnknownDescriptor(0x51),
            SpatialState::NoDescriptor,
            SpatialState::NoCallback,
            SpatialState::Unmatched(0x40),
            SpatialState::UnsupportedGpu(10),
        ] {
            assert_eq!(SpatialState::decode(s.encode()), s);
        }
        assert_eq!(SpatialState::decode(0xee), SpatialState::Idle);
    }

    #[test]
    fn the_block_carries_the_request_and_the_report() {
        let layout = RingLayout::new(16).unwrap();
        let m = Mapping::anonymous_shared(layout.region_len()).unwrap();
        let _c = Consumer::init(&m, layout, 3).unwrap();
        let cb = control_block(&m, layout).unwrap();
        assert_eq!(cb.spatial(), Spatial::default(), "fresh: off");
        assert_eq!(cb.spatial_state(), SpatialState::Idle);
        cb.set_spatial(Spatial {
            reserve_permille: 250,
            min_ns: 100_000,
            standing_ns: 500_000,
        });
        assert_eq!(cb.spatial().reserve_permille, 250);
        assert_eq!(cb.spatial().min_ns, 100_000);
        assert_eq!(cb.spatial().standing_ns, 500_000);
        cb.spatial_reserve.store(9_999, Ordering::Relaxed);
        assert_eq!(
            cb.spatial().reserve_permille,
            MAX_RESERVE_PERMILLE,
            "a wild value is capped"
        );
        cb.set_spatial_state(SpatialState::UnknownDescriptor(6));
        assert_eq!(cb.spatial_state(), SpatialState::UnknownDescriptor(6));
        cb.count_masked();
        cb.count_masked();
        assert_eq!(cb.masked_launches(), 2);
        cb.init(3);
        assert_eq!(cb.spatial(), Spatial::default(), "init clears it");
        assert_eq!(
            (cb.spatial_state(), cb.masked_launches()),
            (SpatialState::Idle, 0)
        );
    }
}
