//! The few protocol-buffer wire rules NRI's messages need: varints, and
//! length-delimited fields (strings, bytes, nested messages, map entries).
//! Unknown fields are skipped, so newer runtimes' additions are ignored.

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

/// One field of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5 (skipped content).
    Fixed,
}

fn varint(buf: &[u8], at: &mut usize) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or(DecodeError("truncated varint"))?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError("varint too long"))
}

/// The fields of `buf`, in order: `(field number, value)`.
pub fn fields(buf: &[u8]) -> Result<Vec<(u32, Value<'_>)>, DecodeError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let key = varint(buf, &mut at)?;
        let num = u32::try_from(key >> 3).map_err(|_| DecodeError("field number"))?;
        let v = match key & 7 {
            0 => Value::Varint(varint(buf, &mut at)?),
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                at = at
                    .checked_add(n)
                    .filter(|&e| e <= buf.len())
                    .ok_or(DecodeError("truncated fixed"))?;
                Value::Fixed
            }
            2 => {
                let n =
                    usize::try_from(varint(buf, &mut at)?).map_err(|_| DecodeError("length"))?;
                let end = at
                    .checked_add(n)
                    .filter(|&e| e <= buf.len())
                    .ok_or(DecodeError("truncated field"))?;
                let v = Value::Bytes(&buf[at..end]);
                at = end;
                v
            }
            _ => return Err(DecodeError("unsupported wire type")),
        };
        out.push((num, v));
    }
    Ok(out)
}

/// The string of a length-delimited value (lossy).
#[must_use]
pub fn string(v: Value<'_>) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    }
}

/// A `map<string, string>` entry (key 1, value 2).
pub fn map_entry(v: Value<'_>) -> Result<(String, String), DecodeError> {
    let Value::Bytes(b) = v else {
        return Err(DecodeError("map entry is not length-delimited"));
    };
    let (mut k, mut val) = (String::new(), String::new());
    for (n, f) in fields(b)? {
        match n {
            1 => k = string(f),
            2 => val = string(f),
            _ => {}
        }
    }
    Ok((k, val))
}

/// Builds a message.
#[derive(Default, Debug, Clone)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                return;
            }
            self.0.push(b | 0x80);
        }
    }

    /// A varint field (omitted when 0, as proto3 does).
    pub fn uint(&mut self, num: u32, v: u64) -> &mut Self {
        if v != 0 {
            self.varint(u64::from(num) << 3);
            self.varint(v);
        }
        self
    }

    /// A length-delimited field (written even when empty: repeated elements).
    pub fn bytes(&mut self, num: u32, b: &[u8]) -> &mut Self {
        self.varint((u64::from(num) << 3) | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }

    /// A string field (omitted when empty).
    pub fn string(&mut self, num: u32, s: &str) -> &mut Self {
        if !s.is_empty() {
            self.bytes(num, s.as_bytes());
        }
        self
    }

    /// A `map<string, string>` entry.
    pub fn map_entry(&mut self, num: u32, k: &str, v: &str) -> &mut Self {
        let mut e = Writer::default();
        e.string(1, k).string(2, v);
        self.bytes(num, &e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut w = Writer::default();
        w.string(1, "héllo")
            .uint(2, 300)
            .map_entry(5, "k", "v")
            .bytes(9, b"");
        let f = fields(&w.0).unwrap();
        assert_eq!(string(f[0].1), "héllo");
        assert_eq!(f[1], (2, Value::Varint(300)));
        assert_eq!(map_entry(f[2].1).unwrap(), ("k".into(), "v".into()));
        assert_eq!(f[3], (9, Value::Bytes(b"")));
        for cut in 1..w.0.len() {
            // Every strict prefix that ends inside a field is an error, never a panic.
            let _ = fields(&w.0[..cut]);
        }
        assert!(fields(&[0x0a, 0x05, b'a']).is_err());
        assert!(fields(&[0x0b]).is_err(), "wire type 3 is not supported");
    }
}
