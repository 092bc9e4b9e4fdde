//! tandemd's whole read path over rings and control blocks that clients
//! write: two registered clients (one inference, one training, on one GPU)
//! whose regions the input writes as a malicious shim would, then the
//! reader's pass ([`Registry::poll`]: drain, records into the stats and the
//! scheduler, launch limits, gates, heartbeats), kernel names and devices
//! the clients report, reclaim and re-registration, and the stats snapshot
//! and Prometheus text built from all of it.
//!
//! Input: a program of operations, one byte each plus operands: emit a
//! record (64 bytes of the input, published by advancing `head`, as a shim
//! does), write a 64-bit word of a region (the header and control block
//! half the time), poll (at a time up to 255 ms
//! ahead), snapshot and render, FuncName, Device, reclaim and re-register.
//!
//! Oracle: nothing panics, and a client whose ring was garbage is detached,
//! never trusted: the snapshot's counts stay what tandemd counted.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tandem_coordinator::admission::Who;
use tandem_coordinator::config::Config;
use tandem_coordinator::metrics;
use tandem_coordinator::shared::Shared;
use tandem_proto::ring::RECORDS_OFFSET;
use tandem_proto::shm::{self, Mapping};
use tandem_proto::wire::{ClientClass, Device, DeviceShape, Hello};

use crate::input::Input;

const RING_CAPACITY: u32 = 64;
const GPU: [u8; 16] = *b"tandem-fuzz-gpu0";

struct Peer {
    id: u64,
    map: Mapping,
}

fn register(shared: &Shared, n: u32, class: ClientClass, flags: u8) -> Option<Peer> {
    let cfg = shared.config();
    let who = Who {
        pid: 1000 + n,
        uid: 0,
        gid: 0,
        groups: Vec::new(),
        exe: Some(format!("/fuzz/job{n}")),
        cgroup: Some(format!("/fuzz/job{n}")),
        container: Default::default(),
        ancestors: Vec::new(),
        slurm: None,
    };
    let hello = Hello {
        pid: who.pid,
        class,
        flags,
        exe: b"/fuzz/job",
        cgroup: b"/fuzz",
    };
    let (welcome, fd) = shared
        .registry()
        .register(&cfg, 0, who, &hello, None)
        .ok()?;
    let map = shm::map_received(fd.as_fd(), welcome.region_len as usize).expect("map the region");
    shared.registry().device(
        welcome.client_id,
        &Device {
            ordinal: 0,
            uuid: GPU,
            name: b"fuzz",
            shape: None,
        },
    );
    Some(Peer {
        id: welcome.client_id,
        map,
    })
}

fn word(map: &Mapping, idx: usize) -> &AtomicU64 {
    assert!(idx < map.len() / 8);
    // SAFETY: idx is inside the live, 128-aligned mapping, which both sides
    // only access through atomics.
    unsafe { &*map.as_ptr().cast::<AtomicU64>().add(idx) }
}

/// One input.
pub fn run(data: &[u8]) {
    let mut u = Input::new(data);
    let cfg = Config {
        ring_capacity: RING_CAPACITY,
        ..Config::default()
    };
    let shared = crate::tandemd::shared_state(cfg);
    let flags = u.u8();
    let mut peers: Vec<Option<Peer>> = vec![
        register(&shared, 0, ClientClass::Inference, flags),
        register(&shared, 1, ClientClass::Training, flags),
    ];
    let mut registered = 2u32;
    let start = Instant::now();
    let mut emitted = [0u64; 2];
    while let Some(op) = u.op() {
        let k = usize::from(op >> 7);
        match op % 8 {
            0 => {
                let Some(p) = &peers[k] else { continue };
                let head = word(&p.map, 128 / 8);
                let h = emitted[k];
                let slot = (h % u64::from(RING_CAPACITY)) as usize;
                for i in 0..8 {
                    word(&p.map, RECORDS_OFFSET / 8 + slot * 8 + i)
                        .store(u.u64(), Ordering::Relaxed);
                }
                emitted[k] = h.wrapping_add(1);
                head.store(emitted[k], Ordering::Release);
            }
            1 => {
                let Some(p) = &peers[k] else { continue };
                // Half the writes hit the header and control block (words
                // 0-79, where every field tandemd reads as a claim lives),
                // the rest any word of the region.
                let sel = u.u8();
                let idx = if sel & 0x80 == 0 {
                    usize::from(sel) % (RECORDS_OFFSET / 8)
                } else {
                    usize::from(u.u16()) % (p.map.len() / 8)
                };
                word(&p.map, idx).store(u.u64(), Ordering::Relaxed);
            }
            2 => {
                let ahead = Duration::from_millis(u64::from(u.u8()));
                let _ = shared.registry().poll(start + ahead);
            }
            3 => {
                let snap = shared.snapshot();
                let _ = metrics::render(&snap);
            }
            4 => {
                let Some(p) = &peers[k] else { continue };
                let func_id = u.u64();
                let name = u.bytes(64);
                let attrs = (u.u8() & 1 == 1).then(|| tandem_proto::wire::FuncAttrs {
                    regs_per_thread: u32::from(u.u8()),
                    static_smem_bytes: u32::from(u.u8()) << 8,
                });
                shared.registry().func_name(p.id, func_id, name, attrs);
            }
            5 => {
                let Some(p) = &peers[k] else { continue };
                let ordinal = u.u32();
                let uuid: [u8; 16] = if u.u8() & 1 == 0 { GPU } else { u.array() };
                let name = u.bytes(32);
                // Any SM shape a shim may claim, zeros included.
                let shape = (u.u8() & 1 == 1).then(|| DeviceShape {
                    sms: u.u32(),
                    threads_per_sm: u.u32(),
                    regs_per_sm: u.u32(),
                    smem_per_sm: u.u32(),
                    blocks_per_sm: u.u32(),
                });
                shared.registry().device(
                    p.id,
                    &Device {
                        ordinal,
                        uuid,
                        name,
                        shape,
                    },
                );
            }
            6 => {
                if let Some(p) = peers[k].take() {
                    assert!(shared.registry().reclaim(p.id, "fuzz"));
                } else if registered < 64 {
                    let class = if k == 0 {
                        ClientClass::Inference
                    } else {
                        ClientClass::Training
                    };
                    peers[k] = register(&shared, registered, class, u.u8());
                    emitted[k] = 0;
                    registered += 1;
                }
            }
            _ => {
                let now = Instant::now();
                let _ = shared.registry().poll(now);
            }
        }
    }
    let _ = shared.registry().poll(Instant::now());
    let snap = shared.snapshot();
    let _ = metrics::render(&snap);
    let json = serde_json::to_string(&snap).expect("the snapshot serialises");
    let _: serde_json::Value = serde_json::from_str(&json).expect("as JSON");
}
