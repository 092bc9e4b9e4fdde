//! Kernel ids and the once-per-session FuncName / Device messages.
//!
//! A fixed-size, lock-free, open-addressing table maps `CUfunction` to its
//! stable id (`tandem_proto::func_id` of the name the driver reports, or the
//! handle with bit 63 set when it cannot name it). The first launch of a
//! function asks the real `cuFuncGetName` and sends a FuncName, with the
//! function's registers per thread and static shared memory
//! (`cuFuncGetAttribute`) where the coordinator's Welcome said it decodes
//! them (`WELCOME_FLAG_FUNC_ATTRS`: what a live trace's footprint is made
//! of, docs/traces.md); a later launch
//! is a few loads: the slot's key, id and the session generation its name was
//! sent in. After a reconnect the generation differs, so each name is sent once
//! more, to the new coordinator, on the function's next launch. A FuncName
//! or Device message that cannot be sent (the coordinator's socket full or
//! closed) is tried again on a later launch, after [`REPORT_RETRY_NS`]:
//! without it tandemd would size no SM reservation from that function's
//! launches for the rest of the session (their widths need its attributes),
//! nor see a detected job's first backward kernel.

use core::ffi::{c_char, c_int, CStr};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use tandem_proto::wire::{self, Message, MAX_DEVICE_NAME_LEN, MAX_FUNC_NAME_LEN};
use tandem_proto::FUNC_ID_UNNAMED;

use super::session::Session;
use crate::driver::{self, Support};
use crate::types::{CUfunction, CuResult};

const CAPACITY: usize = 8192;
const MASK: usize = CAPACITY - 1;
/// Slots probed from a function's home before it is treated as unnamed.
const PROBES: usize = 64;
/// How long a session sends no FuncName or Device message after one could
/// not be sent: a coordinator that stopped reading then costs a launch that
/// has one to send a clock read, not the driver calls and a failed send each.
const REPORT_RETRY_NS: u64 = 1_000_000;

#[repr(C, align(32))]
struct Slot {
    /// The `CUfunction` (0 = empty).
    key: AtomicUsize,
    /// Its id (0 = being filled in).
    id: AtomicU64,
    /// The session generation its FuncName was sent in (0 = none).
    sent: AtomicU32,
    /// Whether it was compiled for thread-block clusters
    /// ([`CLUSTER_UNKNOWN`] until first asked, by [`clustered`]).
    cluster: AtomicU8,
    /// Its registers per thread (high half) and static shared memory (low
    /// half) ([`FOOTPRINT_UNKNOWN`] until first asked, by [`footprint`]).
    footprint: AtomicU64,
}

const FOOTPRINT_UNKNOWN: u64 = u64::MAX;

const CLUSTER_UNKNOWN: u8 = 0;
const CLUSTER_NONE: u8 = 1;
const CLUSTER_YES: u8 = 2;

static TABLE: [Slot; CAPACITY] = [const {
    Slot {
        key: AtomicUsize::new(0),
        id: AtomicU64::new(0),
        sent: AtomicU32::new(0),
        cluster: AtomicU8::new(CLUSTER_UNKNOWN),
        footprint: AtomicU64::new(FOOTPRINT_UNKNOWN),
    }
}; CAPACITY];

#[inline(always)]
fn home(key: usize) -> usize {
    // Fibonacci hashing; handles are pointers, so drop the alignment bits.
    ((key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) & MASK
}

/// The id a function is known by when it has no name.
#[inline(always)]
fn unnamed(key: usize) -> u64 {
    key as u64 | FUNC_ID_UNNAMED
}

/// Where `key` stands in the table.
enum Probe {
    /// Its slot.
    Found(&'static Slot),
    /// Not there: an empty slot ends its probe sequence.
    Absent,
    /// Not there, and no empty slot within [`PROBES`] of its home.
    Full,
}

/// Finds `key`'s slot (`key` not 0, which marks an empty slot): loads only.
#[inline(always)]
fn probe(key: usize) -> Probe {
    let mut i = home(key);
    for _ in 0..PROBES {
        let slot = &TABLE[i];
        match slot.key.load(Ordering::Acquire) {
            k if k == key => return Probe::Found(slot),
            0 => return Probe::Absent,
            _ => i = (i + 1) & MASK,
        }
    }
    Probe::Full
}

/// The stable id of `f`, sending its FuncName first if this session has not
/// had it. Fast path: loads only.
#[inline(always)]
pub fn id(s: &Session, f: CUfunction) -> u64 {
    let key = f as usize;
    if key == 0 {
        return unnamed(0);
    }
    match probe(key) {
        Probe::Found(slot) => {
            let id = slot.id.load(Ordering::Acquire);
            if id != 0 && slot.sent.load(Ordering::Relaxed) == s.gen {
                return id;
            }
            found_cold(s, slot, key)
        }
        Probe::Absent => insert_cold(s, key),
        Probe::Full => unnamed(key),
    }
}

/// Whether `f` was compiled for thread-block clusters (a required cluster
/// size, `__cluster_dims__`), which the SM reservation leaves unmasked
/// (`super::spatial`). Asked of the driver once per function (three
/// `cuFuncGetAttribute`s; a driver without the attributes, before CUDA 12:
/// no) and kept in the function's slot; only launches that would carry the
/// mask ask, so other launches pay nothing.
pub(crate) fn clustered(f: CUfunction) -> bool {
    let key = f as usize;
    if key == 0 {
        // No function (the driver refuses the launch). Key 0 marks an empty
        // slot: probing for it would cache this answer where a function
        // inserted later would read it.
        return false;
    }
    let Probe::Found(slot) = probe(key) else {
        // Not in the table (it was full when `id` met the function): ask.
        return cluster_dims(key);
    };
    match slot.cluster.load(Ordering::Relaxed) {
        CLUSTER_NONE => false,
        CLUSTER_YES => true,
        _ => {
            let yes = cluster_dims(key);
            let v = if yes { CLUSTER_YES } else { CLUSTER_NONE };
            slot.cluster.store(v, Ordering::Relaxed);
            yes
        }
    }
}

/// `f`'s registers per thread and static shared memory (0 where the driver
/// does not say), which decide how many of its blocks an SM holds: the SM
/// reservation's block time (`super::spatial`). Asked of the driver once per
/// function and kept in its slot, as [`clustered`] is; only launches that
/// would carry the mask ask.
pub(crate) fn footprint(f: CUfunction) -> (u32, u32) {
    let key = f as usize;
    if key == 0 {
        return (0, 0);
    }
    let Probe::Found(slot) = probe(key) else {
        return split(attrs_of(key));
    };
    match slot.footprint.load(Ordering::Relaxed) {
        FOOTPRINT_UNKNOWN => footprint_cold(slot, key),
        v => ((v >> 32) as u32, v as u32),
    }
}

#[cold]
#[inline(never)]
fn footprint_cold(slot: &Slot, key: usize) -> (u32, u32) {
    let (regs, smem) = split(attrs_of(key));
    slot.footprint
        .store(u64::from(regs) << 32 | u64::from(smem), Ordering::Relaxed);
    (regs, smem)
}

fn split(a: Option<wire::FuncAttrs>) -> (u32, u32) {
    a.map_or((0, 0), |a| (a.regs_per_thread, a.static_smem_bytes))
}

/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH`, `_HEIGHT`, `_DEPTH` (cuda.h, 12.0).
const ATTR_CLUSTER_DIMS: [c_int; 3] = [11, 12, 13];

#[cold]
#[inline(never)]
fn cluster_dims(key: usize) -> bool {
    let Some(p) = driver::support(Support::FuncGetAttribute) else {
        return false;
    };
    // SAFETY: as in `attrs_of`.
    let get = unsafe { core::mem::transmute::<usize, FuncGetAttribute>(p) };
    ATTR_CLUSTER_DIMS.iter().any(|&attr| {
        let mut v: c_int = 0;
        crate::counters::support_call(Support::FuncGetAttribute);
        // SAFETY: `key` is a CUfunction the program is launching; `v` is ours.
        let rc = unsafe { get(&mut v, attr, key as CUfunction) };
        rc == CuResult::SUCCESS && v > 1
    })
}

type FuncGetName = unsafe extern "C" fn(*mut *const c_char, CUfunction) -> CuResult;
type FuncGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, CUfunction) -> CuResult;

/// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES` (cuda.h): static shared memory per block.
const ATTR_SHARED_SIZE_BYTES: c_int = 1;
/// `CU_FUNC_ATTRIBUTE_NUM_REGS` (cuda.h): registers per thread.
const ATTR_NUM_REGS: c_int = 4;

/// `key`'s registers per thread and static shared memory, as the driver
/// reports them; `None` where it reports neither.
fn attrs_of(key: usize) -> Option<wire::FuncAttrs> {
    let p = driver::support(Support::FuncGetAttribute)?;
    // SAFETY: the driver's cuFuncGetAttribute has this signature (cuda.h:
    // `CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib,
    // CUfunction hfunc)`, the attribute an enum the size of an int).
    let get = unsafe { core::mem::transmute::<usize, FuncGetAttribute>(p) };
    let one = |attr: c_int| -> Option<u32> {
        let mut v: c_int = 0;
        crate::counters::support_call(Support::FuncGetAttribute);
        // SAFETY: `key` is a CUfunction the program just launched; `v` is ours.
        let rc = unsafe { get(&mut v, attr, key as CUfunction) };
        (rc == CuResult::SUCCESS).then(|| u32::try_from(v).unwrap_or(0))
    };
    let (regs, smem) = (one(ATTR_NUM_REGS), one(ATTR_SHARED_SIZE_BYTES));
    (regs.is_some() || smem.is_some()).then(|| wire::FuncAttrs {
        regs_per_thread: regs.unwrap_or(0),
        static_smem_bytes: smem.unwrap_or(0),
    })
}

/// The name the driver reports for `key`, borrowed from the driver (it lives as
/// long as the function's module, which is loaded: the function was just launched).
fn name_of(key: usize) -> Option<&'static [u8]> {
    let p = driver::support(Support::FuncGetName)?;
    // SAFETY: the driver's cuFuncGetName has this signature (cuda.h, CUDA 12.3).
    let get = unsafe { core::mem::transmute::<usize, FuncGetName>(p) };
    let mut name: *const c_char = core::ptr::null();
    crate::counters::support_call(Support::FuncGetName);
    // SAFETY: `key` is a CUfunction the program just launched; `name` is ours.
    let rc = unsafe { get(&mut name, key as CUfunction) };
    if rc != CuResult::SUCCESS || name.is_null() {
        return None;
    }
    // SAFETY: on success the driver returns a NUL-terminated name it owns.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    (!bytes.is_empty()).then_some(bytes)
}

/// The id of a named function (never 0: 0 marks a slot being filled in).
fn id_of_name(name: &[u8]) -> u64 {
    tandem_proto::func_id(name).max(1)
}

/// Sends the FuncName of `id` (the function `key`) on `s`, truncating the
/// name to the wire limit; with its attributes where the coordinator
/// decodes them. `false` when it did not go out and may later (the socket
/// full or closed); a name that cannot be encoded never will, and counts
/// as sent.
fn send_name(s: &Session, key: usize, id: u64, name: &[u8]) -> bool {
    let name = &name[..name.len().min(MAX_FUNC_NAME_LEN)];
    let mut buf = [0u8; wire::HEADER_LEN
        + wire::FUNC_NAME_FIXED_LEN
        + MAX_FUNC_NAME_LEN
        + wire::FUNC_ATTRS_LEN];
    let attrs = if s.func_attrs { attrs_of(key) } else { None };
    let msg = Message::FuncName(wire::FuncName {
        func_id: id,
        name,
        attrs,
    });
    match msg.encode(&mut buf) {
        Ok(n) => {
            let sent = s.send(&buf[..n]);
            if !sent {
                crate::log!(
                    Debug,
                    "FuncName for {id:#x} not sent (socket closed or full); tried again later"
                );
            }
            sent
        }
        Err(e) => {
            // Not a passing state: trying again would fail the same way.
            crate::log!(Debug, "FuncName for {id:#x} not encoded: {e}");
            true
        }
    }
}

/// Whether `s` is holding its reports back after one could not be sent.
fn reports_backing_off(s: &Session) -> bool {
    let until = s.reports_retry_ns.load(Ordering::Relaxed);
    until != 0 && tandem_proto::monotonic_ns() < until
}

/// Notes whether a report went out: a failed one holds the session's
/// reports back for [`REPORT_RETRY_NS`], a sent one ends that.
fn report_sent(s: &Session, sent: bool) {
    if sent {
        if s.reports_retry_ns.load(Ordering::Relaxed) != 0 {
            s.reports_retry_ns.store(0, Ordering::Relaxed);
        }
    } else {
        s.reports_retry_ns.store(
            tandem_proto::monotonic_ns().saturating_add(REPORT_RETRY_NS),
            Ordering::Relaxed,
        );
    }
}

/// Sends the FuncName of `slot` (the function `key`, a named `id`), whose
/// `sent` this thread has claimed for `s`. A failed send gives the claim
/// back, so a later launch of the function tries again, and holds the
/// session's reports back for [`REPORT_RETRY_NS`].
fn send_claimed(s: &Session, slot: &Slot, key: usize, id: u64, name: &[u8]) {
    let sent = send_name(s, key, id, name);
    if !sent {
        // Only this session's claim is given back: a newer session's stays.
        let _ = slot
            .sent
            .compare_exchange(s.gen, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
    report_sent(s, sent);
}

#[cold]
#[inline(never)]
fn found_cold(s: &Session, slot: &Slot, key: usize) -> u64 {
    resend(s, slot, key, name_of)
}

/// [`found_cold`], with the driver's naming passed in (tests name without one).
fn resend(
    s: &Session,
    slot: &Slot,
    key: usize,
    name_of: fn(usize) -> Option<&'static [u8]>,
) -> u64 {
    let id = slot.id.load(Ordering::Acquire);
    if id == 0 {
        // Another thread is filling the slot in: name it here, without storing.
        return name_of(key).map_or(unnamed(key), id_of_name);
    }
    let named = id & FUNC_ID_UNNAMED == 0;
    let sent = slot.sent.load(Ordering::Relaxed);
    if sent == s.gen || (named && reports_backing_off(s)) {
        return id;
    }
    if slot
        .sent
        .compare_exchange(sent, s.gen, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
        && named
    {
        if let Some(name) = name_of(key) {
            send_claimed(s, slot, key, id, name);
        }
    }
    id
}

#[cold]
#[inline(never)]
fn insert_cold(s: &Session, key: usize) -> u64 {
    let mut i = home(key);
    for _ in 0..PROBES {
        let slot = &TABLE[i];
        match slot
            .key
            .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                let name = name_of(key);
                let id = name.map_or(unnamed(key), id_of_name);
                // Claimed for this session before the id is published, so
                // no other thread sends it too; left unclaimed while the
                // session is holding reports back, for a later launch to send.
                let held_back = name.is_some() && reports_backing_off(s);
                let claim = if held_back { 0 } else { s.gen };
                slot.sent.store(claim, Ordering::Relaxed);
                slot.id.store(id, Ordering::Release);
                if let Some(name) = name.filter(|_| !held_back) {
                    send_claimed(s, slot, key, id, name);
                }
                return id;
            }
            Err(k) if k == key => return found_cold(s, slot, key),
            Err(_) => i = (i + 1) & MASK,
        }
    }
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::log!(
            Debug,
            "kernel id table full ({CAPACITY}); further kernels are reported by handle"
        );
    }
    unnamed(key)
}

type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> CuResult;
type DeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult;
type DeviceGetUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> CuResult;
type DeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult;

/// Device `dev`'s attribute `attr` (cuda.h's `CUdevice_attribute`), as the
/// driver reports it; `None` where it does not.
pub(crate) fn device_attribute(dev: c_int, attr: c_int) -> Option<u32> {
    let p = driver::support(Support::DeviceGetAttribute)?;
    // SAFETY: the driver's cuDeviceGetAttribute has this signature (cuda.h:
    // `CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib,
    // CUdevice dev)`, the attribute an enum the size of an int).
    let get = unsafe { core::mem::transmute::<usize, DeviceGetAttribute>(p) };
    let mut v: c_int = 0;
    crate::counters::support_call(Support::DeviceGetAttribute);
    // SAFETY: an out-pointer of ours and a device the driver named.
    let rc = unsafe { get(&mut v, attr, dev) };
    (rc == CuResult::SUCCESS).then(|| u32::try_from(v).unwrap_or(0))
}

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub(crate) const ATTR_SM_COUNT: c_int = 16;
/// `CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR`,
/// `..._MAX_REGISTERS_PER_MULTIPROCESSOR`,
/// `..._MAX_SHARED_MEMORY_PER_MULTIPROCESSOR` and
/// `..._MAX_BLOCKS_PER_MULTIPROCESSOR` (cuda.h).
pub(crate) const ATTRS_PER_SM: [c_int; 4] = [39, 82, 81, 106];

/// `dev`'s SMs: their count and one's capacity; `None` without the count.
fn shape_of(dev: c_int) -> Option<wire::DeviceShape> {
    let sms = device_attribute(dev, ATTR_SM_COUNT).filter(|&n| n > 0)?;
    let [threads, regs, smem, blocks] = ATTRS_PER_SM.map(|a| device_attribute(dev, a).unwrap_or(0));
    Some(wire::DeviceShape {
        sms,
        threads_per_sm: threads,
        regs_per_sm: regs,
        smem_per_sm: smem,
        blocks_per_sm: blocks,
    })
}

/// Sends the Device message once per session (first launch after connecting):
/// the current context's device ordinal, UUID and name, and its SMs where
/// the coordinator decodes them (`WELCOME_FLAG_DEVICE_SHAPE`).
#[cold]
#[inline(never)]
pub fn send_device(s: &Session) {
    if reports_backing_off(s) || s.device_sent.swap(true, Ordering::Relaxed) {
        return;
    }
    let Some(get_dev) = driver::support(Support::CtxGetDevice) else {
        return;
    };
    // SAFETY: the driver's cuCtxGetDevice has this signature (cuda.h).
    let get_dev = unsafe { core::mem::transmute::<usize, CtxGetDevice>(get_dev) };
    let mut dev: c_int = 0;
    crate::counters::support_call(Support::CtxGetDevice);
    // SAFETY: `dev` is ours; the driver reports an error where no context
    // is current.
    if unsafe { get_dev(&mut dev) } != CuResult::SUCCESS {
        // Dedup's and follow mode's threads call this too, and may come
        // first, with no context current: the next caller (a launch, with
        // its context) sends it instead. Without this the message was lost
        // for good and tandemd never learnt the job's GPU.
        s.device_sent.store(false, Ordering::Relaxed);
        crate::log!(
            Debug,
            "cuCtxGetDevice failed; the Device message waits for the next call"
        );
        return;
    }
    let mut uuid = [0u8; 16];
    let uuid_fn = [Support::DeviceGetUuidV2, Support::DeviceGetUuid]
        .into_iter()
        .find_map(|w| Some((w, driver::support(w)?)));
    if let Some((which, f)) = uuid_fn {
        crate::counters::support_call(which);
        // SAFETY: cuDeviceGetUuid{,_v2}(CUuuid *, CUdevice); CUuuid is 16 bytes.
        let f = unsafe { core::mem::transmute::<usize, DeviceGetUuid>(f) };
        // SAFETY: `uuid` is 16 writable bytes; `dev` came from the driver.
        if unsafe { f(&mut uuid, dev) } != CuResult::SUCCESS {
            uuid = [0; 16];
        }
    }
    if uuid != [0; 16] {
        s.local
            .set_gpu(tandem_proto::board::gpu_key(&uuid), s.control());
    }
    let mut name_buf = [0u8; MAX_DEVICE_NAME_LEN + 1];
    let mut name: &[u8] = &[];
    if let Some(f) = driver::support(Support::DeviceGetName) {
        crate::counters::support_call(Support::DeviceGetName);
        // SAFETY: cuDeviceGetName(char *, int, CUdevice).
        let f = unsafe { core::mem::transmute::<usize, DeviceGetName>(f) };
        // SAFETY: the buffer holds `len` bytes; the driver writes at most that.
        let rc = unsafe { f(name_buf.as_mut_ptr().cast(), name_buf.len() as c_int, dev) };
        if rc == CuResult::SUCCESS {
            let end = name_buf
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(MAX_DEVICE_NAME_LEN);
            name = &name_buf[..end.min(MAX_DEVICE_NAME_LEN)];
        }
    }
    let msg = Message::Device(wire::Device {
        ordinal: u32::try_from(dev).unwrap_or(0),
        uuid,
        name,
        shape: if s.device_shape { shape_of(dev) } else { None },
    });
    let mut buf = [0u8; wire::HEADER_LEN
        + wire::DEVICE_FIXED_LEN
        + MAX_DEVICE_NAME_LEN
        + wire::DEVICE_SHAPE_LEN];
    match msg.encode(&mut buf) {
        Ok(n) => {
            let sent = s.send(&buf[..n]);
            if sent {
                s.device_out.store(true, Ordering::Release);
            } else {
                // A full socket now may drain later: try again, after the
                // back-off, on a later launch.
                s.device_sent.store(false, Ordering::Relaxed);
                crate::log!(Debug, "Device message not sent (socket closed or full)");
            }
            report_sent(s, sent);
        }
        Err(e) => crate::log!(Debug, "Device message not encoded: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_spread_aligned_handles() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..1024usize {
            seen.insert(home(0x5555_0000_0000 + i * 64));
        }
        assert!(seen.len() > 900, "{} distinct homes", seen.len());
        assert!(seen.iter().all(|&h| h < CAPACITY));
    }

    /// The messages waiting on `peer`: the FuncNames' ids and names, and how
    /// many others.
    fn received(peer: &std::os::fd::OwnedFd) -> (Vec<(u64, Vec<u8>)>, usize) {
        use std::os::fd::AsFd;
        let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
        let (mut names, mut others) = (Vec::new(), 0);
        while let Ok(r) = wire::recv(peer.as_fd(), &mut buf) {
            match Message::decode(&buf[..r.len]) {
                Ok(Message::FuncName(f)) => names.push((f.func_id, f.name.to_vec())),
                _ => others += 1,
            }
        }
        (names, others)
    }

    const KEY: usize = 0x7f00_1234_5670;

    fn gemm(_: usize) -> Option<&'static [u8]> {
        Some(b"gemm")
    }

    fn slot(id: u64) -> Slot {
        Slot {
            key: AtomicUsize::new(KEY),
            id: AtomicU64::new(id),
            sent: AtomicU32::new(0),
            cluster: AtomicU8::new(CLUSTER_UNKNOWN),
            footprint: AtomicU64::new(FOOTPRINT_UNKNOWN),
        }
    }

    #[test]
    fn a_func_name_the_socket_could_not_take_goes_out_on_a_later_launch() {
        let (sock, peer) = super::super::session::tests::pair();
        let (s, _ring) = super::super::session::tests::session_on(sock);
        let mut filler = 0;
        while s.send(&[0u8; 256]) {
            filler += 1;
        }
        assert!(filler > 0, "the socket took something before it was full");
        let id = id_of_name(b"gemm");
        let slot = slot(id);

        assert_eq!(resend(&s, &slot, KEY, gemm), id);
        assert_eq!(
            slot.sent.load(Ordering::Relaxed),
            0,
            "a send that failed gives its claim back"
        );
        assert!(reports_backing_off(&s));
        assert_eq!(received(&peer), (vec![], filler), "only the filler arrived");

        // The coordinator reads again, but the session is still holding back.
        assert_eq!(resend(&s, &slot, KEY, gemm), id);
        assert_eq!(received(&peer), (vec![], 0));
        assert_eq!(slot.sent.load(Ordering::Relaxed), 0);

        // Past the back-off, the next launch sends it, once.
        s.reports_retry_ns.store(1, Ordering::Relaxed);
        assert_eq!(resend(&s, &slot, KEY, gemm), id);
        assert_eq!(received(&peer), (vec![(id, b"gemm".to_vec())], 0));
        assert_eq!(slot.sent.load(Ordering::Relaxed), s.gen);
        assert!(!reports_backing_off(&s));
        // A launch sends its FuncName before the Device: that is no sign the
        // Device is out, which follow's re-offers and HELDs wait for.
        assert!(
            !s.device_out.load(Ordering::Acquire),
            "a FuncName sent does not mark the Device message out"
        );
        assert_eq!(s.reports_retry_ns.load(Ordering::Relaxed), 0);
        assert_eq!(resend(&s, &slot, KEY, gemm), id);
        assert_eq!(received(&peer), (vec![], 0), "sent once per session");
    }

    #[test]
    fn an_unnamed_function_is_claimed_at_once_even_while_reports_are_held_back() {
        let (sock, peer) = super::super::session::tests::pair();
        let (s, _ring) = super::super::session::tests::session_on(sock);
        s.reports_retry_ns.store(u64::MAX, Ordering::Relaxed);
        let slot = slot(unnamed(KEY));
        assert_eq!(resend(&s, &slot, KEY, gemm), unnamed(KEY));
        assert_eq!(
            slot.sent.load(Ordering::Relaxed),
            s.gen,
            "its later launches take the fast path"
        );
        assert_eq!(received(&peer), (vec![], 0), "an unnamed id sends nothing");
    }

    #[test]
    fn the_device_message_waits_out_the_same_back_off() {
        let (s, _ring) = super::super::session::tests::session_on(-1);
        s.reports_retry_ns.store(u64::MAX, Ordering::Relaxed);
        send_device(&s);
        assert!(
            !s.device_sent.load(Ordering::Relaxed),
            "held back: not claimed, so a later launch tries"
        );
        s.reports_retry_ns.store(1, Ordering::Relaxed);
        send_device(&s);
        assert!(
            s.device_sent.load(Ordering::Relaxed),
            "tried once the back-off passed"
        );
    }

    #[test]
    fn named_ids_are_the_proto_hash_and_never_zero() {
        assert_eq!(id_of_name(b"noop"), tandem_proto::func_id(b"noop"));
        assert_ne!(id_of_name(b""), 0);
        assert_eq!(unnamed(0x1234) & FUNC_ID_UNNAMED, FUNC_ID_UNNAMED);
        assert_eq!(unnamed(0x1234) & !FUNC_ID_UNNAMED, 0x1234);
    }
}
