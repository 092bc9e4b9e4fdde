//! The driver work of dedup: backing allocations with VMM granules, hashing
//! them, publishing one as a shared copy, merging one into a shared copy after
//! a byte-for-byte comparison, copy-on-write, and freeing.
//!
//! Every remap of a granule the program may use runs in
//! [`quiesce::exclusive`]: no submission in flight, context drained. The state
//! lock is taken inside it, never the other way round.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus, WithdrawReason};

use super::granules::{Alloc, Backing, Granule, Rule, Verdict};
use super::hash::{hash128, is_uniform};
use super::quiesce::{self, Bracket};
use super::state::{ctx_of, send, send_candidate, state, State, MIN_BYTES};
use super::stats::{shared_changed, BACKED_BYTES, COW_BREAKS, MERGES, PUBLISHED};
use crate::client::session::Session;
use crate::types::{CUdeviceptr, CuResult};
use crate::vmm::{self, Access, DriverError};

/// The watcher thread's own resources.
struct Worker {
    /// Its lowest-priority stream (as an address), created on first use.
    stream: usize,
    a: Vec<u8>,
    b: Vec<u8>,
    /// The scan pass under way, if any.
    pass: Option<Pass>,
}

/// One pass over every granule: the list taken at its start, where it is, and
/// the kernel count it started with (one "check" of the stability rule).
struct Pass {
    list: Vec<(u64, u64)>,
    next: usize,
    kernels: u64,
}

static WORKER: Mutex<Worker> = Mutex::new(Worker {
    stream: 0,
    a: Vec::new(),
    b: Vec::new(),
    pass: None,
});

fn worker() -> MutexGuard<'static, Worker> {
    WORKER.lock().unwrap_or_else(|p| p.into_inner())
}

/// The watcher's resources, ready to work: the dedup context current on this
/// thread, the stream made, both buffers one granule long.
fn ready_worker() -> vmm::Result<MutexGuard<'static, Worker>> {
    let (ctx, granule) = {
        let st = state();
        (st.ctx, st.granule)
    };
    if ctx == 0 {
        return Err(DriverError {
            call: "no dedup-backed allocation yet",
            rc: CuResult::NOT_SUPPORTED,
        });
    }
    let mut w = worker();
    vmm::ctx_set_current(ctx_of(ctx))?;
    if w.stream == 0 {
        w.stream = vmm::low_priority_stream()? as usize;
    }
    w.a.resize(granule, 0);
    w.b.resize(granule, 0);
    Ok(w)
}

// ---- allocation ----

/// A dedup-backed allocation of `bytes`; undone completely on any failure.
pub fn alloc(bytes: usize) -> vmm::Result<CUdeviceptr> {
    let ctx = vmm::ctx_current()? as usize;
    let (device, granule) = {
        let mut st = state();
        if st.ctx == 0 {
            let device = vmm::ctx_device()?;
            st.granule = vmm::granularity(device)?.max(MIN_BYTES);
            st.device = device;
            st.ctx = ctx;
        } else if st.ctx != ctx {
            return Err(DriverError {
                call: "another context than the first dedup allocation's",
                rc: CuResult::NOT_SUPPORTED,
            });
        }
        (st.device, st.granule)
    };
    let n = bytes.div_ceil(granule);
    let span = n * granule;
    let base = vmm::reserve(span, granule)?;
    let mut granules: Vec<Granule> = Vec::with_capacity(n);
    let undo = |granules: &[Granule]| {
        for (i, g) in granules.iter().enumerate() {
            let va = base + (i * granule) as u64;
            let _ = vmm::unmap(va, granule);
            if let Backing::Private(h) = g.backing {
                let _ = vmm::release(h);
            }
        }
        let _ = vmm::address_free(base, span);
    };
    for i in 0..n {
        let va = base + (i * granule) as u64;
        let step = vmm::create(granule, device).and_then(|h| {
            vmm::map(va, granule, h)
                .and_then(|()| vmm::set_access(va, granule, device, Access::ReadWrite))
                .map(|()| h)
                .inspect_err(|_| {
                    let _ = vmm::unmap(va, granule);
                    let _ = vmm::release(h);
                })
        });
        match step {
            Ok(h) => granules.push(Granule::private(h)),
            Err(e) => {
                undo(&granules);
                return Err(e);
            }
        }
    }
    state().table.insert(Alloc {
        base,
        granule_len: granule as u64,
        granules,
    });
    BACKED_BYTES.fetch_add(span as u64, std::sync::atomic::Ordering::Relaxed);
    quiesce::activate();
    Ok(base)
}

/// Releases a dedup-backed allocation. `None` when `dptr` is not one.
pub fn free(dptr: CUdeviceptr) -> Option<CuResult> {
    {
        let mut st = state();
        if !st.table.owns_base(dptr) {
            // Inside one of ours but not its start: the driver's answer for that.
            return st.table.containing(dptr).map(|_| CuResult::INVALID_VALUE);
        }
    }
    // Like cuMemFree, wait for the work that may still use it; nothing may be
    // submitted against it while it is unmapped.
    let out = quiesce::exclusive(false, vmm::ctx_synchronize, || {
        let mut st = state();
        let a = st.table.remove(dptr)?;
        let mut withdraw = Vec::new();
        for (i, g) in a.granules.iter().enumerate() {
            let va = a.base + i as u64 * a.granule_len;
            let _ = vmm::unmap(va, a.granule_len as usize);
            let h = match g.backing {
                Backing::Private(h) => {
                    if g.track.sent {
                        withdraw.push((va, 0));
                    }
                    h
                }
                Backing::Shared {
                    handle,
                    shared_id,
                    orphan,
                    ..
                } => {
                    shared_changed(a.granule_len, false);
                    if !orphan {
                        withdraw.push((va, shared_id));
                    }
                    handle
                }
            };
            let _ = vmm::release(h);
        }
        let _ = vmm::address_free(a.base, a.span() as usize);
        BACKED_BYTES.fetch_sub(a.span(), std::sync::atomic::Ordering::Relaxed);
        Some((a.granule_len, withdraw))
    });
    let (len, withdraw) = match out {
        Ok(Some(x)) => x,
        Ok(None) => return Some(CuResult::INVALID_VALUE),
        Err(e) => return Some(e.rc),
    };
    if let Some(s) = crate::client::published_session() {
        for (va, shared_id) in withdraw {
            let mut d = Dedup::new(DedupOp::Withdraw, va, len);
            d.shared_id = shared_id;
            d.status = WithdrawReason::FREED.0;
            send(s, d, None);
        }
    }
    Some(CuResult::SUCCESS)
}

// ---- writes ----

/// Marks granules a driver copy writes as written by a copy.
pub fn note_copy_write(dst: CUdeviceptr, len: u64) {
    state().table.for_each_overlapping(dst, len, |a, range| {
        for g in &mut a.granules[range] {
            g.written_by_copy = true;
        }
    });
}

/// Gives the process private copies of the shared granules `[dst, dst+len)`
/// touches, before a write. Failures are logged; the write then fails in the
/// driver (read-only mapping) rather than corrupting anything.
pub fn copy_on_write(dst: CUdeviceptr, len: u64) {
    let mut touches_shared = false;
    state().table.for_each_overlapping(dst, len, |a, range| {
        touches_shared |= a.granules[range].iter().any(|g| g.shared_id().is_some());
    });
    if !touches_shared {
        return;
    }
    let in_bracket = quiesce::active();
    let broke = quiesce::exclusive(in_bracket, vmm::ctx_synchronize, || {
        let mut st = state();
        let device = st.device;
        let mut broke = Vec::new();
        st.table.for_each_overlapping(dst, len, |a, range| {
            let glen = a.granule_len;
            for i in range {
                let va = a.base + i as u64 * glen;
                let g = &mut a.granules[i];
                let Backing::Shared {
                    handle,
                    shared_id,
                    orphan,
                    ..
                } = g.backing
                else {
                    continue;
                };
                match private_copy(va, glen as usize, device) {
                    Ok(new) => {
                        let _ = vmm::release(handle);
                        g.backing = Backing::Private(new);
                        g.track.reset();
                        g.written_by_copy = true;
                        shared_changed(glen, false);
                        COW_BREAKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if !orphan {
                            broke.push((va, shared_id, glen));
                        }
                    }
                    Err(e) => crate::log!(
                        Warn,
                        "dedup: could not give this process a private copy of shared memory at \
                         {va:#x} before a write ({e}); the write will fail"
                    ),
                }
            }
        });
        broke
    });
    let broke = match broke {
        Ok(b) => b,
        Err(e) => {
            crate::log!(Warn, "dedup: copy-on-write skipped: {e}");
            return;
        }
    };
    if let Some(s) = crate::client::published_session() {
        for (va, shared_id, glen) in broke {
            let mut d = Dedup::new(DedupOp::Withdraw, va, glen);
            d.shared_id = shared_id;
            d.status = WithdrawReason::COPY_ON_WRITE.0;
            send(s, d, None);
        }
    }
}

/// Replaces the (shared, read-only) mapping at `va` by a new private
/// allocation holding the same bytes, mapped read-write. Context drained.
fn private_copy(va: CUdeviceptr, len: usize, device: i32) -> vmm::Result<u64> {
    let new = vmm::create(len, device)?;
    let scratch = match vmm::reserve(len, len) {
        Ok(s) => s,
        Err(e) => {
            let _ = vmm::release(new);
            return Err(e);
        }
    };
    let copied = vmm::map(scratch, len, new)
        .and_then(|()| vmm::set_access(scratch, len, device, Access::ReadWrite))
        .and_then(|()| vmm::copy_on_device(scratch, va, len));
    let _ = vmm::unmap(scratch, len);
    let _ = vmm::address_free(scratch, len);
    if let Err(e) = copied {
        let _ = vmm::release(new);
        return Err(e);
    }
    remap(va, len, device, new, Access::ReadWrite)?;
    Ok(new)
}

/// Unmaps `va` and maps `to` there with `access`. The caller still owns the
/// old handle. On failure the old mapping is not restored by this function.
fn remap(va: CUdeviceptr, len: usize, device: i32, to: u64, access: Access) -> vmm::Result<()> {
    vmm::unmap(va, len)?;
    vmm::map(va, len, to)?;
    vmm::set_access(va, len, device, access)
}

// ---- scanning ----

/// Hashes up to [`SCAN_BUDGET_BYTES`] of private granules written by copies
/// and sends the candidates and withdrawals that follow.
pub fn scan_step(s: &Session, rule: Rule, new_pass: bool, until: Instant) -> bool {
    if state().table.is_empty() {
        return false;
    }
    let mut w = match ready_worker() {
        Ok(w) => w,
        Err(e) => {
            crate::log!(Debug, "dedup: cannot scan ({e})");
            worker().pass = None;
            return false;
        }
    };
    if new_pass && w.pass.is_none() {
        w.pass = Some(Pass {
            list: state().table.granule_addresses(),
            next: 0,
            kernels: crate::counters::kernels_launched(),
        });
    }
    if w.pass.is_none() {
        return false;
    }
    // The coordinator keys candidates by GPU: make sure it knows ours (this
    // thread has the context current now; a launch may not have sent it yet).
    // Until it has gone out, candidates wait for a later pass.
    let device_out = crate::client::send_device(s);
    let stream = w.stream as crate::types::CUstream;
    let Worker { a, pass, .. } = &mut *w;
    let Some(p) = pass.as_mut() else {
        return false;
    };
    while let Some(&(va, len)) = p.list.get(p.next) {
        p.next += 1;
        let buf = &mut a[..len as usize];
        let read = {
            let _b = Bracket::enter();
            let eligible = {
                let mut st = state();
                st.table
                    .granule(va)
                    .is_some_and(|g| g.written_by_copy && matches!(g.backing, Backing::Private(_)))
            };
            eligible && vmm::read_to_host(buf, va, stream).is_ok()
        };
        if read {
            let verdict = {
                let (h, uniform) = (hash128(buf), is_uniform(buf));
                let mut st = state();
                match st.table.granule(va) {
                    Some(g) if matches!(g.backing, Backing::Private(_)) => {
                        let copied = g.written_by_copy;
                        g.track.observe(h, uniform, p.kernels, copied, rule)
                    }
                    _ => Verdict::Nothing,
                }
            };
            match verdict {
                Verdict::Nothing => {}
                Verdict::Candidate(hash) => {
                    let mut d = Dedup::new(DedupOp::Candidate, va, len);
                    d.hash = hash;
                    if !(device_out && send_candidate(s, d)) {
                        if let Some(g) = state().table.granule(va) {
                            g.track.unsend(hash);
                        }
                    }
                }
                Verdict::Withdraw => {
                    let mut d = Dedup::new(DedupOp::Withdraw, va, len);
                    d.status = WithdrawReason::CHANGED.0;
                    send(s, d, None);
                }
            }
        }
        if Instant::now() >= until {
            break;
        }
    }
    if p.next >= p.list.len() {
        *pass = None;
        return false;
    }
    true
}

/// The granule `d.granule` if it is private, has had a candidate with
/// `d.hash` sent, and has the message's length.
fn private_candidate(st: &mut State, d: &Dedup) -> Option<u64> {
    let g = st.table.granule(d.granule)?;
    let a_len = st.granule as u64;
    match g.backing {
        Backing::Private(h) if g.track.sent_hash() == Some(d.hash) && d.len == a_len => Some(h),
        _ => None,
    }
}

fn answer(op: DedupOp, d: &Dedup, status: DedupStatus) -> Dedup {
    let mut r = Dedup::new(op, d.granule, d.len);
    r.shared_id = d.shared_id;
    r.hash = d.hash;
    r.status = status.0;
    r
}

// ---- publish ----

/// PUBLISH: make granule `d.granule` the shared copy `d.shared_id`. Returns the
/// PUBLISHED answer and, on success, the exported fd to attach.
pub fn publish(d: &Dedup) -> (Dedup, Option<OwnedFd>) {
    let Ok(mut w) = ready_worker() else {
        return (
            answer(DedupOp::Published, d, DedupStatus::DRIVER_ERROR),
            None,
        );
    };
    let stream = w.stream as crate::types::CUstream;
    let out = quiesce::exclusive(false, vmm::ctx_synchronize, || {
        let mut st = state();
        let device = st.device;
        let Some(h) = private_candidate(&mut st, d) else {
            return Err(DedupStatus::GONE);
        };
        let len = d.len as usize;
        // Freeze first, then look: what we hash is what others will map.
        vmm::set_access(d.granule, len, device, Access::Read)
            .map_err(|_| DedupStatus::DRIVER_ERROR)?;
        let same = vmm::read_to_host(&mut w.a[..len], d.granule, stream).is_ok()
            && hash128(&w.a[..len]) == d.hash;
        let exported = if same { vmm::export_fd(h).ok() } else { None };
        let Some(fd) = exported else {
            let _ = vmm::set_access(d.granule, len, device, Access::ReadWrite);
            if let Some(g) = st.table.granule(d.granule) {
                g.track.reset();
            }
            return Err(if same {
                DedupStatus::DRIVER_ERROR
            } else {
                DedupStatus::GONE
            });
        };
        if let Some(g) = st.table.granule(d.granule) {
            g.backing = Backing::Shared {
                handle: h,
                shared_id: d.shared_id,
                orphan: false,
                own: true,
            };
        }
        shared_changed(d.len, true);
        PUBLISHED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(fd)
    });
    match out {
        Ok(Ok(fd)) => (answer(DedupOp::Published, d, DedupStatus::OK), Some(fd)),
        Ok(Err(status)) => (answer(DedupOp::Published, d, status), None),
        Err(_) => (
            answer(DedupOp::Published, d, DedupStatus::DRIVER_ERROR),
            None,
        ),
    }
}

/// FORGET: tandemd gave up the publish of `d.granule` as `d.shared_id`
/// before this process's answer came. If that granule is still frozen for
/// it, it is private memory again: made writable, and counted a candidate
/// afresh (the next scans offer it again). Nothing is answered.
pub fn forget(d: &Dedup) {
    let mut st = state();
    let device = st.device;
    let Some(g) = st.table.granule(d.granule) else {
        return;
    };
    let Backing::Shared {
        handle,
        shared_id,
        own: true,
        ..
    } = g.backing
    else {
        return;
    };
    if shared_id != d.shared_id {
        return;
    }
    // Writable again first: only then is it private in the table.
    if let Err(e) = vmm::set_access(d.granule, d.len as usize, device, Access::ReadWrite) {
        crate::log!(Debug, "dedup: taking back {:#x} failed: {e}", d.granule);
        return;
    }
    g.backing = Backing::Private(handle);
    g.track.reset();
    shared_changed(d.len, false);
    crate::log!(
        Debug,
        "dedup: {:#x} is private again (tandemd gave up its publish)",
        d.granule
    );
}

// ---- offer ----

/// OFFER: compare granule `d.granule` with the shared copy behind `fd` byte for
/// byte and, if equal, map the shared copy there read-only and release the
/// private memory. Returns the RESULT answer.
pub fn offer(d: &Dedup, fd: Option<OwnedFd>) -> (Dedup, Option<OwnedFd>) {
    let started = Instant::now();
    let result = |status: DedupStatus| {
        let mut r = answer(DedupOp::Result, d, status);
        r.elapsed_ns = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        (r, None)
    };
    let Some(fd) = fd else {
        return result(DedupStatus::DRIVER_ERROR);
    };
    let (device, known) = {
        let mut st = state();
        let known = private_candidate(&mut st, d).is_some();
        (st.device, known)
    };
    if !known {
        return result(DedupStatus::GONE);
    }
    let Ok(mut w) = ready_worker() else {
        return result(DedupStatus::DRIVER_ERROR);
    };
    let stream = w.stream as crate::types::CUstream;
    let len = d.len as usize;
    let Ok(shared) = vmm::import_fd(fd.as_fd()) else {
        return result(DedupStatus::DRIVER_ERROR);
    };
    drop(fd);
    // Look at the shared copy through a scratch mapping of our own.
    let scratch = vmm::reserve(len, len).and_then(|sc| {
        vmm::map(sc, len, shared)
            .and_then(|()| vmm::set_access(sc, len, device, Access::Read))
            .map(|()| sc)
            .inspect_err(|_| {
                let _ = vmm::unmap(sc, len);
                let _ = vmm::address_free(sc, len);
            })
    });
    let Ok(scratch) = scratch else {
        let _ = vmm::release(shared);
        return result(DedupStatus::DRIVER_ERROR);
    };
    let Worker { a, b, .. } = &mut *w;
    let out = quiesce::exclusive(false, vmm::ctx_synchronize, || {
        let mut st = state();
        let Some(private) = private_candidate(&mut st, d) else {
            return DedupStatus::GONE;
        };
        if vmm::set_access(d.granule, len, device, Access::Read).is_err() {
            return DedupStatus::DRIVER_ERROR;
        }
        let read = vmm::read_to_host(&mut a[..len], d.granule, stream)
            .and_then(|()| vmm::read_to_host(&mut b[..len], scratch, stream));
        let status = match read {
            Err(_) => DedupStatus::DRIVER_ERROR,
            Ok(()) if a[..len] != b[..len] => DedupStatus::MISMATCH,
            Ok(()) => match merge_mapping(d.granule, len, device, shared, private) {
                Ok(()) => DedupStatus::OK,
                Err(e) => {
                    crate::log!(Debug, "dedup: merging {:#x} failed: {e}", d.granule);
                    DedupStatus::DRIVER_ERROR
                }
            },
        };
        if status == DedupStatus::OK {
            let _ = vmm::release(private);
            if let Some(g) = st.table.granule(d.granule) {
                g.backing = Backing::Shared {
                    handle: shared,
                    shared_id: d.shared_id,
                    orphan: false,
                    own: false,
                };
            }
            shared_changed(d.len, true);
            MERGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else {
            // Our own memory is mapped there again: writable, as it was.
            let _ = vmm::set_access(d.granule, len, device, Access::ReadWrite);
            if status == DedupStatus::MISMATCH {
                if let Some(g) = st.table.granule(d.granule) {
                    g.track.reset();
                }
            }
        }
        status
    });
    let _ = vmm::unmap(scratch, len);
    let _ = vmm::address_free(scratch, len);
    let status = out.unwrap_or(DedupStatus::DRIVER_ERROR);
    if status != DedupStatus::OK {
        let _ = vmm::release(shared);
    }
    result(status)
}

/// Moves the mapping at `va` from our `private` handle to `shared`, read-only.
/// On failure the private handle is mapped there again (the caller makes it
/// writable); if even that fails the range is left unmapped and said loudly.
fn merge_mapping(
    va: CUdeviceptr,
    len: usize,
    device: i32,
    shared: u64,
    private: u64,
) -> vmm::Result<()> {
    vmm::unmap(va, len)?;
    let mapped = vmm::map(va, len, shared);
    let res = mapped.and_then(|()| vmm::set_access(va, len, device, Access::Read));
    if let Err(e) = res {
        if mapped.is_ok() {
            let _ = vmm::unmap(va, len);
        }
        if let Err(e2) = vmm::map(va, len, private) {
            crate::log!(
                Error,
                "dedup: merging {va:#x} failed ({e}) and the private memory could not be mapped \
                 back ({e2}); this process will fault on that range"
            );
        }
        return Err(e);
    }
    Ok(())
}
