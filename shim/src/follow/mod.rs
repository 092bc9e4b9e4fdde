//! Follow mode (`TANDEM_FOLLOW=on`): a job shares a named region of device
//! memory with followers, and a follower maps another job's region read-only,
//! so its outputs track the sharer's live weights (COLTI-style model sharing).
//! The conversation with tandemd is `tandem_proto::follow`; the C API is
//! `tandem_follow_*` in `include/tandem.h`, whose return codes are
//! `tandem_proto::follow::api`.
//!
//! - [`c_api::tandem_follow_alloc`] allocates a region with the VMM API (one
//!   shareable physical allocation, whole granules, mapped read-write at a
//!   fresh reservation) and exports it as a POSIX fd; the program fills it,
//!   then [`c_api::tandem_follow_offer`] offers it to tandemd by name (SHARE + fd),
//!   waiting for the answer at most [`messages::SHARE_TIMEOUT`], so no follower ever
//!   maps it half filled. The memory is the program's whatever the answer
//!   (fail-open); the fd is kept so a named region is offered again, unasked,
//!   to every tandemd the process registers with later (a restart, or one that
//!   was not running at the first offer), unless tandemd refused the name: a
//!   refusal drops it, and the program may offer the region again.
//! - [`c_api::tandem_follow_map`] asks tandemd for a region by name (MAP), retrying
//!   while it is not there yet, imports the fd it gets (MAPPED + fd) and maps
//!   it read-only. The imported handle keeps the memory alive after the sharer
//!   exits: the follower then keeps the last weights. Every tandemd this
//!   process registers with later (a restart) is told of the mapping (HELD),
//!   so its accounting counts it.
//! - [`c_api::tandem_follow_free`] and `cuMemFree` on a region's address release it
//!   (after the context's work drains, like `cuMemFree`), and tell tandemd.
//!
//! Answers arrive on the watcher thread, which hands them to the waiting
//! caller through the [`mailbox`]. Nothing here is on a hot path: `cuMemFree`
//! pays one relaxed load while this process has no region.
//!
//! The files, bottom up: [`regions`] (the table) and [`mailbox`]; [`state`]
//! (what the process holds); [`steps`] (arguments, driver steps) and
//! [`messages`] (talking to tandemd); [`release`]; [`reoffer`] (what a new
//! session is told); [`c_api`]; this module (what the rest of the shim
//! calls: `cuMemFree`, the watcher, fork, exit).

mod c_api;
mod mailbox;
mod messages;
mod regions;
mod release;
mod reoffer;
mod state;
mod steps;

use core::sync::atomic::{AtomicBool, Ordering};
use std::os::fd::OwnedFd;

use tandem_proto::follow::{api, Follow, FollowOp, FollowStatus};

pub use release::free;
pub use reoffer::{session_started, tick};
use state::{regions, ANY, FORKED, MAILBOX, MAPPED_BYTES, SHARED_BYTES};

/// A Follow message from tandemd (watcher thread).
pub fn on_message(f: Follow, fd: Option<OwnedFd>) {
    if f.op.from_shim() {
        crate::log!(Debug, "follow: ignoring a {} from tandemd", f.op.name());
        return;
    }
    let Some((f, fd)) = MAILBOX.deliver(f, fd) else {
        return;
    };
    // Nobody waits for it: a caller that gave up, or a re-offer's answer.
    drop(fd);
    let status = FollowStatus(f.status);
    if f.op == FollowOp::Shared {
        let mut t = regions();
        let base = t.shared().find(|r| r.name == f.name()).map(|r| r.base);
        if let Some(base) = base {
            match api::from_status(status) {
                Some(api::OK) => {
                    t.set_offered(base, true);
                }
                // Final, as for an answer in time.
                Some(code) if messages::refused(code) => t.refused(base, f.name()),
                // NOT_READY: tandemd read the re-offer before our Device.
                None => {
                    drop(t);
                    reoffer::not_ready(base);
                }
                _ => {}
            }
        }
        crate::log!(
            Info,
            "follow: tandemd answered the offer of region {:?}: {}",
            f.name_str(),
            status.name()
        );
    } else {
        // A map granted after its caller gave up: tandemd counts a mapping
        // this process does not hold, unless it holds one of that name.
        let held = regions().followed().any(|r| r.name == f.name());
        let undo = f.op == FollowOp::Mapped && status == FollowStatus::OK && !held;
        if undo {
            if let Some(s) = crate::client::published_session().filter(|s| s.follow) {
                messages::notify(s, FollowOp::Unmap, f.name(), f.len, f.layout);
            }
        }
        crate::log!(
            Debug,
            "follow: late answer to a map of {:?}: {}{}",
            f.name_str(),
            status.name(),
            if undo { " (unmapped)" } else { "" }
        );
    }
}

/// A call returned `CUDA_ERROR_ILLEGAL_ADDRESS`: when this process follows
/// another job's weights, say once that a kernel writing into them is the
/// likely cause.
#[cold]
pub fn illegal_address() {
    static SAID: AtomicBool = AtomicBool::new(false);
    let mapped = MAPPED_BYTES.load(Ordering::Relaxed);
    if mapped == 0 || SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    crate::log::raw_line(format_args!(
        "tandem[{}]: CUDA_ERROR_ILLEGAL_ADDRESS: this process follows {} MiB of another job's \
         weights read-only (TANDEM_FOLLOW=on), and a kernel most likely wrote into them; this \
         process's CUDA context is lost (the sharing job is unaffected). Do not train or modify \
         followed weights; copy them first, or run without following.",
        std::process::id(),
        mapped >> 20
    ));
}

/// One line for the exit dump (`TANDEM_LOG=debug`), when follow mode did anything.
pub fn summary() -> Option<String> {
    let shared = SHARED_BYTES.load(Ordering::Relaxed);
    let mapped = MAPPED_BYTES.load(Ordering::Relaxed);
    (shared != 0 || mapped != 0)
        .then(|| format!("follow shared_bytes={shared} mapped_bytes={mapped}"))
}

/// In a fork child: follow mode is off there (the parent's CUDA state is
/// unusable), and `cuMemFree` goes to the driver.
pub fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
    ANY.store(false, Ordering::Relaxed);
    state::close_exports_in_child();
}
