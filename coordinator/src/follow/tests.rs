//! Unit tests of [`Regions`]: every rule of the conversation, the answers,
//! the counters, and that region fds are closed when a region goes (memfds
//! named per test, counted in `/proc/self/fd`). The registry is audited
//! after every step.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use tandem_proto::follow::{Follow, FollowOp, FollowStatus};

use super::config::FollowLimits;
use super::regions::{Gone, RegionKey, Regions, MALFORMED, REFUSALS, UNOWNED_UNSHARE};

const G: &str = "uid:1000";
const GPU: u64 = 7;
const LEN: u64 = 4 << 20;
const LAYOUT: [u8; 16] = *b"resnet50-layout1";

/// A memfd named `name` (standing for a region's exported device memory).
fn memfd(name: &str) -> OwnedFd {
    let c = CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name; the result is checked.
    let raw = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(
        raw >= 0,
        "memfd_create: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a fresh fd that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

/// How many fds of this process point at memfd `name`.
fn open_memfds(name: &str) -> usize {
    let needle = format!("/memfd:{name} ");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|l| format!("{} ", l.display()).starts_with(&needle))
        .count()
}

/// The inode behind `fd` (to tell which file an fd is).
fn inode(fd: BorrowedFd<'_>) -> u64 {
    std::fs::File::from(fd.try_clone_to_owned().unwrap())
        .metadata()
        .unwrap()
        .ino()
}

fn msg(op: FollowOp, request: u64, name: &str, len: u64) -> Follow {
    let mut f = Follow::new(op, request, name.as_bytes(), len).unwrap();
    f.layout = LAYOUT;
    f
}

/// `a` answers `req` with `status`: same request, name, len and layout.
fn answers(req: &Follow, a: &Follow, status: FollowStatus) {
    let op = if req.op == FollowOp::Share {
        FollowOp::Shared
    } else {
        FollowOp::Mapped
    };
    assert_eq!(a.op, op, "{req:?}");
    assert_eq!(
        FollowStatus(a.status),
        status,
        "{} of {}: got {}",
        req.op.name(),
        req.name_str(),
        FollowStatus(a.status).name()
    );
    assert_eq!(
        (a.request, a.name(), a.len, a.layout),
        (req.request, req.name(), req.len, req.layout)
    );
}

struct T {
    r: Regions,
    now: u64,
    request: u64,
}

impl T {
    fn with(limits: FollowLimits) -> T {
        T {
            r: Regions::new(limits),
            now: 1_000,
            request: 0,
        }
    }

    fn new() -> T {
        T::with(FollowLimits::default())
    }

    fn next(&mut self) -> u64 {
        self.request += 1;
        self.request
    }

    /// SHARE of `name` (LEN bytes, LAYOUT) by `client` in `group` on `gpu`.
    fn share_in(
        &mut self,
        client: u64,
        group: Option<&str>,
        gpu: Option<u64>,
        name: &str,
        fd: Option<OwnedFd>,
    ) -> FollowStatus {
        let req = msg(FollowOp::Share, self.next(), name, LEN);
        self.now += 1;
        let a = self
            .r
            .share(self.now, client, 4000 + client as u32, group, gpu, &req, fd);
        assert_eq!(a.op, FollowOp::Shared);
        answers(&req, &a, FollowStatus(a.status));
        self.r.audit();
        FollowStatus(a.status)
    }

    fn share(&mut self, client: u64, name: &str, fd: OwnedFd) -> FollowStatus {
        self.share_in(client, Some(G), Some(GPU), name, Some(fd))
    }

    /// MAP of `req`; returns the status and the inode of the fd, if one came.
    fn map_req(
        &mut self,
        client: u64,
        group: Option<&str>,
        gpu: Option<u64>,
        req: &Follow,
    ) -> (FollowStatus, Option<u64>) {
        let (a, fd) = self.r.map(client, group, gpu, req);
        let st = FollowStatus(a.status);
        answers(req, &a, st);
        assert_eq!(fd.is_some(), st == FollowStatus::OK, "an fd exactly on OK");
        let ino = fd.map(inode);
        self.r.audit();
        (st, ino)
    }

    fn map(&mut self, client: u64, name: &str) -> (FollowStatus, Option<u64>) {
        let req = msg(FollowOp::Map, self.next(), name, LEN);
        self.map_req(client, Some(G), Some(GPU), &req)
    }

    fn unshare(&mut self, client: u64, name: &str) -> Vec<Gone> {
        let g = self.r.unshare(client, &msg(FollowOp::Unshare, 0, name, 1));
        self.r.audit();
        g
    }

    fn unmap(&mut self, client: u64, name: &str) -> bool {
        let m = self.r.unmap(client, &msg(FollowOp::Unmap, 0, name, 1));
        self.r.audit();
        m
    }

    fn leave(&mut self, client: u64) -> Vec<Gone> {
        let g = self.r.leave(client);
        self.r.audit();
        g
    }

    fn refusals(&self, name: &str) -> u64 {
        self.r.counters().refusals[name]
    }

    fn region(&self, name: &str) -> &super::Region {
        self.r
            .region(&RegionKey::new(G, GPU, name.as_bytes()))
            .unwrap_or_else(|| panic!("no region {name}"))
    }
}

#[test]
fn share_needs_an_fd_a_gpu_and_permission_and_refusals_close_the_fd() {
    let mut t = T::new();
    assert_eq!(
        t.share_in(1, Some(G), Some(GPU), "w", None),
        FollowStatus::NO_FD
    );
    let fd = memfd("tfu-share-refused");
    assert_eq!(open_memfds("tfu-share-refused"), 1);
    assert_eq!(
        t.share_in(1, Some(G), None, "w", Some(fd)),
        FollowStatus::NOT_READY
    );
    assert_eq!(
        open_memfds("tfu-share-refused"),
        0,
        "NOT_READY drops the fd"
    );
    let fd = memfd("tfu-share-refused");
    assert_eq!(
        t.share_in(1, None, Some(GPU), "w", Some(fd)),
        FollowStatus::NOT_PERMITTED,
        "not granted"
    );
    assert_eq!(open_memfds("tfu-share-refused"), 0);
    let mut off = T::with(FollowLimits {
        enabled: false,
        ..FollowLimits::default()
    });
    let fd = memfd("tfu-share-refused");
    assert_eq!(
        off.share_in(1, Some(G), Some(GPU), "w", Some(fd)),
        FollowStatus::NOT_PERMITTED,
        "disabled"
    );
    assert_eq!(open_memfds("tfu-share-refused"), 0);
    assert_eq!((t.r.held_fds(), t.r.regions().count()), (0, 0));
    assert_eq!(t.r.known_clients(), 0, "a refused client leaves no entry");
    assert_eq!(t.refusals("no_fd"), 1);
    assert_eq!(t.refusals("not_ready"), 1);
    assert_eq!(t.refusals("not_permitted"), 1);
    assert_eq!(t.r.counters().shares, 0);
}

#[test]
fn a_shared_region_is_mapped_with_its_own_fd_and_counted() {
    let mut t = T::new();
    let fd = memfd("tfu-share-map");
    let ino = inode(fd.as_fd());
    assert_eq!(t.share(1, "gpt2", fd), FollowStatus::OK);
    assert_eq!(open_memfds("tfu-share-map"), 1, "the registry holds it");
    assert_eq!(t.r.held_fds(), 1);
    let r = t.region("gpt2");
    assert_eq!(
        (r.owner, r.owner_pid, r.len, r.layout, r.maps),
        (1, 4001, LEN, LAYOUT, 0)
    );
    assert_eq!(r.created_ns, 1_001, "the injected time");
    assert!(r.followers.is_empty());
    assert_eq!(t.map(2, "gpt2"), (FollowStatus::OK, Some(ino)));
    assert_eq!(t.map(3, "gpt2"), (FollowStatus::OK, Some(ino)));
    assert_eq!(t.map(3, "gpt2"), (FollowStatus::OK, Some(ino)), "again");
    let r = t.region("gpt2");
    assert_eq!(r.followers.iter().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(r.maps, 3);
    assert_eq!(t.r.counters().maps, 3);
    assert_eq!(t.r.counters().shares, 1);
    assert_eq!(t.r.client(1).shared_bytes, LEN);
    assert_eq!(t.r.client(1).regions, 1);
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    assert_eq!(t.r.client(3).mapped_bytes, LEN, "one mapping per region");
    assert_eq!((t.r.shared_bytes(), t.r.mapped_bytes()), (LEN, 2 * LEN));
    // The sharer may map its own region.
    assert_eq!(t.map(1, "gpt2"), (FollowStatus::OK, Some(ino)));
    assert_eq!(t.region("gpt2").followers.len(), 3);
    assert_eq!(
        open_memfds("tfu-share-map"),
        1,
        "the map lent, never kept, an fd"
    );
}

#[test]
fn map_is_refused_without_permission_gpu_region_or_matching_shape() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-map-refused")), FollowStatus::OK);
    let good = msg(FollowOp::Map, 9, "w", LEN);
    assert_eq!(
        t.map_req(2, None, Some(GPU), &good).0,
        FollowStatus::NOT_PERMITTED,
        "not granted"
    );
    // Not granted wins over a GPU not known yet.
    assert_eq!(
        t.map_req(2, None, None, &good).0,
        FollowStatus::NOT_PERMITTED
    );
    assert_eq!(
        t.map_req(2, Some(G), None, &good).0,
        FollowStatus::NOT_READY
    );
    assert_eq!(t.map(2, "other").0, FollowStatus::NOT_FOUND, "another name");
    assert_eq!(
        t.map_req(2, Some("uid:1001"), Some(GPU), &good).0,
        FollowStatus::NOT_FOUND,
        "another group"
    );
    assert_eq!(
        t.map_req(2, Some(G), Some(GPU + 1), &good).0,
        FollowStatus::NOT_FOUND,
        "another GPU"
    );
    let mut layout = good;
    layout.layout[0] ^= 1;
    assert_eq!(
        t.map_req(2, Some(G), Some(GPU), &layout).0,
        FollowStatus::MISMATCH
    );
    let len = msg(FollowOp::Map, 10, "w", LEN + (2 << 20));
    assert_eq!(
        t.map_req(2, Some(G), Some(GPU), &len).0,
        FollowStatus::MISMATCH
    );
    assert!(t.region("w").followers.is_empty());
    assert_eq!(t.r.client(2).mapped_bytes, 0);
    assert_eq!(t.r.counters().maps, 0);
    for (name, n) in [
        ("not_permitted", 2),
        ("not_ready", 1),
        ("not_found", 3),
        ("mismatch", 2),
    ] {
        assert_eq!(t.refusals(name), n, "{name}");
    }
    let mut off = T::with(FollowLimits {
        enabled: false,
        ..FollowLimits::default()
    });
    assert_eq!(
        off.map_req(2, Some(G), Some(GPU), &good).0,
        FollowStatus::NOT_PERMITTED,
        "disabled"
    );
    // And the right request still maps.
    assert_eq!(t.map_req(2, Some(G), Some(GPU), &good).0, FollowStatus::OK);
}

#[test]
fn a_name_held_by_another_client_is_taken_but_free_in_other_groups_and_gpus() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-taken")), FollowStatus::OK);
    assert_eq!(
        t.share(2, "w", memfd("tfu-taken")),
        FollowStatus::NAME_TAKEN
    );
    assert_eq!(open_memfds("tfu-taken"), 1, "the refused fd is closed");
    assert_eq!(t.region("w").owner, 1);
    assert_eq!(t.refusals("name_taken"), 1);
    assert_eq!(
        t.share_in(2, Some("other"), Some(GPU), "w", Some(memfd("tfu-taken"))),
        FollowStatus::OK
    );
    assert_eq!(
        t.share_in(2, Some(G), Some(GPU + 1), "w", Some(memfd("tfu-taken"))),
        FollowStatus::OK
    );
    assert_eq!(t.r.held_fds(), 3);
    assert_eq!(open_memfds("tfu-taken"), 3);
}

#[test]
fn re_sharing_a_name_replaces_the_region_and_its_followers_keep_their_mapping() {
    let mut t = T::new();
    let old = memfd("tfu-replace-old");
    let old_ino = inode(old.as_fd());
    assert_eq!(t.share(1, "w", old), FollowStatus::OK);
    assert_eq!(t.map(2, "w"), (FollowStatus::OK, Some(old_ino)));
    let old_id = t.region("w").id;
    let new = memfd("tfu-replace-new");
    let new_ino = inode(new.as_fd());
    assert_eq!(t.share(1, "w", new), FollowStatus::OK);
    assert_eq!(open_memfds("tfu-replace-old"), 0, "the old fd is closed");
    assert_eq!(open_memfds("tfu-replace-new"), 1);
    assert_eq!(t.r.held_fds(), 1);
    let r = t.region("w");
    assert_ne!(r.id, old_id, "a new region");
    assert!(r.followers.is_empty() && r.maps == 0);
    assert_eq!(
        t.r.client(2).mapped_bytes,
        LEN,
        "the follower keeps what it mapped"
    );
    assert_eq!(t.r.counters().shares, 2);
    // A replace is not one more region: at the limit it is still allowed.
    let mut one = T::with(FollowLimits {
        enabled: true,
        max_regions_per_client: 1,
    });
    assert_eq!(
        one.share(1, "w", memfd("tfu-replace-limit")),
        FollowStatus::OK
    );
    assert_eq!(
        one.share(1, "w", memfd("tfu-replace-limit")),
        FollowStatus::OK
    );
    assert_eq!(open_memfds("tfu-replace-limit"), 1);
    // The follower maps the new region: its old mapping is replaced.
    assert_eq!(t.map(2, "w"), (FollowStatus::OK, Some(new_ino)));
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    assert!(t.unmap(2, "w"));
    assert_eq!(t.r.client(2).mapped_bytes, 0);
}

#[test]
fn a_client_shares_at_most_the_configured_number_of_regions() {
    let mut t = T::with(FollowLimits {
        enabled: true,
        max_regions_per_client: 2,
    });
    assert_eq!(t.share(1, "a", memfd("tfu-limit")), FollowStatus::OK);
    assert_eq!(t.share(1, "b", memfd("tfu-limit")), FollowStatus::OK);
    assert_eq!(t.share(1, "c", memfd("tfu-limit")), FollowStatus::LIMIT);
    assert_eq!(open_memfds("tfu-limit"), 2, "the refused fd is closed");
    assert_eq!(t.refusals("limit"), 1);
    // Another client has its own allowance.
    assert_eq!(t.share(2, "c", memfd("tfu-limit")), FollowStatus::OK);
    // Freeing one makes room.
    assert_eq!(t.unshare(1, "a").len(), 1);
    assert_eq!(t.share(1, "c2", memfd("tfu-limit")), FollowStatus::OK);
    // A reload lowers the limit: later shares see it; regions stay.
    t.r.set_limits(FollowLimits {
        enabled: true,
        max_regions_per_client: 1,
    });
    assert_eq!(t.share(2, "d", memfd("tfu-limit")), FollowStatus::LIMIT);
    assert_eq!(t.r.client(1).regions, 2);
}

#[test]
fn unshare_closes_the_fd_and_an_unowned_unshare_is_counted_and_ignored() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-unshare")), FollowStatus::OK);
    assert_eq!(t.map(2, "w").0, FollowStatus::OK);
    assert!(t.unshare(2, "w").is_empty(), "not its region");
    assert!(t.unshare(1, "nope").is_empty(), "no such name");
    assert_eq!(t.refusals(UNOWNED_UNSHARE), 2);
    assert_eq!(t.region("w").owner, 1);
    assert_eq!(open_memfds("tfu-unshare"), 1);
    let gone = t.unshare(1, "w");
    assert_eq!(
        gone,
        [Gone {
            key: RegionKey::new(G, GPU, b"w"),
            owner: 1,
            len: LEN,
            followers: 1
        }]
    );
    assert_eq!(open_memfds("tfu-unshare"), 0);
    assert_eq!((t.r.held_fds(), t.r.shared_bytes()), (0, 0));
    assert_eq!(t.r.client(1).shared_bytes, 0);
    assert_eq!(
        t.r.client(2).mapped_bytes,
        LEN,
        "the follower keeps its mapping"
    );
    assert_eq!(t.map(3, "w").0, FollowStatus::NOT_FOUND);
    // The name is free again, for anyone in the group.
    assert_eq!(t.share(3, "w", memfd("tfu-unshare")), FollowStatus::OK);
}

#[test]
fn unmap_drops_the_follower_and_its_bytes() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-unmap")), FollowStatus::OK);
    assert_eq!(t.map(2, "w").0, FollowStatus::OK);
    assert!(!t.unmap(2, "other"), "not mapped: ignored");
    assert!(!t.unmap(3, "w"), "unknown client: ignored");
    assert_eq!(t.r.counters().unmaps, 0);
    assert!(t.unmap(2, "w"));
    assert!(t.region("w").followers.is_empty());
    assert_eq!(t.region("w").maps, 1, "the total stays");
    assert_eq!((t.r.client(2).mapped_bytes, t.r.mapped_bytes()), (0, 0));
    assert_eq!(t.r.counters().unmaps, 1);
    assert!(!t.unmap(2, "w"), "twice: ignored");
    assert_eq!(t.r.known_clients(), 1, "the follower's entry is gone");
}

#[test]
fn leaving_closes_the_regions_and_followers_mapped_bytes_outlive_the_owner() {
    let mut t = T::new();
    assert_eq!(t.share(1, "a", memfd("tfu-leave")), FollowStatus::OK);
    assert_eq!(t.share(1, "b", memfd("tfu-leave")), FollowStatus::OK);
    assert_eq!(t.share(2, "c", memfd("tfu-leave")), FollowStatus::OK);
    assert_eq!(t.map(2, "a").0, FollowStatus::OK);
    assert_eq!(t.map(3, "a").0, FollowStatus::OK);
    assert_eq!(t.map(1, "c").0, FollowStatus::OK);
    assert_eq!(open_memfds("tfu-leave"), 3);
    let mut gone = t.leave(1);
    gone.sort_by(|x, y| x.key.cmp(&y.key));
    assert_eq!(
        gone.iter()
            .map(|g| (g.key.name_str(), g.followers))
            .collect::<Vec<_>>(),
        [("a".to_string(), 2), ("b".to_string(), 0)]
    );
    assert_eq!(open_memfds("tfu-leave"), 1, "the owner's fds are closed");
    assert_eq!(t.r.held_fds(), 1);
    assert!(
        t.region("c").followers.is_empty(),
        "its follower entry is gone"
    );
    assert_eq!(t.r.client(1), Default::default());
    // The followers keep what they mapped until they unmap or leave.
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    assert_eq!(t.r.client(3).mapped_bytes, LEN);
    assert_eq!(t.r.mapped_bytes(), 2 * LEN);
    assert_eq!(t.map(3, "a").0, FollowStatus::NOT_FOUND);
    assert!(t.unmap(3, "a"));
    assert_eq!(t.r.client(3).mapped_bytes, 0);
    t.leave(2);
    assert_eq!(open_memfds("tfu-leave"), 0);
    assert_eq!((t.r.known_clients(), t.r.mapped_bytes()), (0, 0));
    assert!(t.leave(9).is_empty(), "an unknown client");
}

#[test]
fn a_new_region_of_a_gone_name_is_not_unmapped_by_an_old_follower() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-generations")), FollowStatus::OK);
    assert_eq!(t.map(2, "w").0, FollowStatus::OK);
    t.leave(1);
    assert_eq!(t.share(3, "w", memfd("tfu-generations")), FollowStatus::OK);
    assert_eq!(t.map(4, "w").0, FollowStatus::OK);
    // Client 2 still maps the old region: its UNMAP does not touch the new one.
    assert!(t.unmap(2, "w"));
    assert_eq!(
        t.region("w").followers.iter().copied().collect::<Vec<_>>(),
        [4]
    );
    t.leave(2);
    assert_eq!(t.region("w").followers.len(), 1);
}

#[test]
fn disabling_refuses_later_messages_and_keeps_regions() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-reload")), FollowStatus::OK);
    assert_eq!(t.map(2, "w").0, FollowStatus::OK);
    t.r.set_limits(FollowLimits {
        enabled: false,
        ..FollowLimits::default()
    });
    assert!(!t.r.limits().enabled);
    assert_eq!(t.map(3, "w").0, FollowStatus::NOT_PERMITTED);
    assert_eq!(
        t.share(1, "x", memfd("tfu-reload")),
        FollowStatus::NOT_PERMITTED
    );
    assert_eq!(t.region("w").followers.len(), 1, "the region stays");
    assert_eq!(open_memfds("tfu-reload"), 1);
    // Cleaning up is still allowed.
    assert!(t.unmap(2, "w"));
    assert_eq!(t.unshare(1, "w").len(), 1);
    assert_eq!(open_memfds("tfu-reload"), 0);
}

#[test]
fn an_undelivered_map_is_not_a_mapping() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-undelivered")), FollowStatus::OK);
    let req = msg(FollowOp::Map, 5, "w", LEN);
    let (answer, _) = t.r.map(2, Some(G), Some(GPU), &req);
    t.r.undelivered_map(2, G, GPU, &answer);
    t.r.audit();
    assert!(t.region("w").followers.is_empty());
    assert_eq!((t.region("w").maps, t.r.counters().maps), (0, 0));
    assert_eq!(t.r.client(2).mapped_bytes, 0);
    assert_eq!(t.r.known_clients(), 1);
}

#[test]
fn counters_list_every_refusal_and_count_malformed_messages() {
    let mut t = T::new();
    let names: Vec<&str> = t.r.counters().refusals.keys().copied().collect();
    let mut all = REFUSALS.to_vec();
    all.sort_unstable();
    assert_eq!(names, all, "every refusal listed, at 0");
    assert!(t.r.counters().refusals.values().all(|&n| n == 0));
    assert!(REFUSALS.contains(&"no_fd") && !REFUSALS.contains(&"ok"));
    t.r.malformed();
    t.r.malformed();
    assert_eq!(t.refusals(MALFORMED), 2);
    assert_eq!(t.r.counters().shares + t.r.counters().maps, 0);
}

#[test]
fn stats_name_each_region_s_gpu_and_the_owner_s_ordinal_on_it() {
    use super::report::{annotate, Placement};
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-stats")), FollowStatus::OK);
    assert_eq!(
        t.share_in(
            2,
            Some("models"),
            Some(GPU + 1),
            "v",
            Some(memfd("tfu-stats"))
        ),
        FollowStatus::OK
    );
    assert_eq!(t.map(3, "w").0, FollowStatus::OK);
    assert!(t.unshare(9, "x").is_empty());
    let place = Placement {
        gpus: [(GPU, "GPU-a".to_string())].into_iter().collect(),
        // Client 2 has moved to another GPU since it shared: no ordinal.
        devices: [(1, (GPU, 3)), (2, (GPU, 0))].into_iter().collect(),
    };
    let f = annotate(&t.r, true, &place, &mut []);
    assert!(f.enabled);
    let rows: Vec<_> = f
        .regions
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.group.as_str(),
                r.gpu.as_deref(),
                r.gpu_ordinal,
                r.owner,
                r.owner_pid,
                r.bytes,
                r.followers,
                r.maps,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("v", "models", None, None, 2, 4002, LEN, 0, 0),
            ("w", G, Some("GPU-a"), Some(3), 1, 4001, LEN, 1, 1),
        ]
    );
    assert_eq!((f.shared_bytes, f.mapped_bytes), (2 * LEN, LEN));
    assert_eq!((f.shares, f.maps, f.unmaps), (2, 1, 0));
    assert_eq!(f.refusals.len(), REFUSALS.len());
    assert_eq!(f.refusals[UNOWNED_UNSHARE], 1);
}

// ---- HELD: a follower's mapping reported again after a restart ----

impl T {
    /// HELD of `name` (`len` bytes with `layout`) by `client` in `group` on `gpu`.
    fn held_in(
        &mut self,
        client: u64,
        group: Option<&str>,
        gpu: Option<u64>,
        name: &str,
        len: u64,
        layout: [u8; 16],
    ) -> Result<bool, FollowStatus> {
        let mut req = msg(FollowOp::Held, 0, name, len);
        req.layout = layout;
        let r = self.r.held(client, group, gpu, &req);
        self.r.audit();
        r
    }

    fn held(&mut self, client: u64, name: &str) -> Result<bool, FollowStatus> {
        self.held_in(client, Some(G), Some(GPU), name, LEN, LAYOUT)
    }

    /// SHARE of `name` with `len` and `layout` by `client` (G, GPU).
    fn share_shaped(
        &mut self,
        client: u64,
        name: &str,
        len: u64,
        layout: [u8; 16],
        fd: OwnedFd,
    ) -> FollowStatus {
        let mut req = msg(FollowOp::Share, self.next(), name, len);
        req.layout = layout;
        self.now += 1;
        let a = self
            .r
            .share(self.now, client, 4000, Some(G), Some(GPU), &req, Some(fd));
        answers(&req, &a, FollowStatus(a.status));
        self.r.audit();
        FollowStatus(a.status)
    }

    fn followers(&self, name: &str) -> Vec<u64> {
        self.region(name).followers.iter().copied().collect()
    }

    /// No map was counted anywhere.
    fn no_maps(&self) {
        assert_eq!(self.r.counters().maps, 0, "a HELD is not a map");
        assert!(self.r.regions().all(|(_, r)| r.maps == 0), "nor a region's");
    }
}

#[test]
fn a_held_mapping_before_the_share_is_counted_and_linked_when_the_region_comes() {
    let mut t = T::new();
    assert_eq!(t.held(2, "w"), Ok(false), "no region yet: unlinked");
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    assert_eq!(t.r.mapped_bytes(), LEN);
    assert_eq!(t.r.known_clients(), 1);
    assert_eq!(t.r.regions().count(), 0);
    assert_eq!(t.share(1, "w", memfd("tfu-held-before")), FollowStatus::OK);
    assert_eq!(t.followers("w"), [2], "linked by the share");
    assert_eq!(t.r.client(2).mapped_bytes, LEN, "counted once");
    assert_eq!(t.r.counters().held, 1);
    t.no_maps();
    // A MAP by another follower is a map; the HELD one stays a follower.
    assert_eq!(t.map(3, "w").0, FollowStatus::OK);
    assert_eq!(t.followers("w"), [2, 3]);
    assert_eq!((t.region("w").maps, t.r.counters().maps), (1, 1));
    assert!(t.unmap(2, "w"));
    assert_eq!(t.followers("w"), [3]);
    assert_eq!(t.r.client(2).mapped_bytes, 0);
}

#[test]
fn a_held_mapping_after_the_share_is_linked_at_once() {
    let mut t = T::new();
    assert_eq!(t.share(1, "w", memfd("tfu-held-after")), FollowStatus::OK);
    assert_eq!(t.held(2, "w"), Ok(true));
    assert_eq!(t.followers("w"), [2]);
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    assert_eq!((t.r.shared_bytes(), t.r.mapped_bytes()), (LEN, LEN));
    assert_eq!(t.r.counters().held, 1);
    t.no_maps();
    // Another group or GPU: another key, so nothing to link to.
    assert_eq!(
        t.held_in(3, Some("uid:1001"), Some(GPU), "w", LEN, LAYOUT),
        Ok(false)
    );
    assert_eq!(
        t.held_in(4, Some(G), Some(GPU + 1), "w", LEN, LAYOUT),
        Ok(false)
    );
    assert_eq!(t.followers("w"), [2]);
    assert_eq!(t.r.mapped_bytes(), 3 * LEN);
    // The region goes with its owner: the follower keeps its mapping, counted.
    assert_eq!(t.leave(1).len(), 1);
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    // A new region of the name is not the one it held: not linked.
    assert_eq!(t.share(5, "w", memfd("tfu-held-after")), FollowStatus::OK);
    assert!(t.followers("w").is_empty());
    assert!(t.unmap(2, "w"));
    assert!(t.followers("w").is_empty());
}

#[test]
fn a_held_mapping_of_another_size_or_layout_stays_unlinked_and_counted() {
    let mut t = T::new();
    assert_eq!(
        t.share(1, "w", memfd("tfu-held-mismatch")),
        FollowStatus::OK
    );
    let mut other = LAYOUT;
    other[0] ^= 1;
    assert_eq!(
        t.held_in(2, Some(G), Some(GPU), "w", LEN, other),
        Ok(false),
        "another layout"
    );
    assert_eq!(
        t.held_in(3, Some(G), Some(GPU), "w", 2 * LEN, LAYOUT),
        Ok(false),
        "another size"
    );
    assert!(t.followers("w").is_empty());
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    assert_eq!(t.r.client(3).mapped_bytes, 2 * LEN);
    assert_eq!(t.r.mapped_bytes(), 3 * LEN);
    assert_eq!(t.r.counters().held, 2);
    // Shared again as it was: still not theirs.
    assert_eq!(
        t.share(1, "w", memfd("tfu-held-mismatch")),
        FollowStatus::OK
    );
    assert!(t.followers("w").is_empty());
    // A region of the shape client 2 holds links it, and only it.
    assert_eq!(t.unshare(1, "w").len(), 1);
    assert_eq!(
        t.share_shaped(1, "w", LEN, other, memfd("tfu-held-mismatch")),
        FollowStatus::OK
    );
    assert_eq!(t.followers("w"), [2]);
    t.no_maps();
    assert_eq!(open_memfds("tfu-held-mismatch"), 1);
}

#[test]
fn a_second_held_of_a_name_replaces_the_first() {
    let mut t = T::new();
    assert_eq!(t.held(2, "w"), Ok(false));
    assert_eq!(t.held(2, "w"), Ok(false));
    assert_eq!(t.r.client(2).mapped_bytes, LEN, "no double count");
    assert_eq!(t.r.counters().held, 2);
    assert_eq!(t.share(1, "w", memfd("tfu-held-twice")), FollowStatus::OK);
    assert_eq!(t.followers("w"), [2]);
    // Replaced by one that does not fit: it no longer follows the region.
    assert_eq!(
        t.held_in(2, Some(G), Some(GPU), "w", 2 * LEN, LAYOUT),
        Ok(false)
    );
    assert!(t.followers("w").is_empty());
    assert_eq!(t.r.client(2).mapped_bytes, 2 * LEN);
    assert_eq!(t.held(2, "w"), Ok(true));
    assert_eq!(t.followers("w"), [2]);
    assert_eq!(t.r.client(2).mapped_bytes, LEN);
    // A HELD after a MAP of the name replaces that mapping too.
    assert_eq!(t.map(3, "w").0, FollowStatus::OK);
    assert_eq!(t.held(3, "w"), Ok(true));
    assert_eq!(t.followers("w"), [2, 3]);
    assert_eq!(t.r.client(3).mapped_bytes, LEN);
    assert_eq!(t.r.mapped_bytes(), 2 * LEN);
    assert_eq!((t.region("w").maps, t.r.counters().maps), (1, 1));
}

#[test]
fn held_mappings_are_bounded_by_four_times_the_region_limit() {
    let mut t = T::with(FollowLimits {
        enabled: true,
        max_regions_per_client: 1,
    });
    for name in ["a", "b", "c", "d"] {
        assert_eq!(t.held(2, name), Ok(false), "{name}");
    }
    assert_eq!(t.held(2, "e"), Err(FollowStatus::LIMIT));
    assert_eq!(t.refusals("limit"), 1);
    assert_eq!(t.r.counters().held, 4);
    assert_eq!(t.r.client(2).mapped_bytes, 4 * LEN, "nothing recorded");
    // Sharing e afterwards does not make it a follower of e.
    assert_eq!(t.share(1, "e", memfd("tfu-held-limit")), FollowStatus::OK);
    assert!(t.followers("e").is_empty());
    // A replace is not one more mapping: allowed at the bound.
    assert_eq!(t.held(2, "a"), Ok(false));
    assert_eq!(t.r.client(2).mapped_bytes, 4 * LEN);
    // Another client has its own bound; one mapping less makes room.
    assert_eq!(t.held(3, "e"), Ok(true));
    assert!(t.unmap(2, "a"));
    assert_eq!(t.held(2, "e"), Ok(true));
    assert_eq!(t.followers("e"), [2, 3]);
    assert_eq!(t.refusals("limit"), 1);
}

#[test]
fn a_held_without_permission_or_gpu_is_counted_and_records_nothing() {
    let mut t = T::new();
    assert_eq!(
        t.held_in(2, None, Some(GPU), "w", LEN, LAYOUT),
        Err(FollowStatus::NOT_PERMITTED),
        "not granted"
    );
    assert_eq!(
        t.held_in(2, None, None, "w", LEN, LAYOUT),
        Err(FollowStatus::NOT_PERMITTED),
        "not granted wins over no GPU"
    );
    assert_eq!(
        t.held_in(2, Some(G), None, "w", LEN, LAYOUT),
        Err(FollowStatus::NOT_READY)
    );
    let mut off = T::with(FollowLimits {
        enabled: false,
        ..FollowLimits::default()
    });
    assert_eq!(
        off.held(2, "w"),
        Err(FollowStatus::NOT_PERMITTED),
        "disabled"
    );
    assert_eq!(off.refusals("not_permitted"), 1);
    for r in [&t.r, &off.r] {
        assert_eq!(r.known_clients(), 0, "no entry");
        assert_eq!((r.mapped_bytes(), r.counters().held), (0, 0));
    }
    assert_eq!(t.refusals("not_permitted"), 2);
    assert_eq!(t.refusals("not_ready"), 1);
    // Nothing recorded, so a share links nobody.
    assert_eq!(t.share(1, "w", memfd("tfu-held-refused")), FollowStatus::OK);
    assert!(t.followers("w").is_empty());
    t.no_maps();
}

#[test]
fn an_unlinked_held_mapping_is_dropped_by_unmap_and_by_leaving() {
    let mut t = T::new();
    assert_eq!(t.held(2, "w"), Ok(false));
    assert!(t.unmap(2, "w"));
    assert_eq!(t.r.counters().unmaps, 1);
    assert_eq!((t.r.client(2).mapped_bytes, t.r.mapped_bytes()), (0, 0));
    assert_eq!(t.r.known_clients(), 0, "its entry is gone");
    assert!(!t.unmap(2, "w"), "twice: ignored");
    assert_eq!(t.held(3, "w"), Ok(false));
    assert_eq!(t.held(3, "v"), Ok(false));
    assert!(t.leave(3).is_empty());
    assert_eq!((t.r.known_clients(), t.r.mapped_bytes()), (0, 0));
    // Neither is linked to a region shared later.
    assert_eq!(t.share(1, "w", memfd("tfu-held-gone")), FollowStatus::OK);
    assert!(t.followers("w").is_empty());
    // A linked one leaves its region's followers on leaving.
    assert_eq!(t.held(4, "w"), Ok(true));
    assert!(t.leave(4).is_empty());
    assert!(t.followers("w").is_empty());
    t.no_maps();
}

#[test]
fn stats_count_held_mappings_apart_from_maps() {
    use super::report::{annotate, Placement};
    let mut t = T::new();
    assert_eq!(t.held(2, "w"), Ok(false));
    assert_eq!(t.share(1, "w", memfd("tfu-held-stats")), FollowStatus::OK);
    let f = annotate(&t.r, true, &Placement::default(), &mut []);
    assert_eq!((f.shares, f.maps, f.held), (1, 0, 1));
    assert_eq!(f.regions[0].followers, 1);
    assert_eq!(f.regions[0].maps, 0);
    assert_eq!((f.shared_bytes, f.mapped_bytes), (LEN, LEN));
}
