//! A small seeded generator (splitmix64): every random draw of the model
//! comes from one of these, so a run is a function of its seed.

/// splitmix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }

    /// Lognormal with median 1 and the given coefficient of variation
    /// (a multiplicative jitter; `cv = 0` gives exactly 1).
    pub fn jitter(&mut self, cv: f64) -> f64 {
        if cv <= 0.0 {
            return 1.0;
        }
        let sigma = (1.0 + cv * cv).ln().sqrt();
        // Box-Muller.
        let (u1, u2) = (self.unit(), self.unit());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (sigma * z).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_draws_and_sane_moments() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<f64> = (0..20_000).map(|_| a.exp(2.0)).collect();
        let ys: Vec<f64> = (0..20_000).map(|_| b.exp(2.0)).collect();
        assert_eq!(xs, ys);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 2.0).abs() < 0.1, "{mean}");
        let j: Vec<f64> = (0..20_000).map(|_| a.jitter(0.2)).collect();
        let m = j.iter().sum::<f64>() / j.len() as f64;
        let sd = (j.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / j.len() as f64).sqrt();
        assert!((sd / m - 0.2).abs() < 0.02, "cv {}", sd / m);
        assert_eq!(a.jitter(0.0), 1.0);
    }
}
