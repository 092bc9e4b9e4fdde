//! Follow mode through the tandemd binary, driven by fake shims: SHARE with
//! a real fd, MAP answered with that fd, every refusal, the stats, the
//! metrics and `tandemctl status`, the region dying with its owner while the
//! follower's mapping stays counted, malformed messages, and `[follow]`
//! switched off (at start and by a reload).

mod common;

use std::os::fd::AsFd;
use std::process::Command;
use std::time::Duration;

use common::dedup::*;
use common::follow::*;
use common::*;
use tandem_coordinator::state::{format_uuid, Snapshot};
use tandem_proto::follow::{FollowOp, FollowStatus};
use tandem_proto::wire::{ClientClass, HELLO_FLAG_FOLLOW, HELLO_FLAG_SHARE_WEIGHTS};

const UUID: [u8; 16] = *b"GPU-FOLLOW-01234";
const OTHER_UUID: [u8; 16] = *b"GPU-FOLLOW-99999";
const LEN: u64 = 4 << 20;
const LAYOUT: [u8; 16] = *b"gpt2-small-lay01";
const NAME: &str = "gpt2-small";

fn pattern(i: usize) -> u8 {
    (i % 253) as u8
}

/// A peer with `TANDEM_FOLLOW=on` whose Device (on `uuid`) was sent.
fn follow_peer(d: &Tandemd, uuid: [u8; 16]) -> Peer {
    let p = Peer::connect_flags(&d.socket, ClientClass::Training, HELLO_FLAG_FOLLOW);
    assert!(p.follows(), "follow mode granted");
    p.device(uuid, b"Fake H100");
    p
}

fn stats_json(d: &Tandemd) -> serde_json::Value {
    let r =
        tandem_coordinator::client::http_get(&d.stats, "/stats", Duration::from_secs(5)).unwrap();
    serde_json::from_str(&r.body).unwrap()
}

fn client_follow(s: &Snapshot, id: u64) -> tandem_coordinator::follow::stats::ClientFollow {
    s.clients
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("client {id} is not registered"))
        .follow
        .clone()
}

#[test]
fn a_region_is_shared_mapped_refused_and_gone_with_its_owner() {
    let d = Tandemd::start("follow", None);
    // SAFETY: geteuid has no preconditions.
    let uid = format!("uid:{}", unsafe { libc::geteuid() });
    let a = follow_peer(&d, UUID);
    let region = memfd_with("tdc-follow", LEN as usize, pattern);
    assert_eq!(
        a.share(1, NAME, LEN, LAYOUT, Some(region.as_fd())),
        FollowStatus::OK
    );
    drop(region);
    d.wait_memfds("tdc-follow", 1);

    // A follower of the same user on the same GPU maps it: the region's bytes.
    let b = follow_peer(&d, UUID);
    let (st, fd) = b.map(7, NAME, LEN, LAYOUT);
    assert_eq!(st, FollowStatus::OK);
    let fd = fd.expect("MAPPED OK carries the region's fd");
    let bytes = read_fd(fd.as_fd(), LEN as usize);
    assert!(
        bytes.iter().enumerate().all(|(i, &x)| x == pattern(i)),
        "the mapped fd holds the sharer's bytes"
    );
    drop(fd);
    // Refusals, each answered without an fd.
    let mut other_layout = LAYOUT;
    other_layout[15] ^= 0xff;
    assert_eq!(
        b.map_refused(8, NAME, LEN, other_layout),
        FollowStatus::MISMATCH
    );
    assert_eq!(
        b.map(9, NAME, LEN + (2 << 20), LAYOUT).0,
        FollowStatus::MISMATCH
    );
    assert_eq!(
        b.map_refused(10, "nope", LEN, LAYOUT),
        FollowStatus::NOT_FOUND
    );
    // A peer that did not ask: no Welcome flag, its MAP refused, and it stays.
    let c = Peer::connect(&d.socket, ClientClass::Training);
    assert!(!c.follows(), "no follow bit for a Hello without the flag");
    assert_eq!(
        c.map_refused(11, NAME, LEN, LAYOUT),
        FollowStatus::NOT_PERMITTED
    );
    c.device(UUID, b"Fake H100");
    c.func_name(0xc0ffee, b"still_talking");
    d.wait_stats("C still registered, its Device read", |s| {
        s.clients
            .iter()
            .any(|x| x.id == c.id() && x.gpu.as_deref() == Some(&format_uuid(&UUID)))
    });
    // Another GPU: not found there.
    let e = follow_peer(&d, OTHER_UUID);
    assert_eq!(
        e.map_refused(12, NAME, LEN, LAYOUT),
        FollowStatus::NOT_FOUND
    );
    // A second sharer of the name: taken, and tandemd keeps none of its fd.
    let second = memfd_with("tdc-follow-2", LEN as usize, |_| 1);
    assert_eq!(
        b.share(13, NAME, LEN, LAYOUT, Some(second.as_fd())),
        FollowStatus::NAME_TAKEN
    );
    drop(second);
    d.wait_memfds("tdc-follow-2", 0);
    // Malformed: a body that does not decode, and an op only tandemd sends
    // (its fd dropped). Counted; the peer is not disconnected.
    b.send_bad_follow();
    let junk = memfd_with("tdc-follow-junk", 4096, |_| 0);
    b.send_follow(
        &follow_msg(FollowOp::Mapped, 14, NAME, LEN, LAYOUT),
        Some(junk.as_fd()),
    );
    drop(junk);
    let (st, fd) = b.map(15, NAME, LEN, LAYOUT);
    assert_eq!(st, FollowStatus::OK, "the peer still talks to tandemd");
    assert!(fd.is_some());
    d.wait_memfds("tdc-follow-junk", 0);

    let v = stats_json(&d);
    let f = &v["follow"];
    assert_eq!(f["enabled"], true);
    assert_eq!(
        f["regions"],
        serde_json::json!([{
            "name": NAME, "group": uid, "gpu": format_uuid(&UUID), "gpu_ordinal": 0,
            "owner": a.id(), "owner_pid": std::process::id(), "bytes": LEN,
            "followers": 1, "maps": 2
        }]),
        "{f}"
    );
    assert_eq!(
        (f["shared_bytes"].as_u64(), f["mapped_bytes"].as_u64()),
        (Some(LEN), Some(LEN))
    );
    assert_eq!(
        (f["shares"].as_u64(), f["maps"].as_u64()),
        (Some(1), Some(2))
    );
    for (reason, n) in [
        ("mismatch", 2),
        ("not_found", 2),
        ("not_permitted", 1),
        ("name_taken", 1),
        ("malformed", 2),
        ("limit", 0),
        ("not_ready", 0),
        ("no_fd", 0),
        ("unowned_unshare", 0),
    ] {
        assert_eq!(f["refusals"][reason], n, "{reason}: {f}");
    }
    let s = d.snapshot();
    assert_eq!(s.totals.clients, 4, "nobody was disconnected");
    let fa = client_follow(&s, a.id());
    assert_eq!(
        (
            fa.granted,
            fa.group.as_deref(),
            fa.shared_bytes,
            fa.mapped_bytes
        ),
        (true, Some(uid.as_str()), LEN, 0)
    );
    let fb = client_follow(&s, b.id());
    assert_eq!(
        (fb.granted, fb.shared_bytes, fb.mapped_bytes),
        (true, 0, LEN)
    );
    let fc = client_follow(&s, c.id());
    assert_eq!((fc.granted, fc.group), (false, None));
    let cj = v["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == c.id())
        .unwrap()["follow"]
        .clone();
    assert_eq!(
        cj,
        serde_json::json!({"granted": false, "group": null, "shared_bytes": 0, "mapped_bytes": 0})
    );

    // The metrics say the same.
    let r =
        tandem_coordinator::client::http_get(&d.stats, "/metrics", Duration::from_secs(5)).unwrap();
    let ex = tandem_e2e::coord::parse_prometheus(&r.body)
        .unwrap_or_else(|e| panic!("bad Prometheus text: {e}\n{}", r.body));
    let one = |n: &str| {
        let v = ex.get(n);
        assert_eq!(v.len(), 1, "{n}:\n{}", r.body);
        v[0].value
    };
    assert_eq!(one("tandem_follow_regions"), 1.0);
    assert_eq!(one("tandem_follow_shared_bytes"), LEN as f64);
    assert_eq!(one("tandem_follow_mapped_bytes"), LEN as f64);
    assert_eq!(one("tandem_follow_maps_total"), 2.0);
    let refused = |status: &str| {
        ex.get("tandem_follow_refusals_total")
            .iter()
            .find(|x| x.labels.get("status").map(String::as_str) == Some(status))
            .map(|x| x.value)
    };
    assert_eq!(refused("not_found"), Some(2.0));
    assert_eq!(refused("malformed"), Some(2.0));
    assert_eq!(refused("no_fd"), Some(0.0));
    for (fam, ty) in [
        ("tandem_follow_maps_total", "counter"),
        ("tandem_follow_refusals_total", "counter"),
        ("tandem_follow_mapped_bytes", "gauge"),
        ("tandem_follow_client_mapped_bytes", "gauge"),
    ] {
        assert_eq!(ex.types.get(fam).map(String::as_str), Some(ty), "{fam}");
    }
    let b_mapped = ex
        .get("tandem_follow_client_mapped_bytes")
        .into_iter()
        .find(|x| x.labels.get("client") == Some(&b.id().to_string()))
        .map(|x| x.value);
    assert_eq!(b_mapped, Some(LEN as f64));
    assert!(
        ex.get("tandem_follow_client_shared_bytes")
            .iter()
            .all(|x| x.labels.get("client") != Some(&c.id().to_string())),
        "no series for a client without follow mode"
    );

    // tandemctl status: one line for the region.
    let out = Command::new(tandemctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = format!(
        "follow: {NAME} ({uid}, GPU 0): 4.0MiB shared by client {} (pid {}), 1 follower\n",
        a.id(),
        std::process::id()
    );
    assert!(text.contains(&line), "{text}");
    d.wait_log(&format!("follow=\"{uid}\""));
    d.wait_log("follow region shared");
    d.wait_log("follow region mapped");
    d.wait_log("malformed follow message");

    // The sharer leaves: the region and tandemd's fd of it go, while the
    // follower's mapping stays counted until it unmaps.
    let a_id = a.id();
    drop(a);
    // (The registry and the regions are read one after the other: wait for both.)
    let s = d.wait_stats("the sharer and its region are gone", |s| {
        s.follow.regions.is_empty() && s.clients.iter().all(|c| c.id != a_id)
    });
    assert_eq!((s.follow.shared_bytes, s.follow.mapped_bytes), (0, LEN));
    assert_eq!(client_follow(&s, b.id()).mapped_bytes, LEN);
    d.wait_memfds("tdc-follow", 0);
    d.wait_log("follow region gone (its owner left)");
    assert_eq!(
        b.map_refused(16, NAME, LEN, LAYOUT),
        FollowStatus::NOT_FOUND
    );
    b.follow_op(FollowOp::Unmap, NAME);
    let s = d.wait_stats("the follower unmapped", |s| s.follow.unmaps == 1);
    assert_eq!(client_follow(&s, b.id()).mapped_bytes, 0);
    assert_eq!(s.follow.mapped_bytes, 0);
    // The name is free again.
    let again = memfd_with("tdc-follow", LEN as usize, pattern);
    assert_eq!(
        b.share(17, NAME, LEN, LAYOUT, Some(again.as_fd())),
        FollowStatus::OK
    );
    drop(again);
    d.wait_memfds("tdc-follow", 1);
    b.follow_op(FollowOp::Unshare, NAME);
    d.wait_memfds("tdc-follow", 0);
    d.wait_stats("unshared", |s| s.follow.regions.is_empty());
}

#[test]
fn a_share_before_the_device_is_not_ready_and_its_fd_is_dropped() {
    let d = Tandemd::start("follownotready", None);
    let a = Peer::connect_flags(
        &d.socket,
        ClientClass::Training,
        HELLO_FLAG_FOLLOW | HELLO_FLAG_SHARE_WEIGHTS,
    );
    assert!(a.follows() && a.shares(), "both flags granted");
    let fd = memfd_with("tdc-follow-early", 4096, |_| 3);
    assert_eq!(
        a.share(1, NAME, 4096, LAYOUT, Some(fd.as_fd())),
        FollowStatus::NOT_READY
    );
    assert_eq!(a.share(2, NAME, 4096, LAYOUT, None), FollowStatus::NO_FD);
    d.wait_memfds("tdc-follow-early", 0);
    a.device(UUID, b"Fake H100");
    assert_eq!(
        a.share(3, NAME, 4096, LAYOUT, Some(fd.as_fd())),
        FollowStatus::OK
    );
    d.wait_memfds("tdc-follow-early", 1);
    // An UNSHARE of a name it does not share: counted, ignored.
    a.follow_op(FollowOp::Unshare, "other");
    let s = d.wait_stats("unowned unshare counted", |s| {
        s.follow.refusals.get("unowned_unshare") == Some(&1)
    });
    assert_eq!(s.follow.regions.len(), 1);
    assert_eq!(s.follow.refusals["not_ready"], 1);
    assert_eq!(s.follow.refusals["no_fd"], 1);
}

#[test]
fn follow_mode_disabled_grants_no_flag_and_refuses_messages() {
    let d = Tandemd::start("followoff", Some("[follow]\nenabled = false\n"));
    let p = Peer::connect_flags(&d.socket, ClientClass::Training, HELLO_FLAG_FOLLOW);
    assert!(!p.follows(), "no Welcome flag while [follow] is off");
    p.device(UUID, b"Fake H100");
    let fd = memfd_with("tdc-follow-off", 4096, |_| 0);
    assert_eq!(
        p.share(1, NAME, 4096, LAYOUT, Some(fd.as_fd())),
        FollowStatus::NOT_PERMITTED
    );
    drop(fd);
    d.wait_memfds("tdc-follow-off", 0);
    let s = d.snapshot();
    assert!(!s.follow.enabled);
    assert_eq!(
        client_follow(&s, p.id()),
        tandem_coordinator::follow::stats::ClientFollow::default()
    );
    d.wait_log("share_weights=\"no\" follow=\"no\"");
}

#[test]
fn a_reload_that_disables_follow_mode_keeps_the_regions() {
    let d = Tandemd::start("followreload", None);
    let a = follow_peer(&d, UUID);
    let b = follow_peer(&d, UUID);
    let region = memfd_with("tdc-follow-reload", 4096, |_| 9);
    assert_eq!(
        a.share(1, NAME, 4096, LAYOUT, Some(region.as_fd())),
        FollowStatus::OK
    );
    drop(region);
    assert_eq!(b.map(2, NAME, 4096, LAYOUT).0, FollowStatus::OK);
    std::fs::write(&d.config, "[follow]\nenabled = false\n").unwrap();
    d.signal(libc::SIGHUP);
    d.wait_stats("reloaded", |s| !s.follow.enabled);
    assert_eq!(
        b.map_refused(3, NAME, 4096, LAYOUT),
        FollowStatus::NOT_PERMITTED
    );
    let late = Peer::connect_flags(&d.socket, ClientClass::Training, HELLO_FLAG_FOLLOW);
    assert!(!late.follows(), "no Welcome flag after the reload");
    let s = d.snapshot();
    assert_eq!(s.follow.regions.len(), 1, "the region stays");
    assert_eq!(s.follow.regions[0].followers, 1);
    assert!(client_follow(&s, a.id()).granted, "granted stays as it was");
    d.wait_memfds("tdc-follow-reload", 1);
    // Its owner may still take it back.
    a.follow_op(FollowOp::Unshare, NAME);
    d.wait_memfds("tdc-follow-reload", 0);
}

#[test]
fn a_mapping_held_before_its_region_is_shared_again_is_counted_and_linked() {
    let d = Tandemd::start("followheld", None);
    // A follower back from an earlier tandemd: it reports what it still maps
    // before the sharer has offered the region again. An fd sent along is
    // closed unused; no answer comes.
    let f = follow_peer(&d, UUID);
    let junk = memfd_with("tdc-follow-held-junk", 4096, |_| 0);
    f.send_follow(
        &follow_msg(FollowOp::Held, 0, NAME, LEN, LAYOUT),
        Some(junk.as_fd()),
    );
    drop(junk);
    let s = d.wait_stats("the held mapping recorded", |s| s.follow.held == 1);
    // Recorded, so the message (and its fd) went through tandemd already.
    d.wait_memfds("tdc-follow-held-junk", 0);
    assert!(s.follow.regions.is_empty());
    assert_eq!(client_follow(&s, f.id()).mapped_bytes, LEN);
    assert_eq!((s.follow.mapped_bytes, s.follow.maps), (LEN, 0));

    // The sharer offers it again: the follower is one of its followers.
    let a = follow_peer(&d, UUID);
    let region = memfd_with("tdc-follow-held", LEN as usize, pattern);
    assert_eq!(
        a.share(1, NAME, LEN, LAYOUT, Some(region.as_fd())),
        FollowStatus::OK
    );
    drop(region);
    d.wait_memfds("tdc-follow-held", 1);
    let v = stats_json(&d);
    let fj = &v["follow"];
    assert_eq!(fj["regions"][0]["name"], NAME, "{fj}");
    assert_eq!(fj["regions"][0]["followers"], 1, "{fj}");
    assert_eq!(
        fj["regions"][0]["maps"], 0,
        "a held mapping is not a map: {fj}"
    );
    assert_eq!(
        (fj["held"].as_u64(), fj["maps"].as_u64()),
        (Some(1), Some(0))
    );
    let fc = v["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == f.id())
        .expect("the follower is still registered");
    assert_eq!(fc["follow"]["mapped_bytes"].as_u64(), Some(LEN), "{fc}");

    // Nothing answered the HELD: the next message the follower reads is the
    // answer to its MAP (request 2).
    let (st, fd) = f.map(2, NAME, LEN, LAYOUT);
    assert_eq!(st, FollowStatus::OK);
    assert!(fd.is_some());
    let s = d.snapshot();
    assert_eq!(s.follow.regions[0].followers, 1, "the same follower");
    assert_eq!(client_follow(&s, f.id()).mapped_bytes, LEN, "counted once");

    // A HELD before the Device is refused (counted) and records nothing.
    let early = Peer::connect_flags(&d.socket, ClientClass::Training, HELLO_FLAG_FOLLOW);
    early.follow_op(FollowOp::Held, NAME);
    let s = d.wait_stats("the early HELD refused", |s| {
        s.follow.refusals.get("not_ready") == Some(&1)
    });
    assert_eq!(client_follow(&s, early.id()).mapped_bytes, 0);
    assert_eq!((s.follow.held, s.follow.regions[0].followers), (1, 1));

    let r =
        tandem_coordinator::client::http_get(&d.stats, "/metrics", Duration::from_secs(5)).unwrap();
    let ex = tandem_e2e::coord::parse_prometheus(&r.body)
        .unwrap_or_else(|e| panic!("bad Prometheus text: {e}\n{}", r.body));
    let held = ex.get("tandem_follow_held_total");
    assert_eq!(held.len(), 1, "{}", r.body);
    assert_eq!(held[0].value, 1.0);
    assert_eq!(
        ex.types.get("tandem_follow_held_total").map(String::as_str),
        Some("counter")
    );
    d.wait_log("follow mapping held from an earlier tandemd");
}

/// A follower that asks faster than it reads fills its socket: tandemd holds
/// the answers its socket cannot take and sends them, in order, as it
/// drains. Before, every answer past the socket's capacity was dropped and
/// the asker waited out its deadline.
#[test]
fn answers_a_full_socket_cannot_take_are_held_and_sent_in_order() {
    let d = Tandemd::start("follow-full", None);
    let f = follow_peer(&d, UUID);
    const ASKS: u64 = 1000;
    for request in 1..=ASKS {
        f.send_follow(
            &follow_msg(FollowOp::Map, request, "absent", LEN, LAYOUT),
            None,
        );
    }
    // Nothing read until tandemd has answered every one (held or sent).
    wait_for("tandemd to answer every MAP", || {
        let s = stats_json(&d);
        (s["follow"]["refusals"]["not_found"].as_u64()? >= ASKS).then_some(())
    });
    for request in 1..=ASKS {
        let (a, fd) = f.recv_follow();
        assert!(fd.is_none());
        assert_eq!(
            (a.op, a.request),
            (FollowOp::Mapped, request),
            "in order, none lost"
        );
        assert_eq!(FollowStatus(a.status), FollowStatus::NOT_FOUND);
    }
}
