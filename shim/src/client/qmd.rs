//! A kernel launch's descriptor (its QMD, "queue meta data"), as the
//! driver's launch callback hands it to the SM reservation
//! (`super::spatial`): the layouts the shim knows, how it tells the armed
//! launch's descriptor from another's, and how it adds the TPC mask. Pure
//! memory work on the driver's buffer, no state of its own: what to write
//! and what became of it are the caller's.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, Ordering};

use tandem_proto::spatial::SpatialState;

/// What [`apply`] made of a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Applied {
    /// The mask is in it.
    Masked,
    /// Another launch's (of this version): left alone.
    Other(u8),
    /// A mask already there and ours would together disable every TPC:
    /// left alone.
    Left,
    /// It cannot be masked, for this reason.
    Declined(SpatialState),
}

/// Where a descriptor keeps what the shim reads and writes: its TPC
/// disable mask's 32-bit words, whether they count only with the enable
/// bit, and where its grid (a 32-bit width, 16-bit height and depth) and
/// its block (three 16-bit dimensions) are, by which the callback knows the
/// descriptor is the armed launch's. NVIDIA's open-gpu-doc,
/// `classes/compute/clcbc0qmd.h`: QMD V04_00 (Hopper) `TPC_DISABLE_MASK(i)`
/// at bit 2432 + 32i, `TPC_DISABLE_MASK_VALID` bit 31, `GRID_WIDTH` bit
/// 1024, `GRID_HEIGHT` 1056, `GRID_DEPTH` 1088, `CTA_THREAD_DIMENSION0-2`
/// 1152, 1168, 1184, `QMD_TYPE` bits 23-25; V03_00 (Ampere)
/// `SM_DISABLE_MASK_LOWER/UPPER` bits 672 and 704, `CTA_RASTER_WIDTH` 384,
/// `HEIGHT` 416, `DEPTH` 448, `CTA_THREAD_DIMENSION0-2` 592, 608, 624;
/// both versions' `QMD_MAJOR_VERSION` at bits 580-583 (byte 72's high
/// nibble). Every offset here was checked against that header (its commit
/// 5d957df, which holds V03_00 and V04_00) on 2026-11-28; a third party's
/// notes on the same mechanism (LithOS's scheduler) put Hopper's mask at
/// bytes 304-316 too. Not yet checked on a GPU: prove's `smmask` stage
/// runs a `%smid` probe under the mask.
pub(super) struct Layout {
    pub(super) mask: &'static [usize],
    pub(super) enable: bool,
    pub(super) grid: [usize; 3],
    pub(super) block: [usize; 3],
}

/// The layout of a descriptor of `version` (its byte 72: the QMD's major
/// version in the high nibble); `None`: one the shim does not know. The
/// older layout's grid and block offsets are V03_00's; a version before it
/// whose fields lie elsewhere never matches, and the mechanism goes off.
pub(super) const fn layout(version: u8) -> Option<Layout> {
    match version {
        0x40..=0x4f => Some(Layout {
            mask: &[304, 308, 312, 316],
            enable: true,
            grid: [128, 132, 136],
            block: [144, 146, 148],
        }),
        0x16..=0x3f => Some(Layout {
            mask: &[84, 88],
            enable: false,
            grid: [48, 52, 56],
            block: [74, 76, 78],
        }),
        _ => None,
    }
}

impl Layout {
    /// Bytes from the descriptor's start to the end of the last field read
    /// or written.
    pub(super) fn end(&self) -> usize {
        let words = self.mask.iter().map(|o| o + 4);
        let halves = self.grid[1..].iter().chain(&self.block).map(|o| o + 2);
        words
            .chain(halves)
            .chain([self.grid[0] + 4, 73])
            .max()
            .unwrap_or(73)
    }
}

/// V04's `QMD_TYPE` (bits 23-25 of the first word) of a plain grid of
/// CTAs: a cluster launch's descriptor says otherwise, and is left alone.
pub(super) const QMD_TYPE_GRID_CTA: u32 = 2;

/// Whether the descriptor at `desc`, of layout `l`, describes a launch of
/// the grid and block in `want`.
///
/// # Safety
/// `desc` points at a descriptor of layout `l` (readable up to its block's
/// last field, offset 149 at most).
unsafe fn describes(desc: *const u8, l: &Layout, want: [u32; 6]) -> bool {
    // SAFETY: the caller's; every offset read is one of the layout's fields.
    let u32_at = |at: usize| unsafe { desc.add(at).cast::<u32>().read_unaligned() };
    // SAFETY: as above.
    let u16_at = |at: usize| u32::from(unsafe { desc.add(at).cast::<u16>().read_unaligned() });
    if l.enable && (u32_at(0) >> 23) & 0x7 != QMD_TYPE_GRID_CTA {
        return false;
    }
    let got = [
        u32_at(l.grid[0]),
        u16_at(l.grid[1]),
        u16_at(l.grid[2]),
        u16_at(l.block[0]),
        u16_at(l.block[1]),
        u16_at(l.block[2]),
    ];
    got == want
}

/// Adds `ours` (TPCs 0-127's disable bits) to the descriptor `params`
/// points at if it describes the launch of `want` (grid, then block):
/// [`Applied::Masked`]; [`Applied::Other`] when it describes another (a
/// launch the driver makes for itself, or one a profiler's callback made
/// in this one); [`Applied::Left`] when a mask already there and ours
/// would together disable as many TPCs as a GPU of `sms` SMs has (`sms` /
/// 2: the launch would run nowhere); [`Applied::Declined`] when it cannot
/// be read.
///
/// A mask already in the descriptor (a stream mask, MPS's provisioning, a
/// later driver's own) is kept: the shim only ever adds disabled TPCs,
/// never enables one. From version 0x40 the words count only with the
/// enable bit set.
///
/// # Safety
/// `params` is NULL or the driver's parameter block: its first 4 bytes the
/// block's size, its fifth 8-byte word the descriptor.
pub(super) unsafe fn apply(params: *const c_void, want: [u32; 6], ours: u128, sms: u32) -> Applied {
    if params.is_null() {
        return Applied::Declined(SpatialState::NoDescriptor);
    }
    // SAFETY: the block's first 4 bytes are its size.
    let size = unsafe { params.cast::<u32>().read_unaligned() };
    let desc = if (5 * 8..=MAX_PARAMS).contains(&(size as usize)) {
        // SAFETY: a block of at least five words has a fifth.
        unsafe { params.cast::<*mut u8>().add(4).read_unaligned() }
    } else {
        core::ptr::null_mut()
    };
    if desc.is_null() {
        return Applied::Declined(SpatialState::NoDescriptor);
    }
    let unchecked = !CHECKED.load(Ordering::Relaxed);
    if unchecked && !readable(desc, 73) {
        return Applied::Declined(SpatialState::NoDescriptor);
    }
    // SAFETY: every known descriptor has its version byte at 72 (and the
    // first one's was found readable).
    let version = unsafe { desc.add(72).read() };
    let Some(l) = layout(version) else {
        return Applied::Declined(SpatialState::UnknownDescriptor(version));
    };
    if unchecked {
        if !readable(desc, l.end()) {
            return Applied::Declined(SpatialState::NoDescriptor);
        }
        CHECKED.store(true, Ordering::Relaxed);
    }
    // SAFETY: a descriptor of this layout has these fields.
    if !unsafe { describes(desc, &l, want) } {
        return Applied::Other(version);
    }
    let w0 = desc.cast::<u32>();
    // SAFETY: every known descriptor has a first word.
    let first = unsafe { w0.read_unaligned() };
    let theirs_valid = !l.enable || first & ENABLE_BIT != 0;
    let mut theirs = 0u128;
    if theirs_valid {
        for (i, off) in l.mask.iter().enumerate() {
            // SAFETY: the layout of this version has a mask word at `off`.
            let w = unsafe { desc.add(*off).cast::<u32>().read_unaligned() };
            theirs |= u128::from(w) << (32 * i);
        }
    }
    let width = 32 * l.mask.len();
    let ours = if width >= 128 {
        ours
    } else {
        ours & ((1u128 << width) - 1)
    };
    let both = theirs | ours;
    if theirs != 0 && both.count_ones() >= sms / 2 {
        return Applied::Left;
    }
    for (i, off) in l.mask.iter().enumerate() {
        // SAFETY: as above.
        unsafe {
            desc.add(*off)
                .cast::<u32>()
                .write_unaligned((both >> (32 * i)) as u32)
        };
    }
    if l.enable {
        // SAFETY: the first word, as above.
        unsafe { w0.write_unaligned(first | ENABLE_BIT) };
    }
    Applied::Masked
}

/// A version 0x40+ descriptor's mask enable bit, in its first word.
const ENABLE_BIT: u32 = 0x8000_0000;

/// The largest parameter block taken as one: libsmctrl's is 48 bytes, a
/// Blackwell driver's 0x58; a size far past those says the block is not
/// laid out as read here.
const MAX_PARAMS: usize = 0x400;

/// Whether the first descriptor's fields were found readable: the word the
/// pointer is read from is libsmctrl's, not documented, so the first
/// descriptor of the process is checked once ([`readable`]) before the
/// shim reads or writes through it, and a wrong pointer switches the
/// mechanism off instead of faulting in the job.
pub(super) static CHECKED: AtomicBool = AtomicBool::new(false);

/// Whether `len` bytes at `p` are mapped and readable: one
/// `process_vm_readv` of this process's own memory, which answers `EFAULT`
/// for an address that is not, where a read would fault. Where the call
/// itself is refused (a container's seccomp profile older than Docker's
/// of 2021 or containerd's 1.7 blocks it; `EPERM`, `ENOSYS`), nothing can
/// be told: taken as readable, as without the check.
fn readable(p: *const u8, len: usize) -> bool {
    let mut buf = [0u8; 512];
    let len = len.min(buf.len());
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: p.cast_mut().cast(),
        iov_len: len,
    };
    // SAFETY: `local` is our buffer of `len` bytes; the remote side is only
    // read by the kernel, which reports an unmapped address as an error.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        // SAFETY: errno of this thread, just set by the call above.
        return unsafe { *libc::__errno_location() } != libc::EFAULT;
    }
    usize::try_from(n) == Ok(len)
}
