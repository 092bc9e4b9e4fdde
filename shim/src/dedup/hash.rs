//! The content hash of a granule: 128 bits, fast, no dependencies.
//!
//! Only a hint for finding candidates: a merge always compares the bytes
//! (contract 6), so a collision costs a wasted comparison, never corruption.
//! Two independent 64-bit lanes, each a multiply-xorshift over the input's
//! little-endian u64 words (seeded differently), finished with the length.

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;
const K2: u64 = 0x1656_67B1_9E37_79F9;
const K3: u64 = 0xD6E8_FEB8_6659_FD93;

#[inline(always)]
fn mix(mut h: u64, w: u64, k: u64) -> u64 {
    h ^= w.wrapping_mul(k);
    h = h.rotate_left(29).wrapping_mul(K0);
    h ^ (h >> 32)
}

#[inline(always)]
fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(K1);
    h ^= h >> 29;
    h = h.wrapping_mul(K2);
    h ^ (h >> 32)
}

/// 128-bit hash of `bytes`.
#[must_use]
pub fn hash128(bytes: &[u8]) -> [u8; 16] {
    // Four accumulators per lane keep the multiplies independent (pipelined).
    let mut a = [K0, K1, K2, K3];
    let mut b = [K3, K2, K1, K0 ^ 0x5555];
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        for i in 0..4 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&c[i * 8..i * 8 + 8]);
            let w = u64::from_le_bytes(w);
            a[i] = mix(a[i], w, K1);
            b[i] = mix(b[i], w ^ K3, K2);
        }
    }
    let rest = chunks.remainder();
    for (i, c) in rest.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        let w = u64::from_le_bytes(w);
        a[i] = mix(a[i], w, K1);
        b[i] = mix(b[i], w ^ K3, K2);
    }
    let len = bytes.len() as u64;
    let mut ha = len ^ K2;
    let mut hb = len ^ K0;
    for i in 0..4 {
        ha = mix(ha, a[i], K3);
        hb = mix(hb, b[i], K1);
    }
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&finish(ha).to_le_bytes());
    out[8..].copy_from_slice(&finish(hb ^ ha.rotate_left(17)).to_le_bytes());
    out
}

/// Whether every 32-bit word of `bytes` is the same (e.g. never-written zero
/// memory, a fill): such granules are never offered for merging, since
/// identical untouched buffers in two jobs say nothing about being weights.
#[must_use]
pub fn is_uniform(bytes: &[u8]) -> bool {
    let Some(first) = bytes.get(..4) else {
        return true;
    };
    bytes.chunks(4).all(|c| c == &first[..c.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_input_equal_hash_and_one_bit_changes_it() {
        let mut v: Vec<u8> = (0..(2u32 << 20)).map(|i| (i * 7 + 3) as u8).collect();
        let h = hash128(&v);
        assert_eq!(h, hash128(&v.clone()));
        for at in [0, 1, 31, 32, 4095, v.len() - 1] {
            v[at] ^= 1;
            assert_ne!(hash128(&v), h, "bit flip at {at} unseen");
            v[at] ^= 1;
        }
        // swapping two words changes it (position matters)
        v.swap(0, 8);
        assert_ne!(hash128(&v), h);
    }

    #[test]
    fn lengths_and_tails_count() {
        let v = [0u8; 100];
        let mut seen = std::collections::HashSet::new();
        for n in 0..=100 {
            assert!(
                seen.insert(hash128(&v[..n])),
                "zero prefixes of length {n} collide"
            );
        }
    }

    #[test]
    fn uniform_detection() {
        assert!(is_uniform(&[0u8; 64]));
        assert!(is_uniform(&[1, 2, 3, 4, 1, 2, 3, 4, 1, 2]));
        assert!(!is_uniform(&[1, 2, 3, 4, 1, 2, 3, 5]));
        let mut v = vec![0u8; 2 << 20];
        assert!(is_uniform(&v));
        v[2 << 19] = 9;
        assert!(!is_uniform(&v));
    }
}
