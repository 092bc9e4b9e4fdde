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
//! * `spatial_min_ns` (coordinator): a launch whose estimate (the published
//!   one, else the default charge) is shorter is not masked. A block holds
//!   its SM at most as long as its kernel runs, and MPS client priority gives
//!   a short block's SM to inference's pending blocks when it retires, so a
//!   mask on such a kernel would cost training SMs for nothing.
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

impl ControlBlock {
    /// Set the reservation of this client (coordinator; `Default`: off).
    pub fn set_spatial(&self, s: Spatial) {
        self.spatial_min_ns.store(s.min_ns, Ordering::Relaxed);
        self.spatial_reserve.store(
            s.reserve_permille.min(MAX_RESERVE_PERMILLE),
            Ordering::Relaxed,
        );
    }

    /// The reservation asked of this client (shim: two Relaxed loads).
    #[inline(always)]
    #[must_use]
    pub fn spatial(&self) -> Spatial {
        Spatial {
            reserve_permille: self
                .spatial_reserve
                .load(Ordering::Relaxed)
                .min(MAX_RESERVE_PERMILLE),
            min_ns: self.spatial_min_ns.load(Ordering::Relaxed),
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
        });
        assert_eq!(cb.spatial().reserve_permille, 250);
        assert_eq!(cb.spatial().min_ns, 100_000);
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
