//! The fixed-size ring record: one event seen by the shim.
//!
//! A [`Record`] is exactly 64 bytes (one cache line), `#[repr(C)]`, made only of
//! unsigned integers with no padding, so every bit pattern is a valid value:
//! copying one out of untrusted shared memory can never produce an invalid Rust
//! value. Meaning is applied afterwards by checked decodes such as
//! [`Record::kind`].
//!
//! | offset | size | field              | unit / meaning |
//! |-------:|-----:|--------------------|----------------|
//! | 0      | 8    | `ts_ns`            | ns since `CLOCK_MONOTONIC` epoch (boot), taken by the shim |
//! | 8      | 2    | `kind`             | [`EventKind`] raw value |
//! | 10     | 2    | `flags`            | `FLAG_*` bits |
//! | 12     | 4    | `shared_mem_bytes` | dynamic shared memory per block, bytes (launches) |
//! | 16     | 8    | `stream`           | `CUstream` handle value; 0 = legacy default stream |
//! | 24     | 8    | `func_id`          | stable function id (launches), graph-exec id (graph launch), request tag (request events), mark sequence number (mark events); else 0 |
//! | 32     | 8    | `bytes`            | bytes allocated / copied (alloc, H2D copy), launch counter (mark); else 0 |
//! | 40     | 8    | `addr`             | device address (alloc result, free argument, copy destination); else 0 |
//! | 48     | 4    | `grid_x`           | grid dimension x, blocks |
//! | 52     | 2    | `grid_y`           | grid dimension y, blocks (saturated at 65535) |
//! | 54     | 2    | `grid_z`           | grid dimension z, blocks (saturated at 65535) |
//! | 56     | 2    | `block_x`          | block dimension x, threads (saturated at 65535) |
//! | 58     | 2    | `block_y`          | block dimension y, threads (saturated at 65535) |
//! | 60     | 2    | `block_z`          | block dimension z, threads (saturated at 65535) |
//! | 62     | 2    | `reserved`         | written as 0, ignored by readers |
//!
//! The narrow dimension fields follow CUDA's hardware limits (grid y/z ≤ 65535,
//! block dims ≤ 1024); a launch that exceeds them fails in the driver anyway.
//! [`Record::set_dims`] saturates and sets [`FLAG_DIMS_SATURATED`] if it ever
//! has to.

use core::fmt;
use core::mem::{align_of, offset_of, size_of};

use crate::error::{Error, Result};

/// A kind of event, stored in a record as a raw `u16`.
///
/// This is a transparent newtype, not a Rust `enum`: a record read from
/// untrusted memory may hold any `u16`, and only [`EventKind::from_raw`] (or
/// [`Record::kind`]) turns one into a known kind. Zero is deliberately not a
/// valid kind, so a zero-filled slot never decodes as an event.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct EventKind(u16);

impl EventKind {
    /// `cuLaunchKernel` (and its `_ptsz` form).
    pub const LAUNCH: EventKind = EventKind(1);
    /// `cuLaunchKernelEx` (and its `_ptsz` form); cooperative launches set [`FLAG_COOPERATIVE`].
    pub const LAUNCH_EX: EventKind = EventKind(2);
    /// `cuGraphLaunch`: `func_id` holds a stable id of the graph exec.
    pub const GRAPH_LAUNCH: EventKind = EventKind(3);
    /// Device allocation: `bytes` requested, `addr` returned; with
    /// [`FLAG_VMM_HANDLE`], `cuMemCreate` of `bytes` of device memory and
    /// `addr` the physical allocation's handle.
    pub const ALLOC: EventKind = EventKind(4);
    /// Device free: `addr` freed (`bytes` 0 when unknown); with
    /// [`FLAG_VMM_HANDLE`], `cuMemRelease` of the handle `addr`.
    pub const FREE: EventKind = EventKind(5);
    /// Host-to-device copy: `bytes` copied to `addr`; [`FLAG_ASYNC`] for the async forms.
    pub const COPY_H2D: EventKind = EventKind(6);
    /// A synchronisation call begins (stream, event or context: [`FLAG_CONTEXT_SYNC`]).
    pub const SYNC_BEGIN: EventKind = EventKind(7);
    /// The matching synchronisation call returned.
    pub const SYNC_END: EventKind = EventKind(8);
    /// An inference request begins (explicit API); `func_id` is an optional tag.
    pub const REQUEST_BEGIN: EventKind = EventKind(9);
    /// An inference request ends (explicit API); `func_id` is an optional tag.
    pub const REQUEST_END: EventKind = EventKind(10);
    /// A completion mark: the shim recorded a driver event on `stream` right
    /// after the launches it had made so far; `func_id` is the mark's
    /// sequence number (per session, from 1, increasing), `bytes` the
    /// session's `launches` counter at the mark.
    pub const MARK: EventKind = EventKind(11);
    /// The GPU reached mark `func_id`: every launch the client made before
    /// that mark, on that mark's `stream`, had completed by `ts_ns` (the time
    /// the shim saw the event complete; it polls, so the GPU got there a
    /// little earlier). With [`FLAG_TIMED`], `bytes` is the GPU time in ns
    /// of the one launch just before the mark (a sampled launch the shim
    /// bracketed with events, less the host time between its start event's
    /// completion and its kernel's start where the shim knows it); else 0.
    pub const MARK_DONE: EventKind = EventKind(12);

    /// Every known kind, in raw-value order.
    pub const ALL: [EventKind; 12] = [
        Self::LAUNCH,
        Self::LAUNCH_EX,
        Self::GRAPH_LAUNCH,
        Self::ALLOC,
        Self::FREE,
        Self::COPY_H2D,
        Self::SYNC_BEGIN,
        Self::SYNC_END,
        Self::REQUEST_BEGIN,
        Self::REQUEST_END,
        Self::MARK,
        Self::MARK_DONE,
    ];

    /// Checked decode: `Some` only for a kind this build knows.
    #[inline]
    #[must_use]
    pub const fn from_raw(raw: u16) -> Option<EventKind> {
        if raw >= 1 && raw <= Self::ALL.len() as u16 {
            Some(EventKind(raw))
        } else {
            None
        }
    }

    /// The raw value as stored in a record.
    #[inline]
    #[must_use]
    pub const fn raw(self) -> u16 {
        self.0
    }

    /// Stable lower-case name (`"launch"`, `"launch_ex"`, ...), also used for
    /// the C constant names (`TANDEM_EVENT_LAUNCH`, ...).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self.0 {
            1 => "launch",
            2 => "launch_ex",
            3 => "graph_launch",
            4 => "alloc",
            5 => "free",
            6 => "copy_h2d",
            7 => "sync_begin",
            8 => "sync_end",
            9 => "request_begin",
            10 => "request_end",
            11 => "mark",
            12 => "mark_done",
            _ => "unknown",
        }
    }

    /// Whether this kind is a kernel launch of any form (counts as GPU work).
    #[must_use]
    pub const fn is_launch(self) -> bool {
        matches!(self.0, 1..=3)
    }
}

impl fmt::Debug for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EventKind({}: {})", self.0, self.name())
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Record flag: cooperative launch (`cuLaunchCooperativeKernel` or the
/// cooperative attribute of `cuLaunchKernelEx`).
pub const FLAG_COOPERATIVE: u16 = 1 << 0;
/// Record flag: the call was a per-thread-default-stream variant (`_ptsz`/`_ptds`).
pub const FLAG_PER_THREAD_STREAM: u16 = 1 << 1;
/// Record flag: the asynchronous form of a copy.
pub const FLAG_ASYNC: u16 = 1 << 2;
/// Record flag: a context-wide synchronisation (not a single stream or event).
pub const FLAG_CONTEXT_SYNC: u16 = 1 << 3;
/// Record flag: a grid or block dimension did not fit its field and was saturated.
pub const FLAG_DIMS_SATURATED: u16 = 1 << 4;
/// Record flag (ALLOC / FREE): device memory the program manages itself
/// through the VMM API (`cuMemCreate` / `cuMemRelease`: PyTorch's expandable
/// segments, JAX's allocator); `addr` is the physical allocation's handle, a
/// key of its own, never a device address.
pub const FLAG_VMM_HANDLE: u16 = 1 << 5;
/// Record flag (MARK_DONE): the mark timed the one launch before it on the
/// GPU, and `bytes` is that kernel's duration in ns (`cuEventElapsedTime`
/// between an event recorded just before the launch and the mark's, after
/// it; the driver's resolution is about half a microsecond).
pub const FLAG_TIMED: u16 = 1 << 6;

/// All defined flag bits, with their C names (without the `TANDEM_FLAG_` prefix).
pub const FLAGS: [(&str, u16); 7] = [
    ("COOPERATIVE", FLAG_COOPERATIVE),
    ("PER_THREAD_STREAM", FLAG_PER_THREAD_STREAM),
    ("ASYNC", FLAG_ASYNC),
    ("CONTEXT_SYNC", FLAG_CONTEXT_SYNC),
    ("DIMS_SATURATED", FLAG_DIMS_SATURATED),
    ("VMM_HANDLE", FLAG_VMM_HANDLE),
    ("TIMED", FLAG_TIMED),
];

/// One ring record. See the [module docs](self) for the layout table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, align(8))]
pub struct Record {
    /// Nanoseconds on `CLOCK_MONOTONIC` (see [`monotonic_ns`]).
    pub ts_ns: u64,
    /// Raw [`EventKind`]; decode with [`Record::kind`].
    pub kind: u16,
    /// `FLAG_*` bits.
    pub flags: u16,
    /// Dynamic shared memory per block in bytes (launches); else 0.
    pub shared_mem_bytes: u32,
    /// `CUstream` handle value; 0 is the legacy default stream.
    pub stream: u64,
    /// Stable function id (launches), graph-exec id (graph launch), request
    /// tag (request events); else 0.
    pub func_id: u64,
    /// Byte count (alloc, H2D copy); else 0.
    pub bytes: u64,
    /// Device address (alloc result, free argument, copy destination); else 0.
    pub addr: u64,
    /// Grid dimension x, in blocks.
    pub grid_x: u32,
    /// Grid dimension y, in blocks (saturated).
    pub grid_y: u16,
    /// Grid dimension z, in blocks (saturated).
    pub grid_z: u16,
    /// Block dimension x, in threads (saturated).
    pub block_x: u16,
    /// Block dimension y, in threads (saturated).
    pub block_y: u16,
    /// Block dimension z, in threads (saturated).
    pub block_z: u16,
    /// Written as 0; readers ignore it.
    pub reserved: u16,
}

/// Size of a [`Record`] in bytes.
pub const RECORD_SIZE: usize = 64;

// Layout asserts: the C mirror and the ring depend on these exact numbers.
const _: () = {
    assert!(size_of::<Record>() == RECORD_SIZE);
    assert!(align_of::<Record>() == 8);
    assert!(offset_of!(Record, ts_ns) == 0);
    assert!(offset_of!(Record, kind) == 8);
    assert!(offset_of!(Record, flags) == 10);
    assert!(offset_of!(Record, shared_mem_bytes) == 12);
    assert!(offset_of!(Record, stream) == 16);
    assert!(offset_of!(Record, func_id) == 24);
    assert!(offset_of!(Record, bytes) == 32);
    assert!(offset_of!(Record, addr) == 40);
    assert!(offset_of!(Record, grid_x) == 48);
    assert!(offset_of!(Record, grid_y) == 52);
    assert!(offset_of!(Record, grid_z) == 54);
    assert!(offset_of!(Record, block_x) == 56);
    assert!(offset_of!(Record, block_y) == 58);
    assert!(offset_of!(Record, block_z) == 60);
    assert!(offset_of!(Record, reserved) == 62);
    // The fields above sum to 64 bytes, so there is no padding: every byte of a
    // Record is initialised and every bit pattern is valid. `to_words` relies on it.
    assert!(8 + 2 + 2 + 4 + 8 + 8 + 8 + 8 + 4 + 2 + 2 + 2 + 2 + 2 + 2 == RECORD_SIZE);
};

/// Words per record when copied with 64-bit atomic accesses.
pub(crate) const RECORD_WORDS: usize = RECORD_SIZE / 8;

impl Record {
    /// An all-zero record (kind 0 is invalid: a zeroed record never decodes as an event).
    pub const ZERO: Record = Record {
        ts_ns: 0,
        kind: 0,
        flags: 0,
        shared_mem_bytes: 0,
        stream: 0,
        func_id: 0,
        bytes: 0,
        addr: 0,
        grid_x: 0,
        grid_y: 0,
        grid_z: 0,
        block_x: 0,
        block_y: 0,
        block_z: 0,
        reserved: 0,
    };

    /// A record of `kind` at time `ts_ns`, every other field zero.
    #[inline]
    #[must_use]
    pub const fn new(kind: EventKind, ts_ns: u64) -> Record {
        Record {
            ts_ns,
            kind: kind.raw(),
            ..Record::ZERO
        }
    }

    /// Checked decode of [`Record::kind`].
    #[inline]
    pub fn kind(&self) -> Result<EventKind> {
        EventKind::from_raw(self.kind).ok_or(Error::UnknownEventKind { raw: self.kind })
    }

    /// Store launch dimensions, saturating the narrow fields and setting
    /// [`FLAG_DIMS_SATURATED`] if any value did not fit.
    #[inline]
    pub fn set_dims(&mut self, grid: [u32; 3], block: [u32; 3]) {
        #[inline]
        fn narrow(v: u32, saturated: &mut bool) -> u16 {
            if v > u32::from(u16::MAX) {
                *saturated = true;
                u16::MAX
            } else {
                v as u16
            }
        }
        let mut sat = false;
        self.grid_x = grid[0];
        self.grid_y = narrow(grid[1], &mut sat);
        self.grid_z = narrow(grid[2], &mut sat);
        self.block_x = narrow(block[0], &mut sat);
        self.block_y = narrow(block[1], &mut sat);
        self.block_z = narrow(block[2], &mut sat);
        if sat {
            self.flags |= FLAG_DIMS_SATURATED;
        }
    }

    /// Total threads launched (`grid * block`, saturating), for launch records.
    #[must_use]
    pub fn threads(&self) -> u64 {
        let blocks = u64::from(self.grid_x)
            .saturating_mul(u64::from(self.grid_y))
            .saturating_mul(u64::from(self.grid_z));
        let per_block = u64::from(self.block_x) * u64::from(self.block_y) * u64::from(self.block_z);
        blocks.saturating_mul(per_block)
    }

    /// The record as eight native-endian words (for the ring's atomic copy).
    #[inline]
    pub(crate) fn to_words(self) -> [u64; RECORD_WORDS] {
        // SAFETY: `Record` is 64 bytes of integer fields with no padding (asserted
        // above), so all its bytes are initialised and it has the size of
        // `[u64; 8]`; transmute reinterprets the bytes.
        unsafe { core::mem::transmute::<Record, [u64; RECORD_WORDS]>(self) }
    }

    /// The record from eight native-endian words. Any words give a valid record.
    #[inline]
    pub(crate) fn from_words(words: [u64; RECORD_WORDS]) -> Record {
        // SAFETY: same size; every field of `Record` is an integer, so every bit
        // pattern is a valid `Record`.
        unsafe { core::mem::transmute::<[u64; RECORD_WORDS], Record>(words) }
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`: the clock every record timestamp uses.
///
/// Served by the vDSO on Linux (no system call). Note: processes in different
/// time namespaces see different `CLOCK_MONOTONIC` offsets; the coordinator
/// should compare a client's timestamps with each other, not with its own clock.
#[inline]
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kind_checked_decode() {
        assert_eq!(EventKind::from_raw(0), None);
        assert_eq!(EventKind::from_raw(13), None);
        assert_eq!(EventKind::from_raw(u16::MAX), None);
        for (i, k) in EventKind::ALL.iter().enumerate() {
            assert_eq!(k.raw() as usize, i + 1);
            assert_eq!(EventKind::from_raw(k.raw()), Some(*k));
            assert_ne!(k.name(), "unknown");
        }
        let mut r = Record::new(EventKind::GRAPH_LAUNCH, 5);
        assert_eq!(r.kind(), Ok(EventKind::GRAPH_LAUNCH));
        r.kind = 999;
        assert_eq!(r.kind(), Err(Error::UnknownEventKind { raw: 999 }));
        assert!(Record::ZERO.kind().is_err());
    }

    #[test]
    fn words_round_trip_and_field_positions() {
        let mut r = Record::new(EventKind::LAUNCH, 0x1122_3344_5566_7788);
        r.flags = 0xABCD;
        r.shared_mem_bytes = 0xDEAD_BEEF;
        r.stream = 7;
        r.reserved = 0x0102;
        let w = r.to_words();
        assert_eq!(w[0], 0x1122_3344_5566_7788);
        assert_eq!(w[1] & 0xFFFF, 1);
        assert_eq!((w[1] >> 16) & 0xFFFF, 0xABCD);
        assert_eq!(w[1] >> 32, 0xDEAD_BEEF);
        assert_eq!(w[2], 7);
        assert_eq!(w[7] >> 48, 0x0102);
        assert_eq!(Record::from_words(w), r);
        // Arbitrary words decode to some record without UB and round-trip.
        let junk = [u64::MAX, 0, 1, 2, 3, 4, 5, 0x8000_0000_0000_0001];
        assert_eq!(Record::from_words(junk).to_words(), junk);
    }

    #[test]
    fn dims_saturate_and_flag() {
        let mut r = Record::new(EventKind::LAUNCH, 0);
        r.set_dims([1 << 20, 2, 3], [256, 1, 1]);
        assert_eq!((r.grid_x, r.grid_y, r.grid_z), (1 << 20, 2, 3));
        assert_eq!(r.flags & FLAG_DIMS_SATURATED, 0);
        assert_eq!(r.threads(), (1 << 20) * 6 * 256);
        r.set_dims([1, 70_000, 1], [1024, 1, 1]);
        assert_eq!(r.grid_y, u16::MAX);
        assert_ne!(r.flags & FLAG_DIMS_SATURATED, 0);
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0);
        assert!(b >= a);
    }
}

/// The stable id of a kernel: FNV-1a 64 of its name (the same in every process
/// and run). When the driver cannot name a function, the shim uses the
/// `CUfunction` value with bit 63 set instead ([`FUNC_ID_UNNAMED`]).
pub const fn func_id(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < name.len() {
        h ^= name[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h & !FUNC_ID_UNNAMED
}

/// Set in a func_id that is a process-local `CUfunction` value, not a name hash.
pub const FUNC_ID_UNNAMED: u64 = 1 << 63;

#[cfg(test)]
mod func_id_tests {
    use super::*;

    #[test]
    fn func_id_is_fnv1a_of_the_name_without_bit_63() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; bit 63 cleared.
        assert_eq!(func_id(b"a"), 0xaf63_dc4c_8601_ec8c & !FUNC_ID_UNNAMED);
        assert_ne!(func_id(b"kernel_a"), func_id(b"kernel_b"));
        assert_eq!(func_id(b"ampere_sgemm"), func_id(b"ampere_sgemm"));
        assert_eq!(func_id(b"x") & FUNC_ID_UNNAMED, 0);
    }
}
