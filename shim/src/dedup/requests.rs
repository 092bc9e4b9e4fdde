//! The coordinator's requests to this process, on the watcher thread:
//! PUBLISH (make a granule the shared copy), OFFER (compare a granule with a
//! shared copy byte for byte and merge it) and FORGET (a publish given up:
//! the granule is private again). Each answer is built here; `super` sends it.
//!
//! Every remap runs in [`quiesce::exclusive`], as in [`super::merge`].

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus};

use super::granules::Backing;
use super::hash::hash128;
use super::merge::{ready_worker, Worker};
use super::quiesce;
use super::state::{state, State};
use super::stats::{shared_changed, MERGES, PUBLISHED};
use crate::types::CUdeviceptr;
use crate::vmm::{self, Access};

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

/// Granule `d.granule` now maps the shared copy `d.shared_id` through
/// `handle`: its own memory (`own`: it published the copy) or the
/// publisher's (it merged); counted in the shared bytes.
fn now_shared(st: &mut State, d: &Dedup, handle: u64, own: bool) {
    if let Some(g) = st.table.granule(d.granule) {
        g.backing = Backing::Shared {
            handle,
            shared_id: d.shared_id,
            orphan: false,
            own,
        };
    }
    shared_changed(d.len, true);
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
        now_shared(&mut st, d, h, true);
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
    // The length the access change covers is the message's: it must be a
    // granule's, as PUBLISH's must (`private_candidate`).
    if d.len != st.granule as u64 {
        return;
    }
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
            now_shared(&mut st, d, shared, false);
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
