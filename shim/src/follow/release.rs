//! Releasing a region: `cuMemFree` of its address or `tandem_follow_free`.

use core::sync::atomic::Ordering;

use tandem_proto::follow::FollowOp;

use super::messages::notify;
use super::regions::Role;
use super::state::{regions, ANY, MAPPED_BYTES, SHARED_BYTES};
use crate::types::{CUdeviceptr, CuResult};
use crate::vmm;

/// `cuMemFree_v2` of `dptr`: `None` when it is not in a region (the driver
/// frees it), else the result of releasing the region that starts there.
pub fn free(dptr: CUdeviceptr) -> Option<CuResult> {
    if !ANY.load(Ordering::Acquire) {
        return None;
    }
    let r = {
        let mut t = regions();
        if !t.contains(dptr) {
            return None;
        }
        let r = t.remove(dptr);
        ANY.store(!t.is_empty(), Ordering::Release);
        r
    };
    // Inside a region but not its start: the driver's answer for that.
    let Some(r) = r else {
        return Some(CuResult::INVALID_VALUE);
    };
    // Like cuMemFree: the work that may still use it drains first, in the
    // region's own context (a free from a thread where another context, or
    // none, is current, e.g. a garbage collector's: switched and restored).
    let prev = vmm::ctx_current().ok();
    let switch = prev.map(|c| c as usize) != Some(r.ctx);
    if switch {
        let _ = vmm::ctx_set_current(r.ctx as crate::types::CUcontext);
    }
    let drained = vmm::ctx_synchronize();
    let span = r.span as usize;
    let released = vmm::unmap(r.base, span)
        .and_then(|()| vmm::release(r.handle))
        .and_then(|()| vmm::address_free(r.base, span));
    if let (true, Some(c)) = (switch, prev) {
        let _ = vmm::ctx_set_current(c);
    }
    let counter = match r.role {
        Role::Shared { .. } => &SHARED_BYTES,
        Role::Followed => &MAPPED_BYTES,
    };
    counter.fetch_sub(r.span, Ordering::Relaxed);
    // A named region tandemd has not (yet) been seen to take may still be
    // taken: an offer that timed out, whose answer is late or lost. The
    // UNSHARE goes after its SHARE, so tandemd withdraws it either way (and
    // ignores it, counted, for a name this client does not share).
    let op = match r.role {
        Role::Shared { .. } if !r.name.is_empty() => Some(FollowOp::Unshare),
        Role::Shared { .. } => None,
        Role::Followed => Some(FollowOp::Unmap),
    };
    if let (Some(op), Some(s)) = (op, crate::client::published_session()) {
        if s.follow {
            notify(s, op, &r.name, r.bytes, r.layout);
        }
    }
    match drained.and(released) {
        Ok(()) => Some(CuResult::SUCCESS),
        Err(e) => {
            crate::log!(Debug, "follow: releasing {:?}: {e}", r.name_str());
            Some(e.rc)
        }
    }
}
