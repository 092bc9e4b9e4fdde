//! DRAM bandwidth: what the running kernels demand of it, and how much
//! faster a kernel's memory phases run when it holds fewer SMs than it fills
//! alone on a GPU where part of the SMs saturate DRAM.

use super::Gpu;

/// How much faster a kernel's memory phases run on `held` SMs than on the
/// `alone_sms` it fills alone, on a GPU of `sms` SMs where a share
/// `saturating` of them pull the whole DRAM bandwidth. Alone, its memory
/// phases pull the peak over its `alone_sms` SMs (how its `mem_frac` is
/// defined); each SM can pull at most the peak over `saturating x sms`,
/// and the kernel never more than the peak in all. So the gain is
/// `min(alone_sms / (saturating x sms), alone_sms / held)`, never below 1:
/// exactly 1 at `saturating` 1, or when the kernel has its SMs.
#[must_use]
pub fn dram_gain(saturating: f64, sms: u32, alone_sms: u32, held: u32) -> f64 {
    if held == 0 || held >= alone_sms {
        return 1.0;
    }
    let per_sm = f64::from(alone_sms) / (saturating.clamp(0.01, 1.0) * f64::from(sms));
    per_sm.min(f64::from(alone_sms) / f64::from(held)).max(1.0)
}

impl Gpu {
    /// The DRAM bandwidth the running kernels demand, as a share of the
    /// peak, with kernel `kid` holding `held` SMs at gain `gain`: each pulls
    /// its demand alone in proportion to the SMs it holds of those it holds
    /// alone, times its [`dram_gain`] (exact for a wholly
    /// memory-bound kernel, an over-estimate for one that also computes).
    pub(super) fn dram_demand(&self, kid: usize, held: u32, gain: f64) -> f64 {
        self.kernels
            .iter()
            .enumerate()
            .filter_map(|(i, k)| {
                let k = k.as_ref()?;
                let (h, g) = if i == kid {
                    (held, gain)
                } else {
                    (k.held, k.dram_gain)
                };
                (h > 0).then(|| k.mem_frac * g * f64::from(h) / f64::from(k.alone_sms))
            })
            .sum()
    }
}
