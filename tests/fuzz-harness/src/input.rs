//! A cursor over the fuzzer's bytes: short reads are padded with zeros, so
//! every input is a valid program of operations.

/// The fuzzer's bytes, consumed front to back.
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    #[must_use]
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// The next byte, `None` at the end (the end of the program).
    pub fn op(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        self.op().unwrap_or(0)
    }

    /// The next `N` bytes, zero-padded.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let n = N.min(self.data.len());
        a[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        a
    }

    /// The next little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// The next little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// The next little-endian u64.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// Up to `max` bytes, the count taken from the next byte.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = usize::from(self.u8()).min(max).min(self.data.len());
        let (b, rest) = self.data.split_at(n);
        self.data = rest;
        b
    }

    /// Everything left.
    #[must_use]
    pub fn rest(self) -> &'a [u8] {
        self.data
    }
}
