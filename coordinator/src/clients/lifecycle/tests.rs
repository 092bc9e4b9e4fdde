use super::*;
use crate::spatial::tests::H100;
use tandem_proto::board::BOARD_SLOTS;
use tandem_proto::wire::{
    HELLO_FLAG_FOLLOW, HELLO_FLAG_SHARE_WEIGHTS, WELCOME_FLAG_DEVICE_SHAPE, WELCOME_FLAG_FOLLOW,
    WELCOME_FLAG_FUNC_ATTRS, WELCOME_FLAG_SHARE_WEIGHTS,
};

fn register(cfg: &Config, flags: u8) -> (u8, Option<String>, Option<String>) {
    let mut r = Registry::default();
    let who = Who {
        pid: 42,
        uid: 1234,
        ..Who::default()
    };
    let hello = Hello {
        pid: 42,
        class: ClientClass::Training,
        flags,
        exe: b"/x",
        cgroup: b"/",
    };
    let (w, _fd) = r.register(cfg, 0, who, &hello, None).unwrap();
    let c = &r.clients[&w.client_id];
    // Capture is on by default: every Welcome asks for the attributes, and
    // every one for the GPU's SMs.
    assert_eq!(w.flags & ALWAYS, ALWAYS);
    (
        w.flags & !ALWAYS,
        c.trust_group.clone(),
        c.follow_group.clone(),
    )
}

#[test]
fn function_attributes_are_asked_for_only_while_capture_is_on() {
    // On (the default): `register` checks the flag.
    let _ = register(&Config::default(), 0);
    let mut off = Config::default();
    off.trace.window = 0;
    let mut r = Registry::default();
    let hello = Hello {
        pid: 42,
        class: ClientClass::Training,
        flags: 0,
        exe: b"/x",
        cgroup: b"/",
    };
    let (w, _fd) = r.register(&off, 0, Who::default(), &hello, None).unwrap();
    assert_eq!(w.flags & WELCOME_FLAG_FUNC_ATTRS, 0);
    // The SM reservation learns inference's widths from them.
    off.scheduler.spatial = tandem_sched::SpatialMode::Auto;
    let (w, _fd) = r.register(&off, 0, Who::default(), &hello, None).unwrap();
    assert_eq!(w.flags & ALWAYS, ALWAYS);
}

/// What every Welcome asks for while capture is on.
const ALWAYS: u8 = WELCOME_FLAG_FUNC_ATTRS | WELCOME_FLAG_DEVICE_SHAPE;

fn offer() -> Offer {
    Offer {
        pipe_dir: b"/run/tandem/mps".to_vec(),
        training_priority: 1,
        training_thread_percentage: 25,
    }
}

fn hello(class: ClientClass, flags: u8) -> Hello<'static> {
    Hello {
        pid: 42,
        class,
        flags,
        exe: b"/x",
        cgroup: b"/",
    }
}

fn who(uid: u32) -> Who {
    Who {
        pid: 42,
        uid,
        ..Who::default()
    }
}

#[test]
fn mps_is_offered_by_class_only_to_shims_that_ask() {
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    let mut r = Registry::default();
    let o = offer();
    let ask = HELLO_FLAG_MPS | HELLO_FLAG_SHARE_WEIGHTS | HELLO_FLAG_FOLLOW;
    let (w, _fd) = r
        .register(
            &cfg,
            0,
            who(7),
            &hello(ClientClass::Training, ask),
            Some(&o),
        )
        .unwrap();
    let m = w.mps.expect("training joins");
    assert_eq!((m.priority, m.thread_percentage), (1, 25));
    assert_eq!(m.pipe_dir(), b"/run/tandem/mps");
    // Joining MPS: no weight sharing, no follow mode, the MPS flag only.
    assert_eq!(w.flags & !ALWAYS, WELCOME_FLAG_MPS);
    let c = &r.clients[&w.client_id];
    assert_eq!(
        (c.trust_group.as_deref(), c.follow_group.as_deref()),
        (None, None)
    );
    assert_eq!(c.mps, Some(m));
    let (w, _fd) = r
        .register(
            &cfg,
            0,
            who(7),
            &hello(ClientClass::Inference, ask),
            Some(&o),
        )
        .unwrap();
    let m = w.mps.expect("inference joins");
    assert_eq!((m.priority, m.thread_percentage), (0, 0));
    // An older shim (no MPS flag) is not told, and keeps the rest.
    let old = HELLO_FLAG_SHARE_WEIGHTS | HELLO_FLAG_FOLLOW;
    let (w, _fd) = r
        .register(
            &cfg,
            0,
            who(7),
            &hello(ClientClass::Training, old),
            Some(&o),
        )
        .unwrap();
    assert_eq!(w.mps, None);
    assert_eq!(
        w.flags & !ALWAYS,
        WELCOME_FLAG_SHARE_WEIGHTS | WELCOME_FLAG_FOLLOW
    );
    // Not in force: nothing to tell.
    let (w, _fd) = r
        .register(&cfg, 0, who(7), &hello(ClientClass::Training, ask), None)
        .unwrap();
    assert_eq!(w.mps, None);
}

#[test]
fn mps_takes_one_uid_at_a_time() {
    let cfg = Config::default();
    let mut r = Registry::default();
    let o = offer();
    let t = hello(ClientClass::Training, HELLO_FLAG_MPS);
    let (a, _fd) = r.register(&cfg, 0, who(1000), &t, Some(&o)).unwrap();
    assert!(a.mps.is_some());
    let (b, _fd) = r.register(&cfg, 0, who(2000), &t, Some(&o)).unwrap();
    assert_eq!(b.mps, None, "another uid's job would wait in cuInit");
    let (c, _fd) = r.register(&cfg, 0, who(1000), &t, Some(&o)).unwrap();
    assert!(c.mps.is_some(), "the same uid joins");
    // Once uid 1000's MPS jobs are gone, another uid may join.
    r.reclaim(a.client_id, "test");
    r.reclaim(c.client_id, "test");
    let (d, _fd) = r.register(&cfg, 0, who(2000), &t, Some(&o)).unwrap();
    assert!(d.mps.is_some());
}

#[test]
fn follow_is_granted_only_when_asked_and_enabled_with_its_own_group() {
    let cfg = Config::default();
    let uid = Some("uid:1234".to_string());
    // Follow alone: the follow flag and group, no weight sharing.
    assert_eq!(
        register(&cfg, HELLO_FLAG_FOLLOW),
        (WELCOME_FLAG_FOLLOW, None, uid.clone())
    );
    // Not asked: no follow bit (an older shim rejects unknown bits).
    assert_eq!(register(&cfg, 0), (0, None, None));
    assert_eq!(
        register(&cfg, HELLO_FLAG_SHARE_WEIGHTS),
        (WELCOME_FLAG_SHARE_WEIGHTS, uid.clone(), None)
    );
    assert_eq!(
        register(&cfg, HELLO_FLAG_SHARE_WEIGHTS | HELLO_FLAG_FOLLOW),
        (
            WELCOME_FLAG_SHARE_WEIGHTS | WELCOME_FLAG_FOLLOW,
            uid.clone(),
            uid.clone()
        )
    );
    // Disabled: never granted.
    let mut off = Config::default();
    off.follow.enabled = false;
    assert_eq!(register(&off, HELLO_FLAG_FOLLOW), (0, None, None));
    // The group follows [[dedup.group]], even with weight sharing off.
    let mut grouped = Config::default();
    grouped.dedup.enabled = false;
    grouped.dedup.groups.push(crate::dedup::TrustGroup {
        name: "models".into(),
        uids: vec![1234],
        ..Default::default()
    });
    assert_eq!(
        register(&grouped, HELLO_FLAG_FOLLOW | HELLO_FLAG_SHARE_WEIGHTS),
        (WELCOME_FLAG_FOLLOW, None, Some("models".into()))
    );
}

/// The drop counts are the clients' claims (their ring headers): two
/// clients claiming u64::MAX drops overflowed the totals, in the
/// snapshot and at reclaim (found with the `drain` fuzz target; inputs in
/// fuzz/regressions/drain/). Totals saturate instead.
#[test]
fn drop_claims_saturate_the_totals() {
    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicU64, Ordering};
    let cfg = Config::default();
    let mut r = Registry::default();
    let mut maps = Vec::new();
    for pid in [7, 8] {
        let who = Who {
            pid,
            ..Who::default()
        };
        let hello = Hello {
            pid,
            class: ClientClass::Training,
            flags: 0,
            exe: b"/x",
            cgroup: b"/",
        };
        let (w, fd) = r.register(&cfg, 0, who, &hello, None).unwrap();
        let map = tandem_proto::shm::map_received(fd.as_fd(), w.region_len as usize).unwrap();
        // SAFETY: the header's dropped_full word (byte 136) of the live,
        // 128-aligned mapping, which both sides access only atomically.
        let dropped = unsafe { &*map.as_ptr().add(136).cast::<AtomicU64>() };
        dropped.store(u64::MAX, Ordering::Relaxed);
        maps.push((w.client_id, map));
    }
    r.poll(Instant::now());
    assert_eq!(r.snapshot(Instant::now()).2.dropped, u64::MAX);
    for (id, _) in &maps {
        assert!(r.reclaim(*id, "test"));
    }
    assert_eq!(r.snapshot(Instant::now()).2.dropped, u64::MAX);
}

#[test]
fn a_job_made_inference_after_a_read_only_board_is_owed_a_writable_one() {
    let cfg = Config::default();
    let mut r = Registry::default();
    assert!(r.board.is_some(), "the GPU board (a memfd) was created");
    let t = hello(ClientClass::Training, tandem_proto::wire::HELLO_FLAG_BOARD);
    let (a, _fd) = r.register(&cfg, 0, who(7), &t, None).unwrap();
    let (b, _fd) = r.register(&cfg, 0, who(7), &t, None).unwrap();
    let (a, b) = (a.client_id, b.client_id);
    // `a` got its read-only board; `b` has not been sent one yet.
    let (_fd, flags) = r.board_for(a).unwrap();
    assert_eq!(flags, 0, "training: read-only");
    r.set_class(&cfg, 0, b, ClientClass::Inference, 0).unwrap();
    assert_eq!(
        r.take_owed_boards(),
        Vec::<u64>::new(),
        "b gets it writable when sent"
    );
    r.set_class(&cfg, 0, a, ClientClass::Inference, 0).unwrap();
    r.set_class(&cfg, 0, a, ClientClass::Inference, 0).unwrap();
    assert_eq!(r.take_owed_boards(), vec![a], "owed once");
    assert_eq!(r.take_owed_boards(), Vec::<u64>::new());
    let (_fd, flags) = r.board_for(a).unwrap();
    assert_eq!(flags, tandem_proto::wire::BOARD_FLAG_WRITABLE);
    // Back to training and to inference again: it has a writable board.
    r.set_class(&cfg, 0, a, ClientClass::Training, 0).unwrap();
    r.set_class(&cfg, 0, a, ClientClass::Inference, 0).unwrap();
    assert_eq!(r.take_owed_boards(), Vec::<u64>::new());
}

#[test]
fn a_board_that_could_not_be_sent_is_owed_until_one_is() {
    let cfg = Config::default();
    let mut r = Registry::default();
    let t = hello(ClientClass::Training, tandem_proto::wire::HELLO_FLAG_BOARD);
    let (a, _fd) = r.register(&cfg, 0, who(7), &t, None).unwrap();
    let a = a.client_id;
    let (_fd, flags) = r.board_for(a).unwrap();
    assert_eq!(flags, 0);
    assert!(!r.owes_boards());
    r.board_unsent(a);
    r.board_unsent(a);
    assert!(r.owes_boards(), "the loop must wake to retry it");
    assert_eq!(r.take_owed_boards(), vec![a], "owed once");
    assert!(!r.owes_boards());
    // Made inference while it has none: the next send is writable, and
    // nothing more is owed once one went out.
    r.set_class(&cfg, 0, a, ClientClass::Inference, 0).unwrap();
    assert_eq!(r.take_owed_boards(), Vec::<u64>::new());
    let (_fd, flags) = r.board_for(a).unwrap();
    assert_eq!(flags, tandem_proto::wire::BOARD_FLAG_WRITABLE);
    assert_eq!(r.take_owed_boards(), Vec::<u64>::new());
    // A client that left is owed nothing.
    assert!(r.reclaim(a, "test"));
    r.board_unsent(a);
    assert_eq!(r.take_owed_boards(), Vec::<u64>::new());
}

#[test]
fn the_sm_reservation_is_asked_only_of_training_that_joined_mps_below_normal() {
    use tandem_proto::spatial::Spatial;
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    let o = offer();
    let asked = |r: &Registry, id: u64| {
        let c = &r.clients[&id];
        let cb = c
            .ring
            .as_ref()
            .and_then(|g| g.control())
            .map(|cb| cb.spatial());
        (c.spatial, cb)
    };
    // Off (the default): nothing asked even of low-priority training.
    let mut r = Registry::default();
    let t = hello(ClientClass::Training, HELLO_FLAG_MPS);
    let (w, _fd) = r.register(&cfg, 0, who(7), &t, Some(&o)).unwrap();
    assert_eq!(
        asked(&r, w.client_id),
        (Spatial::default(), Some(Spatial::default()))
    );

    cfg.scheduler.spatial = tandem_sched::SpatialMode::Auto;
    cfg.scheduler.spatial_reserve = 0.3;
    cfg.scheduler.spatial_min_kernel_ns = 7_000;
    cfg.scheduler.spatial_standing_kernel_ns = 500_000;
    let want = Spatial {
        reserve_permille: 300,
        min_ns: 7_000,
        standing_ns: 500_000,
    };
    let (w, _fd) = r.register(&cfg, 0, who(7), &t, Some(&o)).unwrap();
    assert_eq!(
        asked(&r, w.client_id),
        (
            want,
            Some(Spatial {
                standing_ns: 0,
                ..want
            })
        ),
        "written into its block, standing only once inference is on its GPU"
    );
    let (w, _fd) = r
        .register(
            &cfg,
            0,
            who(7),
            &hello(ClientClass::Inference, HELLO_FLAG_MPS),
            Some(&o),
        )
        .unwrap();
    assert_eq!(
        asked(&r, w.client_id).0,
        Spatial::default(),
        "inference: never"
    );
    let (w, _fd) = r.register(&cfg, 0, who(7), &t, None).unwrap();
    assert_eq!(
        asked(&r, w.client_id).0,
        Spatial::default(),
        "outside MPS: never"
    );
    let mut normal = offer();
    normal.training_priority = 0;
    let (w, _fd) = r.register(&cfg, 0, who(7), &t, Some(&normal)).unwrap();
    assert_eq!(
        asked(&r, w.client_id).0,
        Spatial::default(),
        "training at normal priority: never"
    );
}

/// The standing threshold reaches a masked training client's block only
/// while an inference client is on its GPU: not before one has said which
/// GPU it is on, and not after it left.
#[test]
fn the_standing_threshold_is_published_only_while_inference_is_on_the_gpu() {
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    cfg.scheduler.spatial = tandem_sched::SpatialMode::Auto;
    cfg.scheduler.spatial_standing_kernel_ns = 500_000;
    let mut r = Registry::new(cfg.scheduler.clone());
    let o = offer();
    let join = |r: &mut Registry, class| {
        r.register(&cfg, 0, who(7), &hello(class, HELLO_FLAG_MPS), Some(&o))
            .unwrap()
            .0
            .client_id
    };
    let t = join(&mut r, ClientClass::Training);
    let i = join(&mut r, ClientClass::Inference);
    let on = |r: &mut Registry, id: u64, uuid: &[u8; 16]| {
        r.device(
            id,
            &Device {
                ordinal: 0,
                uuid: *uuid,
                name: b"H100",
                shape: None,
            },
        );
    };
    let standing = |r: &Registry| {
        let cb = r.clients[&t].ring.as_ref().and_then(Ring::control).unwrap();
        cb.spatial().standing_ns
    };
    on(&mut r, t, b"GPU-standing-001");
    r.poll(Instant::now());
    assert_eq!(standing(&r), 0, "inference on no GPU yet");
    on(&mut r, i, b"GPU-standing-002");
    r.poll(Instant::now());
    assert_eq!(standing(&r), 0, "inference on another GPU");
    on(&mut r, i, b"GPU-standing-001");
    r.poll(Instant::now());
    assert_eq!(standing(&r), 500_000, "inference beside it");
    assert!(r.reclaim(i, "test"));
    r.poll(Instant::now());
    assert_eq!(standing(&r), 0, "inference gone");
}

/// `n` launches of `func_id` into a client's ring: 40 blocks of 256 threads.
fn launches(p: &mut tandem_proto::ring::Producer<'_>, func_id: u64, n: usize) {
    for _ in 0..n {
        let rec = tandem_proto::Record {
            func_id,
            grid_x: 40,
            grid_y: 1,
            grid_z: 1,
            block_x: 256,
            block_y: 1,
            block_z: 1,
            ..tandem_proto::Record::new(
                tandem_proto::EventKind::LAUNCH,
                tandem_proto::monotonic_ns(),
            )
        };
        assert!(p.push(&rec));
    }
}

/// A function's attributes: `regs` registers a thread, no static shared memory.
fn attrs(regs: u32) -> FuncAttrs {
    FuncAttrs {
        regs_per_thread: regs,
        static_smem_bytes: 0,
    }
}

/// Scheduler v3's reservation: a training client asked to mask its launches
/// is asked, after the next poll, to leave what inference's kernel widths on
/// its GPU need (`crate::spatial`), within the configured share.
#[test]
fn a_masked_training_client_leaves_what_inference_widths_on_its_gpu_need() {
    use std::os::fd::AsFd;
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    cfg.scheduler.spatial = tandem_sched::SpatialMode::Auto;
    let mut r = Registry::new(cfg.scheduler.clone());
    let o = offer();
    let (t, _tfd) = r
        .register(
            &cfg,
            0,
            who(7),
            &hello(ClientClass::Training, HELLO_FLAG_MPS),
            Some(&o),
        )
        .unwrap();
    let (i, ifd) = r
        .register(
            &cfg,
            0,
            who(7),
            &hello(ClientClass::Inference, HELLO_FLAG_MPS),
            Some(&o),
        )
        .unwrap();
    let map = tandem_proto::shm::map_received(ifd.as_fd(), i.region_len as usize).unwrap();
    let mut p = tandem_proto::ring::Producer::attach(&map, i.layout().unwrap()).unwrap();
    let (t, i) = (t.client_id, i.client_id);
    let asked = r.clients[&t].spatial.reserve_permille;
    assert_eq!(asked, 250, "the configured share");
    for id in [t, i] {
        r.device(
            id,
            &Device {
                ordinal: 0,
                uuid: *b"GPU-spatial-0001",
                name: b"H100",
                shape: Some(H100),
            },
        );
    }
    let reserve = |r: &Registry| {
        let cb = r.clients[&t].ring.as_ref().and_then(Ring::control).unwrap();
        cb.spatial().reserve_permille
    };
    r.poll(Instant::now());
    assert_eq!(reserve(&r), asked, "no width yet: the configured share");
    // 40 blocks of 256 threads at 64 registers: four per SM, 10 SMs wide,
    // 5 TPCs; then at 255 registers, 40 SMs: the cap.
    let mut launch = |func_id: u64, n: usize| launches(&mut p, func_id, n);
    // Launches of a function whose FuncName has not been read yet teach
    // nothing: without its registers their width would be 5 SMs, not 10.
    launch(1, 20);
    r.poll(Instant::now());
    assert_eq!(reserve(&r), asked, "no width from an unnamed launch");
    r.func_name(i, 1, b"narrow", Some(attrs(64)));
    r.func_name(i, 2, b"wide", Some(attrs(255)));
    launch(1, 20);
    r.poll(Instant::now());
    assert_eq!(reserve(&r), crate::spatial::permille_for(132, 10));
    assert_eq!(tandem_proto::spatial::reserve_tpcs(132, reserve(&r)), 5);
    let (gpus, clients, _) = r.snapshot(Instant::now());
    assert_eq!(
        (gpus[0].sms, gpus[0].spatial_reserve_sms),
        (Some(132), Some(10))
    );
    let sp = clients
        .iter()
        .find(|c| c.id == t)
        .unwrap()
        .spatial
        .clone()
        .unwrap();
    assert_eq!((sp.reserve, sp.reserve_max), (0.076, 0.25));
    launch(2, 200);
    r.poll(Instant::now());
    assert_eq!(reserve(&r), asked, "wide kernels: the cap, no more");
    // A reload with another cap learns the widths again under it: 40 SMs
    // now fit under half the GPU. The client keeps the cap it registered
    // with (the reservation's settings apply to jobs that register after).
    let mut half = cfg.clone();
    half.scheduler.spatial_reserve = 0.5;
    r.reapply_policy(&half, 0);
    let gpu = |r: &Registry| r.snapshot(Instant::now()).0[0].spatial_reserve_sms;
    assert_eq!(gpu(&r), None, "learnt again");
    launch(2, 10);
    r.poll(Instant::now());
    assert_eq!(gpu(&r), Some(40));
    assert_eq!(reserve(&r), asked);
    // A function the shim could not name never gets a FuncName: its
    // launches count without its registers (5 SMs wide; the minimum, 8).
    launch(tandem_proto::FUNC_ID_UNNAMED | 0x7f00, 128);
    r.poll(Instant::now());
    assert_eq!(gpu(&r), Some(8));
    // Nor does a function past a full name table: it counts without too.
    launch(2, 128);
    r.poll(Instant::now());
    assert_eq!(gpu(&r), Some(40));
    for f in 100..100 + crate::state::MAX_NAMES_PER_CLIENT as u64 {
        r.func_name(i, f, b"filler", Some(attrs(64)));
    }
    assert!(r.clients[&i].stats.names_full());
    launch(99_999, 128);
    r.poll(Instant::now());
    assert_eq!(gpu(&r), Some(8));
    // The inference client is never asked anything.
    let cb = r.clients[&i].ring.as_ref().and_then(Ring::control).unwrap();
    assert_eq!(cb.spatial().reserve_permille, 0);
}

/// A job whose class is being detected runs as inference until its first
/// backward kernel: the widths of its forward pass must not go on sizing
/// the reservation once it is known to train.
#[test]
fn a_job_detected_as_training_takes_its_widths_out_of_the_reservation() {
    use std::os::fd::AsFd;
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    cfg.scheduler.spatial = tandem_sched::SpatialMode::Auto;
    assert_eq!(cfg.policy.auto_class, crate::config::AutoClass::Detect);
    let mut r = Registry::new(cfg.scheduler.clone());
    let o = offer();
    let mut ids = Vec::new();
    let mut producers = Vec::new();
    for class in [
        ClientClass::Training,
        ClientClass::Inference,
        ClientClass::Auto,
    ] {
        let (w, fd) = r
            .register(&cfg, 0, who(7), &hello(class, HELLO_FLAG_MPS), Some(&o))
            .unwrap();
        let map = tandem_proto::shm::map_received(fd.as_fd(), w.region_len as usize).unwrap();
        ids.push(w.client_id);
        producers.push((map, w.layout().unwrap()));
    }
    let [t, i, a] = ids[..] else { unreachable!() };
    assert_eq!(r.clients[&a].decision.class, ClientClass::Inference);
    for id in [t, i, a] {
        r.device(
            id,
            &Device {
                ordinal: 0,
                uuid: *b"GPU-spatial-0002",
                name: b"H100",
                shape: Some(H100),
            },
        );
    }
    let gpu = |r: &Registry| r.snapshot(Instant::now()).0[0].spatial_reserve_sms;
    let mut pi = tandem_proto::ring::Producer::attach(&producers[1].0, producers[1].1).unwrap();
    let mut pa = tandem_proto::ring::Producer::attach(&producers[2].0, producers[2].1).unwrap();
    // The inference job's kernels are 10 SMs wide; the detected job's
    // forward pass 40 (the cap, 34 SMs), as many launches as the window holds.
    r.func_name(i, 1, b"narrow", Some(attrs(64)));
    r.func_name(a, 1, b"conv_fwd", Some(attrs(255)));
    launches(&mut pi, 1, 20);
    launches(&mut pa, 1, 100);
    r.poll(Instant::now());
    assert_eq!(gpu(&r), Some(34), "the forward pass counted as inference's");
    // Its first backward kernel: training, and its widths go.
    r.func_name(a, 2, b"conv_bwd_backward_kernel", Some(attrs(255)));
    assert_eq!(r.clients[&a].decision.class, ClientClass::Training);
    launches(&mut pa, 2, 50);
    r.poll(Instant::now());
    assert_eq!(gpu(&r), Some(10), "the inference job's own widths alone");
}

/// The widths come from what an inference client claims: the block size of
/// its launch records and the registers of its FuncName. Claims no GPU has
/// (65535 x 65535 x 2 threads a block; 2^32 - 1 registers a thread) must
/// not overflow the occupancy arithmetic: in a debug build (panic = abort)
/// that aborted tandemd from the reader thread, in release the product
/// wrapped to a small, wrong block size. Any client the policy lets claim
/// inference teaches widths (one that registers as `auto` too, until
/// detected, under the default `auto_class`).
#[test]
fn absurd_block_sizes_and_register_counts_from_a_client_do_not_overflow() {
    use std::os::fd::AsFd;
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    let mut r = Registry::new(cfg.scheduler.clone());
    let (w, fd) = r
        .register(&cfg, 0, who(7), &hello(ClientClass::Auto, 0), None)
        .unwrap();
    let id = w.client_id;
    assert_eq!(r.clients[&id].decision.class, ClientClass::Inference);
    let map = tandem_proto::shm::map_received(fd.as_fd(), w.region_len as usize).unwrap();
    let mut p = tandem_proto::ring::Producer::attach(&map, w.layout().unwrap()).unwrap();
    r.device(
        id,
        &Device {
            ordinal: 0,
            uuid: *b"GPU-spatial-0003",
            name: b"H100",
            shape: Some(H100),
        },
    );
    r.func_name(id, 1, b"many_regs", Some(attrs(u32::MAX)));
    let launch = |func_id: u64, block: [u16; 3]| tandem_proto::Record {
        func_id,
        grid_x: 1,
        grid_y: 1,
        grid_z: 1,
        block_x: block[0],
        block_y: block[1],
        block_z: block[2],
        ..tandem_proto::Record::new(
            tandem_proto::EventKind::LAUNCH,
            tandem_proto::monotonic_ns(),
        )
    };
    // Registers: an ordinary block of a function claiming 2^32 - 1 a thread.
    assert!(p.push(&launch(1, [256, 1, 1])));
    r.poll(Instant::now());
    // Threads: a block of 65535 x 65535 x 2 of an unnamed function.
    assert!(p.push(&launch(
        tandem_proto::FUNC_ID_UNNAMED | 5,
        [u16::MAX, u16::MAX, 2]
    )));
    r.poll(Instant::now());
    let (gpus, _, _) = r.snapshot(Instant::now());
    assert_eq!(gpus[0].spatial_widths, 2, "both launches gave a width");
    assert!(r.clients[&id].ring.is_some(), "the client keeps its ring");
}

/// A Device message naming a GPU tandemd has not seen adds it to the GPU
/// table, and nothing ever took one out: a client that reports a new,
/// made-up UUID in every message (or reconnects and reports one each time)
/// grew tandemd's memory, and every `GET /stats`, without bound. The table
/// stays bounded: GPUs no client is on make room for new ones.
#[test]
fn made_up_gpus_in_device_messages_do_not_grow_the_gpu_table_without_bound() {
    let cfg = Config::default();
    let mut r = Registry::new(cfg.scheduler.clone());
    let (stay, _fd) = r
        .register(&cfg, 0, who(7), &hello(ClientClass::Training, 0), None)
        .unwrap();
    let (liar, _fd2) = r
        .register(&cfg, 0, who(7), &hello(ClientClass::Training, 0), None)
        .unwrap();
    let real = *b"GPU-the-real-one";
    assert!(r.device(
        stay.client_id,
        &Device {
            ordinal: 0,
            uuid: real,
            name: b"H100",
            shape: None,
        },
    ));
    let bound = super::super::MAX_GPUS;
    for n in 0..10 * bound as u64 {
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&n.to_le_bytes());
        uuid[8] = 0xfa;
        assert!(r.device(
            liar.client_id,
            &Device {
                ordinal: 0,
                uuid,
                name: &[b'x'; tandem_proto::wire::MAX_DEVICE_NAME_LEN],
                shape: None,
            },
        ));
    }
    assert!(r.gpus.len() <= bound, "{} GPUs kept", r.gpus.len());
    // The GPU a client is on is never the one forgotten.
    assert!(r.gpus.contains_key(&real));
    let last = r.clients[&liar.client_id].gpu.expect("on a GPU");
    assert!(r.gpus.contains_key(&last));
}

/// When a client leaves, tandemd uncounts on the board the explicit
/// requests its control block says it left open, in the slot the control
/// block names. Both are the client's claims, and only a shim with a
/// writable board counts requests there: a training client, whose board
/// is read-only so that it cannot touch inference's announcements, could
/// still have tandemd clear any slot's open requests for it, by writing
/// them into its own control block before it exits.
#[test]
fn a_client_with_a_read_only_board_cannot_have_tandemd_clear_the_boards_requests() {
    let mut cfg = Config::default();
    cfg.policy.inference.anyone = true;
    let mut r = Registry::default();
    let flags = tandem_proto::wire::HELLO_FLAG_BOARD;
    let (i, _ifd) = r
        .register(&cfg, 0, who(7), &hello(ClientClass::Inference, flags), None)
        .unwrap();
    let (t, _tfd) = r
        .register(&cfg, 0, who(8), &hello(ClientClass::Training, flags), None)
        .unwrap();
    let (i, t) = (i.client_id, t.client_id);
    let uuid = *b"GPU-board-repair";
    for id in [i, t] {
        assert!(r.device(
            id,
            &Device {
                ordinal: 0,
                uuid,
                name: b"H100",
                shape: None,
            },
        ));
    }
    let (_fd, f) = r.board_for(i).unwrap();
    assert_eq!(f, tandem_proto::wire::BOARD_FLAG_WRITABLE);
    let (_fd, f) = r.board_for(t).unwrap();
    assert_eq!(f, 0, "training: read-only");
    let board = r.board.as_ref().and_then(crate::board::NodeBoard::board);
    let slot = board.unwrap().find(gpu_key(&uuid)).expect("the GPU's slot");
    let cb = |r: &Registry, id: u64, requests: usize| {
        let c = r.clients[&id].ring.as_ref().and_then(Ring::control);
        let c = c.unwrap();
        c.set_board_slot(Some(slot));
        for _ in 0..requests {
            c.count_request();
        }
    };
    let open = |r: &Registry| {
        let b = r.board.as_ref().and_then(crate::board::NodeBoard::board);
        b.unwrap().slot(slot).unwrap().open()
    };
    // The inference job is inside a request, as its shim counts it.
    let b = r.board.as_ref().and_then(crate::board::NodeBoard::board);
    b.unwrap().slot(slot).unwrap().begin_request();
    cb(&r, i, 1);
    // The training job claims the same slot and requests open, and leaves.
    cb(&r, t, 5);
    assert!(r.reclaim(t, "test"));
    assert_eq!(open(&r), 1, "the inference job's request is still open");
    // The inference job's own departure is repaired (another client keeps
    // the GPU's slot, which the last one's departure would release).
    let (t2, _t2fd) = r
        .register(&cfg, 0, who(8), &hello(ClientClass::Training, flags), None)
        .unwrap();
    let d = Device {
        ordinal: 0,
        uuid,
        name: b"H100",
        shape: None,
    };
    assert!(r.device(t2.client_id, &d));
    assert!(r.reclaim(i, "test"));
    let b = r.board.as_ref().and_then(crate::board::NodeBoard::board);
    assert_eq!(b.unwrap().find(gpu_key(&uuid)), Some(slot), "still claimed");
    assert_eq!(open(&r), 0);
}

/// Each GPU a client reports takes one of the board's 64 slots. They were
/// never given back, so one client reporting 64 made-up GPUs left every GPU
/// reported after without a slot, and that GPU's training shims without the
/// board. A slot is now released when no client is on its GPU any more
/// (the last one left, or moved on), so a client holds one slot at a time.
#[test]
fn a_client_reporting_made_up_gpus_holds_one_board_slot_at_a_time() {
    let cfg = Config::default();
    let mut r = Registry::new(cfg.scheduler.clone());
    let flags = tandem_proto::wire::HELLO_FLAG_BOARD;
    let register = |r: &mut Registry| {
        let (w, fd) = r
            .register(&cfg, 0, who(7), &hello(ClientClass::Training, flags), None)
            .unwrap();
        (w.client_id, fd)
    };
    let (liar, _fd) = register(&mut r);
    let (first, _fd1) = register(&mut r);
    let (second, _fd2) = register(&mut r);
    let on = |r: &mut Registry, id: u64, uuid: [u8; 16]| {
        let d = Device {
            ordinal: 0,
            uuid,
            name: b"H100",
            shape: None,
        };
        assert!(r.device(id, &d));
    };
    let claimed = |r: &Registry| {
        let b = r.board.as_ref().and_then(crate::board::NodeBoard::board);
        let b = b.expect("a board");
        (0..BOARD_SLOTS)
            .filter(|&i| b.slot(i).is_some_and(|s| s.gpu() != 0))
            .count()
    };
    let find = |r: &Registry, uuid: &[u8; 16]| {
        let b = r.board.as_ref().and_then(crate::board::NodeBoard::board);
        b.expect("a board").find(gpu_key(uuid))
    };
    for n in 0..2 * BOARD_SLOTS as u64 {
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&n.to_le_bytes());
        uuid[8] = 0xfa;
        on(&mut r, liar, uuid);
    }
    assert_eq!(claimed(&r), 1, "the liar's current GPU only");
    // A real GPU reported now still gets a slot, its training shims the board.
    let real = *b"GPU-the-real-one";
    on(&mut r, first, real);
    on(&mut r, second, real);
    let slot = find(&r, &real).expect("a slot for the real GPU");
    assert_eq!(claimed(&r), 2);
    // One of its two clients leaves: the slot stays; the last: it is freed.
    assert!(r.reclaim(first, "test"));
    assert_eq!(find(&r, &real), Some(slot));
    assert!(r.reclaim(second, "test"));
    assert_eq!(find(&r, &real), None, "no client on it: released");
    assert!(r.reclaim(liar, "test"));
    assert_eq!(claimed(&r), 0);
}
