//! Writes the fuzz targets' seed corpora into `fuzz/seeds/TARGET/` (run
//! `cargo run -p tandem-fuzz-harness --example seeds`; the output is
//! committed). Every wire seed is encoded by the product's own encoder, the
//! config seed is the documented default file, so the seeds follow the
//! formats wherever they change.

use std::path::{Path, PathBuf};

use tandem_proto::dedup::{Dedup, DedupOp};
use tandem_proto::follow::{Follow, FollowOp};
use tandem_proto::wire::{
    ClientClass, Control, ControlOp, ControlReply, Device, DeviceShape, FuncName, Hello, Message,
    Reject, RejectReason, Welcome, HEADER_LEN, PROTOCOL_VERSION,
};
use tandem_proto::RingLayout;

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(dir.join(name), bytes).expect("write seed");
}

fn messages() -> Vec<(&'static str, Message<'static>)> {
    let layout = RingLayout::new(1 << 15).expect("layout");
    let mut follow = Follow::new(FollowOp::Map, 7, b"trainer.weights", 1 << 21).expect("name");
    follow.layout = *b"0123456789abcdef";
    let mut dedup = Dedup::new(DedupOp::Candidate, 0x7f00_0020_0000, 2 << 20);
    dedup.hash = [0xAB; 16];
    vec![
        (
            "hello",
            Message::Hello(Hello {
                pid: 4242,
                class: ClientClass::Training,
                flags: 0b101,
                exe: b"/usr/bin/python3",
                cgroup: b"/kubepods/pod1/ctr",
            }),
        ),
        (
            "welcome",
            Message::Welcome(Welcome {
                client_id: 3,
                region_len: layout.region_len() as u64,
                ring_capacity: layout.capacity(),
                heartbeat_interval_ms: 100,
                class: ClientClass::Inference,
                flags: 0b11,
                mps: None,
            }),
        ),
        (
            "board",
            Message::Board(tandem_proto::wire::BoardMsg {
                flags: tandem_proto::wire::BOARD_FLAG_WRITABLE,
            }),
        ),
        (
            "reject",
            Message::Reject(Reject {
                reason: RejectReason::TOO_MANY_CLIENTS,
                peer_version: PROTOCOL_VERSION,
                message: "tandemd serves at most 256 clients",
            }),
        ),
        (
            "func_name",
            Message::FuncName(FuncName {
                func_id: 0x1234_5678,
                name: b"_Z6kernelPfS_i",
                attrs: None,
            }),
        ),
        (
            "device",
            Message::Device(Device {
                ordinal: 0,
                uuid: *b"GPU-0123456789ab",
                name: b"NVIDIA H100 80GB HBM3",
                // With the SM shape tail; the fuzzer's cuts reach the form
                // without it.
                shape: Some(DeviceShape {
                    sms: 132,
                    threads_per_sm: 2048,
                    regs_per_sm: 65_536,
                    smem_per_sm: 233_472,
                    blocks_per_sm: 32,
                }),
            }),
        ),
        (
            "control",
            Message::Control(Control {
                op: ControlOp::SetClass,
                client_id: 9,
                class: ClientClass::Inference,
            }),
        ),
        (
            "control_reply",
            Message::ControlReply(ControlReply {
                status: 0,
                message: "client 9 is now inference",
            }),
        ),
        ("dedup", Message::Dedup(dedup)),
        ("follow", Message::Follow(follow)),
    ]
}

fn wire(dir: &Path) {
    for (name, m) in messages() {
        let mut buf = vec![0u8; m.encoded_len()];
        m.encode(&mut buf).expect("encode");
        // Mode 0: the whole datagram.
        let mut whole = vec![0u8];
        whole.extend_from_slice(&buf);
        write(dir, &format!("{name}-datagram"), &whole);
        // Mode 1: type code and body, the harness frames it.
        let ty = u16::from_le_bytes([buf[6], buf[7]]);
        let mut body = vec![1u8, ty as u8];
        body.extend_from_slice(&buf[HEADER_LEN..]);
        write(dir, &format!("{name}-body"), &body);
    }
}

fn ring(dir: &Path) {
    // capacity 16: push 20 (4 refused), pop 2, drain, push 10 (wraps), drain.
    let mut p = vec![0u8];
    p.extend(std::iter::repeat_n(0u8, 20));
    p.extend([1, 1, 2]);
    p.extend(std::iter::repeat_n(0u8, 10));
    p.extend([2, 8]);
    write(dir, "fill-wrap-drain", &p);
    // limit 2, three launches, raise, gate closed then opened.
    let mut g = vec![
        1u8, 5, 2, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 5, 3, 0, 0, 0, 0, 0, 0, 0,
    ];
    g.extend([6, 0, 6, 2, 6, 1, 9, 4]);
    write(dir, "gate-limit", &g);
    // head written 17 ahead (word 16 is head), then pop, then re-attach.
    let s = vec![2u8, 0, 0, 3, 16, 0, 17, 0, 0, 0, 0, 0, 0, 0, 1, 2, 7];
    write(dir, "scribbled-head", &s);
}

fn record(kind: u16, ts: u64, func: u64, bytes: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(64);
    r.extend(ts.to_le_bytes());
    r.extend(kind.to_le_bytes());
    r.extend([0u8; 6]);
    r.extend(0u64.to_le_bytes()); // stream
    r.extend(func.to_le_bytes());
    r.extend(bytes.to_le_bytes());
    r.extend(0u64.to_le_bytes()); // addr
    r.extend([1u8, 0, 0, 0, 1, 0, 1, 0, 32, 0, 1, 0, 1, 0, 0, 0]);
    r
}

fn drain(dir: &Path) {
    let mut p = vec![0u8];
    // Inference client (bit 7 clear): request begin, launches, request end.
    p.push(0);
    p.extend(record(9, 1, 0, 0));
    for i in 0..4 {
        p.push(0);
        p.extend(record(1, 2 + i, 0xABC, 0));
    }
    p.push(0);
    p.extend(record(10, 9, 0, 0));
    // Training client (bit 7 set): launches, a mark, sync.
    for i in 0..4 {
        p.push(0x80);
        p.extend(record(1, 3 + i, 0xDEF, 0));
    }
    p.push(0x80);
    p.extend(record(11, 8, 1, 0));
    p.push(0x80);
    p.extend(record(7, 9, 0, 0));
    p.extend([2, 10, 3, 4, 0x12, 0, 0, 0, 0, 0, 0, 0]);
    p.extend([5, b'a', b'd', b'a', b'm', b'_', b'k']);
    p.extend([7, 3]);
    write(dir, "two-clients", &p);
    // Head written far ahead of tail in the training client's ring (word 16).
    let mut g = vec![0u8, 0x81, 16, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 2, 0, 3];
    g.extend([6, 0x86, 0x86, 0, 2, 0]);
    write(dir, "garbage-head-reclaim", &g);
}

fn stats_http(dir: &Path) {
    for (name, head) in [
        (
            "stats",
            &b"GET /stats HTTP/1.1\r\nHost: localhost\r\n\r\n"[..],
        ),
        ("metrics", b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"),
        ("absolute", b"HEAD http://localhost/stats HTTP/1.1\r\n\r\n"),
        ("post", b"POST /stats HTTP/1.1\r\n\r\n"),
        ("http2", b"GET / HTTP/2\r\n\r\n"),
    ] {
        let mut r = vec![0u8];
        r.extend_from_slice(head);
        write(dir, &format!("route-{name}"), &r);
        let mut h = vec![1u8, 7];
        h.extend_from_slice(head);
        write(dir, &format!("handle-{name}"), &h);
    }
    write(dir, "handle-timeout", b"\x01\x45GET /sta");
    let resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
    let mut r = vec![2u8];
    r.extend_from_slice(resp);
    write(dir, "response", &r);
}

fn config(dir: &Path, root: &Path) {
    let defaults = std::fs::read(root.join("scripts/tandemd.toml")).expect("scripts/tandemd.toml");
    write(dir, "tandemd.toml", &defaults);
    write(
        dir,
        "small",
        b"log_level = \"debug\"\nring_capacity = 64\n[policy]\nauto_class = \"detect\"\n\n[[dedup.group]]\nname = \"team\"\nuids = [1000, 1001]\n",
    );
    write(dir, "bad-key", b"ring_capacity = 3\n");
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let seeds = root.join("fuzz/seeds");
    wire(&seeds.join("wire"));
    ring(&seeds.join("ring"));
    drain(&seeds.join("drain"));
    stats_http(&seeds.join("stats_http"));
    config(&seeds.join("config"), &root);
    println!("seeds written under {}", seeds.display());
}
