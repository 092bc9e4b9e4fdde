//! Scheduler v3's SM reservation on the shim's side (issue 23,
//! `tandem_proto::spatial`): while inference is active on its GPU, a training
//! client's launches carry a TPC mask that leaves part of the GPU to
//! inference.
//!
//! The mechanism is the driver's launch callback, as libsmctrl (Bakita and
//! Anderson, RTAS 2023) and LithOS use it: undocumented, so everything about
//! it is checked and anything unknown switches it off for the process, with
//! one log line, and the job runs as it does without it.
//!
//! * **The probe**, once per process, at the first launch tandemd asks a
//!   mask of: `cuGetExportTable` with the callback table's id; entry 3
//!   subscribes [`on_launch`], entry 6 enables it for the descriptor
//!   callback (domain 0xb, id 1); the device's SM count
//!   (`cuDeviceGetAttribute`) gives the TPCs to disable
//!   (`tandem_proto::spatial::reserve_tpcs`, the lowest ones; on Hopper the
//!   bits count TPCs before floorsweeping, libsmctrl's README says, so some
//!   may name TPCs the GPU lacks and leave inference fewer SMs). Only a
//!   training client that is asked ever subscribes: an inference client's
//!   launches never meet the callback.
//! * **A launch**: the session's gate says whether this launch carries the
//!   mask ([`arm`]); the driver calls [`on_launch`] on the launching thread
//!   with the launch's descriptor, and the callback writes the mask into it
//!   only if this thread armed it; after the real call the launch path
//!   [`disarm`]s, so a launch the driver did not describe (a failed or
//!   captured one) cannot pass the mask on to a later one.
//! * **The descriptor**: the mask is added to any already there (a stream
//!   mask, MPS's own), never enabling a TPC another disabled, and a launch
//!   the two together would leave no TPC goes unmasked. Its version byte
//!   at offset 72 picks the layout.
//!   From 0x40 (Hopper's) to 0x4f: TPCs 0-127's disable bits at offsets 304,
//!   308, 312 and 316, with the enable bit 31 of the first word; from 0x16 to
//!   0x3f: TPCs 0-63 at 84 and 88. Any other version is unknown: the launch
//!   goes unmasked and the mechanism switches off. So does a parameter
//!   block shorter than five words or a NULL descriptor.
//! * **Whose descriptor**: the callback writes only into a descriptor that
//!   carries the armed launch's grid and block where NVIDIA's QMD headers
//!   put them (and, from 0x40, the type of a plain grid of CTAs), so one the
//!   driver builds for another launch on the thread in the same call, or a
//!   later GPU's layout whose byte 72 happens to read as a known version,
//!   is left alone. Blackwell (compute capability 10) keeps its version
//!   elsewhere: the probe switches the mechanism off on any GPU but 7.x to
//!   9.x. 64 armed launches in a row that saw no callback on their thread
//!   (the driver calls it elsewhere), or 16 whose descriptors never carried
//!   them, switch it off too, with one log line.
//!
//! Launches not masked: cooperative ones (all their blocks must be resident
//! at once; a grid sized for the whole GPU would no longer fit) and graph
//! launches (the shim cannot see a graph's kernels at launch; a graph
//! instantiated at any time runs as the driver built it, unmasked). What the
//! mask does to a kernel with thread-block clusters, which need whole GPCs,
//! is not known: such kernels are left unmasked, whether the cluster comes
//! from `cuLaunchKernelEx`'s attribute or was compiled in (the function's
//! required cluster size, `super::funcs::clustered`).

use core::cell::Cell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use tandem_proto::spatial::{block_ns, blocks_per_sm, reserve_tpcs, SmLimits, SpatialState};
use tandem_proto::ControlBlock;

use super::qmd::{self, Applied};
use crate::driver::{self, Support};
use crate::types::{CUfunction, CuResult};

/// The callback table's id (libsmctrl's `callback_funcs_id`).
const TABLE_ID: [u8; 16] = [
    0x2c, 0x8e, 0x0a, 0xd8, 0x07, 0x10, 0xab, 0x4e, 0x90, 0xdd, 0x54, 0x71, 0x9f, 0xe5, 0xf7, 0x4b,
];
const SUBSCRIBE: usize = 3;
const ENABLE: usize = 6;
/// The callback before a launch's descriptor is uploaded.
const QMD_DOMAIN: c_int = 0xb;
const QMD_PRE_UPLOAD: c_int = 1;

type Callback = unsafe extern "C" fn(*mut c_void, c_int, c_int, *const c_void);
type GetExportTable = unsafe extern "C" fn(*mut *const c_void, *const [u8; 16]) -> CuResult;
type Subscribe = unsafe extern "C" fn(*mut u32, Callback, *mut c_void) -> CuResult;
type Enable = unsafe extern "C" fn(u32, u32, c_int, c_int) -> CuResult;
type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> CuResult;

const UNPROBED: u8 = 0;
const PROBING: u8 = 1;
const ON: u8 = 2;
const OFF: u8 = 3;
/// The process's mechanism: [`UNPROBED`] until the first launch asked to
/// carry a mask, then [`ON`] or [`OFF`] (for good).
static STATE: AtomicU8 = AtomicU8::new(UNPROBED);
/// Why it is off ([`SpatialState::encode`]).
static WHY_OFF: AtomicU64 = AtomicU64::new(0);
/// The GPU's SM count, read by the probe.
static SMS: AtomicU32 = AtomicU32::new(0);
/// One SM's threads, registers, shared memory and block slots, read by the
/// probe (0: not reported, which `blocks_per_sm` takes as binding nothing).
static LIMITS: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];
/// The TPC disable mask the callback writes, TPCs 0-127.
static MASK: [AtomicU32; 4] = [const { AtomicU32::new(0) }; 4];
/// The control block the mask was made for and its state reported to
/// (address; 0: none): a new session's block, or a new reserve, goes
/// through [`setup`] once.
static FOR_CB: AtomicUsize = AtomicUsize::new(0);
static FOR_PERMILLE: AtomicU64 = AtomicU64::new(0);

/// This thread's next launch: [`IDLE`], [`ARMED`] by the gate, [`MASKED`],
/// [`DECLINED`] or [`LEFT`] by the callback.
const IDLE: u8 = 0;
const ARMED: u8 = 1;
const MASKED: u8 = 2;
const DECLINED: u8 = 3;
/// The callback left a launch alone that another mask already confines so
/// far that ours would leave it no TPC: unmasked, the mechanism stays on.
const LEFT: u8 = 4;
/// Still armed: the callback saw descriptors on this thread, but none of
/// them described this launch (its grid and block), so it left them alone.
const OTHER: u8 = 5;

thread_local! {
    static NEXT: Cell<u8> = const { Cell::new(IDLE) };
    /// The armed launch's grid and block ([`arm`]): the callback masks only
    /// a descriptor that carries them.
    static WANT: Cell<[u32; 6]> = const { Cell::new([0; 6]) };
}

/// Armed launches in a row that saw no descriptor callback on their thread,
/// and that saw only others' descriptors; past [`NO_CALLBACK_LIMIT`] and
/// [`UNMATCHED_LIMIT`] the mechanism switches off: the driver calls back
/// elsewhere, or its descriptors are not laid out as read here.
static NO_CALLBACK_RUN: AtomicU32 = AtomicU32::new(0);
static UNMATCHED_RUN: AtomicU32 = AtomicU32::new(0);
const NO_CALLBACK_LIMIT: u32 = 64;
const UNMATCHED_LIMIT: u32 = 16;
/// The version byte of the last descriptor that did not match (for the log).
static UNMATCHED_VERSION: AtomicU32 = AtomicU32::new(0);

/// Whether launches of the client of `cb` may carry the mask now, its
/// reservation being `permille`: one Relaxed load of the state and one of
/// the block it was set up for; the probe and the set-up for a new block
/// are cold.
#[inline(always)]
pub(crate) fn ready(cb: &ControlBlock, permille: u64) -> bool {
    let state = STATE.load(Ordering::Relaxed);
    let here = FOR_CB.load(Ordering::Relaxed) == cb as *const ControlBlock as usize;
    if here && state == ON && FOR_PERMILLE.load(Ordering::Relaxed) == permille {
        return true;
    }
    if here && state == OFF {
        return false;
    }
    setup(cb, permille)
}

#[cold]
#[inline(never)]
fn setup(cb: &ControlBlock, permille: u64) -> bool {
    let addr = cb as *const ControlBlock as usize;
    match STATE.load(Ordering::Acquire) {
        UNPROBED => {
            if STATE
                .compare_exchange(UNPROBED, PROBING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Another thread is probing: this launch goes unmasked.
                return false;
            }
            let end = match probe() {
                Ok(sms) => {
                    SMS.store(sms, Ordering::Relaxed);
                    ON
                }
                Err(why) => {
                    off(why);
                    OFF
                }
            };
            STATE.store(end, Ordering::Release);
        }
        PROBING => return false,
        _ => {}
    }
    if STATE.load(Ordering::Acquire) != ON {
        if FOR_CB.swap(addr, Ordering::Relaxed) != addr {
            cb.set_spatial_state(SpatialState::decode(WHY_OFF.load(Ordering::Relaxed)));
        }
        return false;
    }
    let tpcs = reserve_tpcs(SMS.load(Ordering::Relaxed), permille);
    let mask = if tpcs >= 128 {
        u128::MAX
    } else {
        (1u128 << tpcs) - 1
    };
    for (i, w) in MASK.iter().enumerate() {
        w.store((mask >> (32 * i)) as u32, Ordering::Relaxed);
    }
    FOR_PERMILLE.store(permille, Ordering::Relaxed);
    FOR_CB.store(addr, Ordering::Relaxed);
    cb.set_spatial_state(SpatialState::Armed);
    crate::log!(
        Debug,
        "spatial: launches made while inference is active leave TPCs 0-{} of {} SMs to it",
        tpcs.saturating_sub(1),
        SMS.load(Ordering::Relaxed)
    );
    tpcs > 0
}

/// Switches the mechanism off for the process, saying why once.
fn off(why: SpatialState) {
    WHY_OFF.store(why.encode(), Ordering::Relaxed);
    let detail = match why {
        SpatialState::NoTable => "the driver offers no launch-callback table",
        SpatialState::Refused => "the driver refused the launch callback",
        SpatialState::NoDevice => "the GPU's SM count is unknown or too small to split",
        SpatialState::UnknownDescriptor(_) => "a launch descriptor of an unknown layout",
        SpatialState::NoDescriptor => "the launch callback came without a launch descriptor",
        SpatialState::NoCallback => {
            "the driver did not call the launch callback on the launching thread"
        }
        SpatialState::Unmatched(_) => {
            "the launch descriptors did not carry the launches' grid and block where read"
        }
        SpatialState::UnsupportedGpu(_) => "a GPU whose launch descriptors the shim does not know",
        SpatialState::Idle | SpatialState::Armed => "",
    };
    match why {
        SpatialState::UnknownDescriptor(v) | SpatialState::Unmatched(v) => crate::log!(
            Warn,
            "spatial: {detail} (version {v:#04x}); training runs unmasked, as without it"
        ),
        SpatialState::UnsupportedGpu(major) => crate::log!(
            Warn,
            "spatial: {detail} (compute capability {major}.x); training runs unmasked, as without it"
        ),
        _ => crate::log!(
            Warn,
            "spatial: {detail}; training runs unmasked, as without it"
        ),
    }
}

/// The callback's subscription handle and the table's enable entry, once
/// subscribed (0: not), to take the callback out of the driver's launch
/// path when the mechanism switches off.
static SUBSCRIBED: AtomicU32 = AtomicU32::new(0);
static ENABLE_FN: AtomicUsize = AtomicUsize::new(0);

/// Disables the callback the probe enabled: a process whose mechanism is
/// off no longer has the shim in every launch's path (nor beside a
/// profiler that subscribes to the same table). Best effort: a refusal
/// changes nothing, since the callback masks nothing once off.
fn unsubscribe() {
    let en = ENABLE_FN.swap(0, Ordering::AcqRel);
    if en == 0 {
        return;
    }
    // SAFETY: the table's entry 6, which the probe called with this signature.
    let en = unsafe { core::mem::transmute::<usize, Enable>(en) };
    // SAFETY: the handle subscribe gave, as the probe enabled it.
    let rc = unsafe {
        en(
            0,
            SUBSCRIBED.load(Ordering::Relaxed),
            QMD_DOMAIN,
            QMD_PRE_UPLOAD,
        )
    };
    if rc != CuResult::SUCCESS {
        crate::log!(Debug, "spatial: the launch callback stays enabled ({rc:?})");
    }
}

/// The probe: the callback table, the subscription, the SM count.
fn probe() -> Result<u32, SpatialState> {
    let get = driver::support(Support::GetExportTable).ok_or(SpatialState::NoTable)?;
    // SAFETY: the driver's cuGetExportTable has this signature.
    let get = unsafe { core::mem::transmute::<usize, GetExportTable>(get) };
    let mut table: *const c_void = core::ptr::null();
    crate::counters::support_call(Support::GetExportTable);
    // SAFETY: an out-pointer of ours and a 16-byte id, as cuGetExportTable takes.
    let rc = unsafe { get(&mut table, &TABLE_ID) };
    if rc != CuResult::SUCCESS || table.is_null() {
        return Err(SpatialState::NoTable);
    }
    let entry = |i: usize| {
        // SAFETY: the table of this id has at least 7 entries (libsmctrl reads
        // entries 3 and 6 of it on every driver since CUDA 6.5).
        unsafe { table.cast::<usize>().add(i).read() }
    };
    let (sub, en) = (entry(SUBSCRIBE), entry(ENABLE));
    if sub == 0 || en == 0 {
        return Err(SpatialState::Refused);
    }
    // SAFETY: entries 3 and 6 of this table have these signatures (libsmctrl).
    let (sub, en) = unsafe {
        (
            core::mem::transmute::<usize, Subscribe>(sub),
            core::mem::transmute::<usize, Enable>(en),
        )
    };
    let (sms, major) = sm_count().ok_or(SpatialState::NoDevice)?;
    if reserve_tpcs(sms, 1) == 0 {
        return Err(SpatialState::NoDevice);
    }
    // Volta to Hopper build the descriptors read here; a later GPU's (QMD
    // version 5 on Blackwell) keeps other fields at those offsets.
    if !(7..=9).contains(&major) {
        return Err(SpatialState::UnsupportedGpu(major.min(255) as u8));
    }
    let mut handle = 0u32;
    // SAFETY: an out-pointer of ours and a callback of the expected type,
    // which lives as long as the process.
    if unsafe { sub(&mut handle, on_launch, core::ptr::null_mut()) } != CuResult::SUCCESS {
        return Err(SpatialState::Refused);
    }
    // SAFETY: the handle subscribe gave.
    if unsafe { en(1, handle, QMD_DOMAIN, QMD_PRE_UPLOAD) } != CuResult::SUCCESS {
        return Err(SpatialState::Refused);
    }
    SUBSCRIBED.store(handle, Ordering::Relaxed);
    ENABLE_FN.store(en as usize, Ordering::Release);
    Ok(sms)
}

/// The SM count and the compute capability's major version of the current
/// context's device, and one SM's limits (into [`LIMITS`]).
fn sm_count() -> Option<(u32, u32)> {
    let dev = driver::support(Support::CtxGetDevice)?;
    // SAFETY: the driver's cuCtxGetDevice has this signature (cuda.h).
    let dev = unsafe { core::mem::transmute::<usize, CtxGetDevice>(dev) };
    let mut d: c_int = 0;
    crate::counters::support_call(Support::CtxGetDevice);
    // SAFETY: an out-pointer of ours.
    if unsafe { dev(&mut d) } != CuResult::SUCCESS {
        return None;
    }
    for (slot, attr) in LIMITS.iter().zip(super::funcs::ATTRS_PER_SM) {
        slot.store(
            super::funcs::device_attribute(d, attr).unwrap_or(0),
            Ordering::Relaxed,
        );
    }
    let major = super::funcs::device_attribute(d, ATTR_CC_MAJOR)?;
    Some((
        super::funcs::device_attribute(d, super::funcs::ATTR_SM_COUNT)?,
        major,
    ))
}

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
const ATTR_CC_MAJOR: c_int = 75;

/// What the gate decided about a launch's mask: `est` (ns, at least 1)
/// where it may carry it, 0 where not, and the least time its blocks must
/// hold their SMs for it to ([`holds_long`]): the reservation's minimum
/// while inference is active, the standing threshold (`spatial_standing_ns`)
/// while it is idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskAsk {
    pub est: u64,
    pub min_block_ns: u64,
}

impl MaskAsk {
    /// No mask.
    pub const NONE: MaskAsk = MaskAsk {
        est: 0,
        min_block_ns: 0,
    };
}

/// Whether the blocks of a launch of `f` shaped `dims`, estimated at `est`
/// ns, hold their SMs at least `min_ns` (`tandem_proto::spatial::block_ns`:
/// its estimate over its waves at the occupancy its registers and shared
/// memory allow on this GPU). Only a launch that would carry the mask asks:
/// one lookup of `f`'s footprint (the driver is asked once per function)
/// and a few divisions. An unknown footprint or limit binds nothing, so the
/// block time errs long: towards the mask, towards inference.
#[inline(always)]
pub(crate) fn holds_long(f: CUfunction, est: u64, dims: &super::emit::Dims, min_ns: u64) -> bool {
    if min_ns == 0 {
        return true;
    }
    let blocks = dims.grid.iter().map(|&g| u64::from(g)).product::<u64>();
    let threads = dims.block.iter().fold(1u32, |t, &b| t.saturating_mul(b));
    let (regs, smem) = super::funcs::footprint(f);
    let limit = |i: usize| LIMITS[i].load(Ordering::Relaxed);
    let sm = SmLimits {
        threads: limit(0),
        regs: limit(1),
        smem: limit(2),
        blocks: limit(3),
    };
    let bps = blocks_per_sm(sm, threads, regs, smem.saturating_add(dims.shared_mem));
    block_ns(est, blocks, bps, SMS.load(Ordering::Relaxed)) >= min_ns
}

/// This thread's next launch, of `grid` blocks of `block` threads, carries
/// the mask.
#[inline(always)]
pub(crate) fn arm(grid: [u32; 3], block: [u32; 3]) {
    WANT.with(|w| {
        w.set([grid[0], grid[1], grid[2], block[0], block[1], block[2]]);
    });
    NEXT.with(|n| n.set(ARMED));
}

/// After an armed launch's real call (`launched`: it returned success):
/// whether the callback masked it. A descriptor it declined switches the
/// mechanism off (one log line) and reports why in `cb`; so do too many
/// armed launches in a row that no callback on their thread saw, or whose
/// descriptors never matched. A launch the driver refused counts for
/// nothing: it may have failed before any descriptor was built (a
/// configuration that does not fit), and a job retrying such launches must
/// not switch the mechanism off as if the callback never came.
#[inline(always)]
pub(crate) fn disarm(cb: &ControlBlock, launched: bool) -> bool {
    let outcome = NEXT.with(|n| n.replace(IDLE));
    if !launched {
        return false;
    }
    match outcome {
        MASKED => {
            cb.count_masked();
            if NO_CALLBACK_RUN.load(Ordering::Relaxed) | UNMATCHED_RUN.load(Ordering::Relaxed) != 0
            {
                reset_runs();
            }
            true
        }
        DECLINED => {
            declined(cb);
            false
        }
        outcome => {
            unmasked(cb, outcome);
            false
        }
    }
}

#[cold]
#[inline(never)]
fn reset_runs() {
    NO_CALLBACK_RUN.store(0, Ordering::Relaxed);
    UNMATCHED_RUN.store(0, Ordering::Relaxed);
}

/// An armed launch went out unmasked: counts why, and switches off once
/// the same reason has held too long.
#[cold]
#[inline(never)]
fn unmasked(cb: &ControlBlock, outcome: u8) {
    let (run, limit, why) = match outcome {
        ARMED => (
            &NO_CALLBACK_RUN,
            NO_CALLBACK_LIMIT,
            SpatialState::NoCallback,
        ),
        OTHER => {
            NO_CALLBACK_RUN.store(0, Ordering::Relaxed);
            let v = UNMATCHED_VERSION.load(Ordering::Relaxed) as u8;
            (&UNMATCHED_RUN, UNMATCHED_LIMIT, SpatialState::Unmatched(v))
        }
        _ => {
            reset_runs();
            return;
        }
    };
    if run.fetch_add(1, Ordering::Relaxed) + 1 >= limit {
        WHY_OFF.store(why.encode(), Ordering::Relaxed);
        declined(cb);
    }
}

#[cold]
#[inline(never)]
fn declined(cb: &ControlBlock) {
    if STATE.swap(OFF, Ordering::AcqRel) == ON {
        let why = SpatialState::decode(WHY_OFF.load(Ordering::Relaxed));
        off(why);
        unsubscribe();
        cb.set_spatial_state(why);
    }
}

/// The driver's descriptor callback. Does nothing unless this thread armed
/// its next launch.
///
/// # Safety
/// Called by the driver with `params` NULL or its parameter block: its first
/// 4 bytes the block's size, its fifth 8-byte word the descriptor.
unsafe extern "C" fn on_launch(
    _user: *mut c_void,
    domain: c_int,
    cbid: c_int,
    params: *const c_void,
) {
    if (domain, cbid) != (QMD_DOMAIN, QMD_PRE_UPLOAD) {
        return;
    }
    // `try_with`: a launch from a thread being torn down goes unmasked.
    let armed = NEXT
        .try_with(|n| matches!(n.get(), ARMED | OTHER))
        .unwrap_or(false);
    if !armed {
        return;
    }
    let Ok(want) = WANT.try_with(Cell::get) else {
        return;
    };
    // SAFETY: the driver's parameter block, as documented above.
    let outcome = unsafe { apply(params, want) };
    let _ = NEXT.try_with(|n| n.set(outcome));
}

/// [`qmd::apply`] with this process's mask and SM count: [`MASKED`],
/// [`OTHER`], [`LEFT`], or [`DECLINED`] (why in [`WHY_OFF`]).
///
/// # Safety
/// As [`on_launch`].
unsafe fn apply(params: *const c_void, want: [u32; 6]) -> u8 {
    let ours = MASK.iter().enumerate().fold(0u128, |m, (i, w)| {
        m | u128::from(w.load(Ordering::Relaxed)) << (32 * i)
    });
    // SAFETY: the caller's.
    match unsafe { qmd::apply(params, want, ours, SMS.load(Ordering::Relaxed)) } {
        Applied::Masked => MASKED,
        Applied::Left => LEFT,
        Applied::Other(version) => {
            UNMATCHED_VERSION.store(u32::from(version), Ordering::Relaxed);
            OTHER
        }
        Applied::Declined(why) => {
            WHY_OFF.store(why.encode(), Ordering::Relaxed);
            DECLINED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::qmd::{self, layout, QMD_TYPE_GRID_CTA};
    use super::*;

    #[test]
    fn only_the_layouts_of_libsmctrl_are_known() {
        assert_eq!(layout(0x40).map(|l| l.mask.len()), Some(4));
        assert_eq!(layout(0x4f).map(|l| l.enable), Some(true));
        assert_eq!(layout(0x16).map(|l| l.mask), Some(&[84usize, 88][..]));
        assert_eq!(layout(0x3f).map(|l| l.enable), Some(false));
        for v in [0x00, 0x06, 0x15, 0x50, 0xff] {
            assert!(layout(v).is_none(), "{v:#x}");
        }
    }

    /// The process-wide state (the mask, the SM count, the mechanism's
    /// state) the tests set: one test at a time.
    static GLOBALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn globals() -> std::sync::MutexGuard<'static, ()> {
        GLOBALS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the test's enable entry was last called with (domain, id, on,
    /// handle, a byte each).
    static DISABLED: AtomicU32 = AtomicU32::new(u32::MAX);

    /// The launch the tests arm: its grid and block.
    const GRID: [u32; 3] = [264, 2, 1];
    const BLOCK: [u32; 3] = [256, 1, 1];

    /// A parameter block as the driver passes it: 6 words, the fifth the
    /// descriptor.
    fn block(desc: &mut [u8; 512], size: u64) -> [u64; 6] {
        [size, 0, 0, 0, desc.as_mut_ptr() as u64, 0]
    }

    /// The driver's descriptor callback on block `p`.
    fn descriptor_callback(p: &[u64; 6]) {
        // SAFETY: a block made by `block`, whose descriptor outlives the call.
        unsafe {
            on_launch(
                core::ptr::null_mut(),
                QMD_DOMAIN,
                QMD_PRE_UPLOAD,
                p.as_ptr().cast(),
            )
        };
    }

    /// A descriptor of `version` for a launch of `grid` and `block`, laid
    /// out as NVIDIA's QMD headers say (a plain grid of CTAs), with `words`
    /// (offset, value) in it.
    fn launch_descriptor(
        version: u8,
        grid: [u32; 3],
        block: [u32; 3],
        words: &[(usize, u32)],
    ) -> [u8; 512] {
        let mut d = [0u8; 512];
        if let Some(l) = layout(version) {
            d[l.grid[0]..l.grid[0] + 4].copy_from_slice(&grid[0].to_ne_bytes());
            let fields = [(l.grid[1], grid[1]), (l.grid[2], grid[2])];
            for (at, v) in fields.into_iter().chain(l.block.into_iter().zip(block)) {
                d[at..at + 2].copy_from_slice(&(v as u16).to_ne_bytes());
            }
            if l.enable {
                d[0..4].copy_from_slice(&(QMD_TYPE_GRID_CTA << 23).to_ne_bytes());
            }
        }
        for &(at, w) in words {
            let old = u32::from_ne_bytes(d[at..at + 4].try_into().unwrap());
            d[at..at + 4].copy_from_slice(&(old | w).to_ne_bytes());
        }
        d[72] = version;
        d
    }

    /// The armed launch's descriptor of `version`.
    fn descriptor(version: u8, words: &[(usize, u32)]) -> [u8; 512] {
        launch_descriptor(version, GRID, BLOCK, words)
    }

    /// The 32-bit word of `d` at `at`.
    fn word(d: &[u8; 512], at: usize) -> u32 {
        u32::from_ne_bytes(d[at..at + 4].try_into().unwrap())
    }

    /// An armed launch's descriptor callback on `d`, in a parameter block of
    /// `size` bytes: what the callback made of the launch (the thread's next
    /// launch is idle again).
    fn armed_callback(d: &mut [u8; 512], size: u64) -> u8 {
        let p = block(d, size);
        arm(GRID, BLOCK);
        descriptor_callback(&p);
        NEXT.with(|n| n.replace(IDLE))
    }

    #[test]
    fn the_callback_writes_the_mask_only_into_an_armed_launch_it_knows() {
        let _g = globals();
        MASK[0].store(0xffff, Ordering::Relaxed);
        MASK[1].store(0, Ordering::Relaxed);
        let mut d = descriptor(0x40, &[]);
        let p = block(&mut d, 48);
        descriptor_callback(&p);
        assert_eq!(d[304..308], [0; 4], "not armed: untouched");
        arm(GRID, BLOCK);
        // SAFETY: as in `descriptor_callback`; another domain's callback.
        unsafe { on_launch(core::ptr::null_mut(), 3, 0x36, p.as_ptr().cast()) };
        assert_eq!(d[304..308], [0; 4], "another callback: untouched");
        descriptor_callback(&p);
        assert_eq!(u32::from_ne_bytes(d[304..308].try_into().unwrap()), 0xffff);
        assert_eq!(d[3] & 0x80, 0x80, "the enable bit");
        assert_eq!(NEXT.with(Cell::get), MASKED);
        NEXT.with(|n| n.set(IDLE));

        let mut old = descriptor(0x06, &[]);
        assert_eq!(armed_callback(&mut old, 48), DECLINED);
        assert!(
            old.iter().enumerate().all(|(i, b)| i == 72 || *b == 0),
            "left alone"
        );
        assert_eq!(
            SpatialState::decode(WHY_OFF.load(Ordering::Relaxed)),
            SpatialState::UnknownDescriptor(6)
        );

        // A block too short to hold a descriptor.
        let mut d = descriptor(0x40, &[]);
        assert_eq!(armed_callback(&mut d, 32), DECLINED, "a short block");
        assert_eq!(d[304..308], [0; 4]);
        assert_eq!(
            SpatialState::decode(WHY_OFF.load(Ordering::Relaxed)),
            SpatialState::NoDescriptor
        );

        // A mask already there is kept, ours added (TPCs 0-15 ours, 40-47
        // theirs, of a 132-SM GPU's 66)...
        SMS.store(132, Ordering::Relaxed);
        let mut d = descriptor(0x40, &[(308, 0xff00), (0, 0x8000_0000)]);
        assert_eq!(armed_callback(&mut d, 48), MASKED);
        assert_eq!((word(&d, 304), word(&d, 308)), (0xffff, 0xff00));
        // ... but only with the enable bit: without it the words mean nothing.
        let mut d = descriptor(0x40, &[(308, 0xff00)]);
        assert_eq!(armed_callback(&mut d, 48), MASKED);
        assert_eq!((word(&d, 304), word(&d, 308)), (0xffff, 0));
        // A mask that with ours would leave no TPC: the launch is left alone,
        // and the mechanism stays on (an Ampere layout: 64 TPC bits; a GPU
        // of 60 TPCs).
        SMS.store(120, Ordering::Relaxed);
        let mut d = descriptor(0x30, &[(84, 0xfff0_0000), (88, 0xffff_ffff)]);
        assert_eq!(armed_callback(&mut d, 48), LEFT);
        assert_eq!((word(&d, 84), word(&d, 88)), (0xfff0_0000, 0xffff_ffff));
    }

    /// The mask goes to the armed launch's descriptor, not to the first the
    /// driver builds on the thread: one of another launch (the driver's
    /// own, or one a profiler made in this call), a cluster launch's, or a
    /// layout that is not what the version byte says (a later GPU's QMD
    /// whose byte 72 happens to look like an older version) is left alone.
    #[test]
    fn only_the_descriptor_of_the_armed_launch_takes_the_mask() {
        let _g = globals();
        MASK[0].store(0xffff, Ordering::Relaxed);
        SMS.store(132, Ordering::Relaxed);
        let untouched = |d: &[u8; 512]| word(d, 304) == 0 && word(d, 84) == 0;
        let mut other = launch_descriptor(0x40, [1, 1, 1], [32, 1, 1], &[]);
        let mut mine = descriptor(0x40, &[]);
        let (po, pm) = (block(&mut other, 48), block(&mut mine, 48));
        arm(GRID, BLOCK);
        descriptor_callback(&po);
        assert!(untouched(&other), "another launch's");
        assert_eq!(NEXT.with(Cell::get), OTHER, "still armed");
        descriptor_callback(&pm);
        assert_eq!(word(&mine, 304), 0xffff);
        assert_eq!(NEXT.with(|n| n.replace(IDLE)), MASKED);

        // A cluster launch's descriptor (QMD_TYPE GRID_GPC_CGA).
        let mut cga = descriptor(0x40, &[]);
        cga[0..4].copy_from_slice(&(3u32 << 23).to_ne_bytes());
        assert_eq!(armed_callback(&mut cga, 48), OTHER);
        assert_eq!(word(&cga, 304), 0);
        // Blackwell's QMD V05: its version at byte 58, and whatever byte 72
        // holds, nothing of the launch where V03 and V04 keep it.
        for stray in [0x22, 0x41] {
            let mut v5 = [0u8; 512];
            v5[58] = 0x50;
            v5[72] = stray;
            let before = v5;
            assert_eq!(armed_callback(&mut v5, 0x58), OTHER, "{stray:#x}");
            assert_eq!(v5, before, "{stray:#x}: written into");
        }
    }

    /// A parameter block whose descriptor word is not a pointer to mapped
    /// memory (a driver that lays the block out otherwise) switches the
    /// mechanism off instead of faulting in the job: the first descriptor
    /// of the process is checked before it is read. So is a block whose
    /// size is far past any known one.
    #[test]
    fn a_descriptor_pointer_to_unmapped_memory_is_declined_not_read() {
        let _g = globals();
        MASK[0].store(0xffff, Ordering::Relaxed);
        SMS.store(132, Ordering::Relaxed);
        qmd::CHECKED.store(false, Ordering::Relaxed);
        // Page 1: never mapped in a Linux process (mmap_min_addr).
        let bogus: [u64; 6] = [48, 0, 0, 0, 0x1000, 0];
        arm(GRID, BLOCK);
        descriptor_callback(&bogus);
        assert_eq!(NEXT.with(|n| n.replace(IDLE)), DECLINED);
        assert_eq!(
            SpatialState::decode(WHY_OFF.load(Ordering::Relaxed)),
            SpatialState::NoDescriptor
        );
        assert!(!qmd::CHECKED.load(Ordering::Relaxed));
        let mut d = descriptor(0x40, &[]);
        assert_eq!(armed_callback(&mut d, 0x2000), DECLINED, "a block of 8 KiB");
        assert_eq!(armed_callback(&mut d, 48), MASKED);
        assert!(qmd::CHECKED.load(Ordering::Relaxed), "checked once");
        assert_eq!(layout(0x40).map(|l| l.end()), Some(320));
        assert_eq!(layout(0x30).map(|l| l.end()), Some(92));
    }

    /// Armed launches that no callback on their thread saw, or whose
    /// descriptors never matched, switch the mechanism off after a run of
    /// them, saying why; a masked launch ends the run.
    #[test]
    fn runs_of_unmasked_armed_launches_switch_the_mechanism_off() {
        let _g = globals();
        let (s, _ring) = super::super::session::tests::session_on(-1);
        let cb = s.control();
        MASK[0].store(0xffff, Ordering::Relaxed);
        STATE.store(ON, Ordering::Release);
        reset_runs();
        // The probe's subscription, to a table entry that records its call.
        extern "C" fn enable(on: u32, handle: u32, domain: c_int, cbid: c_int) -> CuResult {
            let v = (domain as u32) << 24 | (cbid as u32) << 16 | on << 8 | handle;
            DISABLED.store(v, Ordering::Relaxed);
            CuResult::SUCCESS
        }
        SUBSCRIBED.store(7, Ordering::Relaxed);
        ENABLE_FN.store(enable as *const () as usize, Ordering::Release);
        // A callback on another thread: this thread's launch goes unmasked.
        let mut d = descriptor(0x40, &[]);
        let p = block(&mut d, 48);
        arm(GRID, BLOCK);
        std::thread::spawn(move || descriptor_callback(&p))
            .join()
            .unwrap();
        assert_eq!(word(&d, 304), 0, "the other thread armed nothing");
        assert!(!disarm(cb, true));
        for _ in 1..NO_CALLBACK_LIMIT - 1 {
            arm(GRID, BLOCK);
            assert!(!disarm(cb, true));
        }
        assert_eq!(STATE.load(Ordering::Acquire), ON, "not yet");
        // A masked launch ends the run.
        let mut d = descriptor(0x40, &[]);
        let p = block(&mut d, 48);
        arm(GRID, BLOCK);
        descriptor_callback(&p);
        assert!(disarm(cb, true));
        assert_eq!(NO_CALLBACK_RUN.load(Ordering::Relaxed), 0);
        // Launches the driver refused (no descriptor built) count for nothing.
        for _ in 0..NO_CALLBACK_LIMIT {
            arm(GRID, BLOCK);
            assert!(!disarm(cb, false));
        }
        assert_eq!(STATE.load(Ordering::Acquire), ON, "refused launches");
        assert_eq!(NO_CALLBACK_RUN.load(Ordering::Relaxed), 0);
        for _ in 0..NO_CALLBACK_LIMIT {
            arm(GRID, BLOCK);
            disarm(cb, true);
        }
        assert_eq!(STATE.load(Ordering::Acquire), OFF);
        assert_eq!(cb.spatial_state(), SpatialState::NoCallback);
        assert_eq!(
            DISABLED.load(Ordering::Relaxed),
            0x0b01_0007,
            "the callback taken out of the launch path: enable(0, 7, 0xb, 1)"
        );

        STATE.store(ON, Ordering::Release);
        reset_runs();
        let mut other = launch_descriptor(0x40, [1, 1, 1], [32, 1, 1], &[]);
        for _ in 0..UNMATCHED_LIMIT {
            let p = block(&mut other, 48);
            arm(GRID, BLOCK);
            descriptor_callback(&p);
            assert!(!disarm(cb, true));
        }
        assert_eq!(STATE.load(Ordering::Acquire), OFF);
        assert_eq!(cb.spatial_state(), SpatialState::Unmatched(0x40));
        assert_eq!(word(&other, 304), 0);
        STATE.store(UNPROBED, Ordering::Release);
    }
}
