//! The driver work of dedup on the program's side: backing allocations with
//! VMM granules, hashing them, copy-on-write, and freeing (the coordinator's
//! requests, publishing and merging, are [`super::requests`]).
//!
//! Every remap of a granule the program may use runs in
//! [`quiesce::exclusive`]: no submission in flight, context drained. The state
//! lock is taken inside it, never the other way round.

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tandem_proto::dedup::{Dedup, DedupOp, WithdrawReason};

use super::granules::{Alloc, Backing, Granule, Rule, Verdict};
use super::hash::{hash128, is_uniform};
use super::quiesce::{self, Bracket};
use super::state::{ctx_of, send, send_candidate, state, MIN_BYTES};
use super::stats::{shared_changed, BACKED_BYTES, COW_BREAKS};
use crate::client::session::Session;
use crate::types::{CUdeviceptr, CuResult};
use crate::vmm::{self, Access, DriverError};

/// The watcher thread's own resources.
pub(super) struct Worker {
    /// Its lowest-priority stream (as an address), created on first use.
    pub(super) stream: usize,
    /// Two granule-sized host buffers (hashing, comparing).
    pub(super) a: Vec<u8>,
    pub(super) b: Vec<u8>,
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
pub(super) fn ready_worker() -> vmm::Result<MutexGuard<'static, Worker>> {
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
            let granularity = vmm::granularity(device)?;
            // 0: this device's allocations stay plain (said once, here).
            st.granule = granule_for(granularity).unwrap_or_else(|| {
                unsupported_granularity(granularity);
                0
            });
            st.device = device;
            st.ctx = ctx;
        } else if st.ctx != ctx {
            return Err(DriverError {
                call: "another context than the first dedup allocation's",
                rc: CuResult::NOT_SUPPORTED,
            });
        }
        if st.granule == 0 {
            return Err(DriverError {
                call: "a VMM granularity that 2 MiB granules do not fit",
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

/// The granule dedup backs allocations with on a device whose VMM
/// granularity is `granularity`: always [`MIN_BYTES`] (2 MiB), the one length
/// tandemd's index takes (`coordinator/src/dedup/entries.rs`,
/// `GRANULE_LEN`), so `None` where 2 MiB is not a whole number of the
/// device's granules: its candidates would all be refused.
pub(super) fn granule_for(granularity: usize) -> Option<usize> {
    (granularity != 0 && granularity <= MIN_BYTES && MIN_BYTES.is_multiple_of(granularity))
        .then_some(MIN_BYTES)
}

/// Says once that this device's allocations are not deduplicated.
#[cold]
fn unsupported_granularity(granularity: usize) {
    crate::log!(
        Warn,
        "weight sharing is on (TANDEM_SHARE_WEIGHTS), but this GPU's VMM allocation granularity \
         is {granularity} bytes, and tandem shares memory in 2 MiB granules that must be a whole \
         number of the GPU's; this process's weights are not deduplicated (it runs as without \
         sharing)"
    );
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
