//! The wire codecs' tests: every message round-trips, every malformed or
//! oversized field is refused with its name, and the transport carries one fd.

use super::envelope::{
    TYPE_CONTROL, TYPE_CONTROL_REPLY, TYPE_DEDUP, TYPE_DEVICE, TYPE_FUNC_NAME, TYPE_HELLO,
    TYPE_REJECT, TYPE_WELCOME,
};
use super::registration::HELLO_FLAGS;
use super::*;
use crate::bytes::{get_u16, get_u32, get_u64};
use crate::dedup::Dedup;
use crate::error::Error;
use crate::follow::{Follow, FOLLOW_LEN};
use crate::mps::MpsJoin;
use crate::ring::{RingLayout, RING_LAYOUT_VERSION};
use std::os::fd::{FromRawFd, OwnedFd};

fn hello() -> Hello<'static> {
    Hello {
        pid: 4242,
        class: ClientClass::Inference,
        flags: HELLO_FLAG_SHARE_WEIGHTS,
        exe: b"/usr/bin/python3.12",
        cgroup: b"/user.slice/user-1000.slice/session-3.scope",
    }
}

fn welcome() -> Welcome {
    Welcome {
        client_id: 77,
        region_len: RingLayout::new(1024).unwrap().region_len() as u64,
        ring_capacity: 1024,
        heartbeat_interval_ms: 50,
        class: ClientClass::Training,
        flags: 0,
        mps: None,
    }
}

fn enc(m: &Message<'_>) -> Vec<u8> {
    let mut v = vec![0u8; MAX_MESSAGE_LEN];
    let n = m.encode(&mut v).unwrap();
    assert_eq!(n, m.encoded_len());
    v.truncate(n);
    v
}

#[test]
fn round_trips() {
    for m in [
        Message::Hello(hello()),
        Message::Hello(Hello {
            exe: &[b'x'; MAX_EXE_LEN],
            cgroup: &[b'y'; MAX_CGROUP_LEN],
            ..hello()
        }),
        Message::Hello(Hello {
            exe: b"",
            cgroup: b"",
            class: ClientClass::Auto,
            flags: 0,
            ..hello()
        }),
        Message::Welcome(welcome()),
        Message::Reject(Reject {
            reason: RejectReason::NOT_PERMITTED,
            peer_version: PROTOCOL_VERSION,
            message: "user 1000 may not claim class inference; see /etc/tandem/tandemd.toml",
        }),
    ] {
        let b = enc(&m);
        assert_eq!(Message::decode(&b), Ok(m));
    }
    assert_eq!(
        enc(&Message::Hello(hello())).len(),
        MAX_MESSAGE_LEN - 8192 + 19 + 43
    );
}

#[test]
fn header_errors() {
    let good = enc(&Message::Hello(hello()));
    for n in 0..HEADER_LEN {
        assert_eq!(
            Message::decode(&good[..n]),
            Err(Error::Truncated {
                what: "message header",
                need: HEADER_LEN,
                have: n
            })
        );
    }
    let mut b = good.clone();
    b[0] = b'X';
    assert!(matches!(Message::decode(&b), Err(Error::WireMagic { .. })));
    let mut b = good.clone();
    b[4..6].copy_from_slice(&7u16.to_le_bytes());
    let e = Message::decode(&b).unwrap_err();
    assert_eq!(
        e,
        Error::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: 7
        }
    );
    let text = e.to_string();
    assert!(text.contains("v1") && text.contains("v7"), "{text}");
    let mut b = good.clone();
    b[6..8].copy_from_slice(&99u16.to_le_bytes());
    assert_eq!(Message::decode(&b), Err(Error::UnknownMessage { raw: 99 }));
    // body_len disagrees with the datagram
    let mut b = good.clone();
    b[8..12].copy_from_slice(&5u32.to_le_bytes());
    assert!(matches!(
        Message::decode(&b),
        Err(Error::LengthMismatch { .. })
    ));
    let mut b = good.clone();
    b.push(0);
    assert!(matches!(
        Message::decode(&b),
        Err(Error::LengthMismatch { .. })
    ));
}

#[test]
fn hello_no_share_flag_round_trips_and_unknown_bits_are_dropped_on_decode_refused_on_encode() {
    for flags in [
        HELLO_FLAG_NO_SHARE_WEIGHTS,
        HELLO_FLAG_SHARE_WEIGHTS | HELLO_FLAG_NO_SHARE_WEIGHTS,
    ] {
        let m = Message::Hello(Hello { flags, ..hello() });
        let b = enc(&m);
        assert_eq!(b[HEADER_LEN + 5], flags);
        assert_eq!(Message::decode(&b), Ok(m));
    }
    assert_ne!(HELLO_FLAG_NO_SHARE_WEIGHTS, HELLO_FLAG_SHARE_WEIGHTS);
    // A newer shim's unknown request bits: the Hello still decodes, with
    // only the bits this build knows.
    for unknown in [1u8 << 5, 1 << 7, !HELLO_FLAGS] {
        let mut b = enc(&Message::Hello(hello()));
        b[HEADER_LEN + 5] = HELLO_FLAG_NO_SHARE_WEIGHTS | unknown;
        assert_eq!(
            Message::decode(&b),
            Ok(Message::Hello(Hello {
                flags: HELLO_FLAG_NO_SHARE_WEIGHTS,
                ..hello()
            }))
        );
        let mut out = [0u8; MAX_MESSAGE_LEN];
        assert_eq!(
            Message::Hello(Hello {
                flags: unknown,
                ..hello()
            })
            .encode(&mut out),
            Err(Error::BadValue {
                field: "hello flags",
                value: u64::from(unknown)
            })
        );
    }
    // The same for the Welcome.
    let mut w = enc(&Message::Welcome(welcome()));
    w[HEADER_LEN + 29] = WELCOME_FLAG_FOLLOW | 1 << 7;
    assert_eq!(
        Message::decode(&w),
        Ok(Message::Welcome(Welcome {
            flags: WELCOME_FLAG_FOLLOW,
            ..welcome()
        }))
    );
    let mut out = [0u8; MAX_MESSAGE_LEN];
    assert!(Message::Welcome(Welcome {
        flags: 1 << 7,
        ..welcome()
    })
    .encode(&mut out)
    .is_err());
}

fn mps_welcome() -> Welcome {
    Welcome {
        flags: WELCOME_FLAG_FOLLOW | WELCOME_FLAG_MPS,
        mps: Some(MpsJoin::new(crate::mps::PRIORITY_BELOW_NORMAL, 40, b"/run/tandem/mps").unwrap()),
        ..welcome()
    }
}

#[test]
fn mps_welcome_round_trips_with_its_tail() {
    let w = Message::Welcome(mps_welcome());
    let b = enc(&w);
    assert_eq!(b.len(), HEADER_LEN + WELCOME_LEN + 4 + 15);
    assert_eq!(&b[HEADER_LEN + 32..HEADER_LEN + 36], &[1, 40, 15, 0]);
    assert_eq!(&b[HEADER_LEN + 36..], b"/run/tandem/mps");
    assert_eq!(Message::decode(&b), Ok(w));
    let h = Message::Hello(Hello {
        flags: HELLO_FLAG_MPS | HELLO_FLAG_FOLLOW,
        ..hello()
    });
    assert_eq!(Message::decode(&enc(&h)), Ok(h));
}

#[test]
fn mps_flag_and_tail_must_agree() {
    let mut out = [0u8; MAX_MESSAGE_LEN];
    // The flag without the tail, and the tail without the flag.
    for w in [
        Welcome {
            flags: WELCOME_FLAG_MPS,
            ..welcome()
        },
        Welcome {
            flags: 0,
            ..mps_welcome()
        },
    ] {
        assert!(matches!(
            Message::Welcome(w).encode(&mut out),
            Err(Error::BadValue { .. })
        ));
    }
    // On the wire: the flag on a 32-byte Welcome, or a tail without the
    // flag (what a shim that did not ask must never get), fail to decode.
    let mut b = enc(&Message::Welcome(welcome()));
    b[HEADER_LEN + 29] |= WELCOME_FLAG_MPS;
    assert!(matches!(Message::decode(&b), Err(Error::Truncated { .. })));
    let mut b = enc(&Message::Welcome(mps_welcome()));
    b[HEADER_LEN + 29] &= !WELCOME_FLAG_MPS;
    assert!(matches!(
        Message::decode(&b),
        Err(Error::LengthMismatch { .. })
    ));
    // A bad tail value is refused.
    let mut b = enc(&Message::Welcome(mps_welcome()));
    b[HEADER_LEN + 33] = 101;
    assert!(Message::decode(&b).is_err());
}

#[test]
fn follow_flags_and_messages_round_trip() {
    let m = Message::Hello(Hello {
        flags: HELLO_FLAG_FOLLOW,
        ..hello()
    });
    assert_eq!(Message::decode(&enc(&m)), Ok(m));
    let w = Message::Welcome(Welcome {
        flags: WELCOME_FLAG_SHARE_WEIGHTS | WELCOME_FLAG_FOLLOW,
        ..welcome()
    });
    assert_eq!(Message::decode(&enc(&w)), Ok(w));
    let mut f = Follow::new(crate::follow::FollowOp::Map, 3, b"gpt2", 64 << 20).unwrap();
    f.layout = [9; 16];
    let b = enc(&Message::Follow(f));
    assert_eq!(b.len(), HEADER_LEN + FOLLOW_LEN);
    assert_eq!(message_type(&b), Some(MESSAGE_TYPE_FOLLOW));
    assert_eq!(Message::decode(&b), Ok(Message::Follow(f)));
    // A body of the wrong length is named as a Follow.
    let mut short = b.clone();
    short.truncate(b.len() - 1);
    short[8..12].copy_from_slice(&((FOLLOW_LEN - 1) as u32).to_le_bytes());
    assert!(matches!(
        Message::decode(&short),
        Err(Error::LengthMismatch { what: "Follow", .. })
    ));
}

#[test]
fn message_type_peeks_only_well_framed_headers() {
    let b = enc(&Message::Dedup({
        let mut d = Dedup::new(crate::dedup::DedupOp::Candidate, 1 << 21, 2 << 20);
        d.hash = [7; 16];
        d
    }));
    assert_eq!(message_type(&b), Some(MESSAGE_TYPE_DEDUP));
    assert_eq!(message_type(&b[..HEADER_LEN]), Some(MESSAGE_TYPE_DEDUP));
    assert_eq!(message_type(&b[..HEADER_LEN - 1]), None);
    let mut bad = b.clone();
    bad[0] ^= 0xff;
    assert_eq!(message_type(&bad), None);
    assert_eq!(
        message_type(&enc(&Message::Hello(hello()))),
        Some(TYPE_HELLO)
    );
}

/// Re-frame a body with a correct header so only the body is at fault.
fn framed(ty: u16, version: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&WIRE_MAGIC.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&(body.len() as u32).to_le_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn hello_body_errors() {
    let good = enc(&Message::Hello(hello()));
    let body = good[HEADER_LEN..].to_vec();
    // Every truncation of the body is an error, never a panic.
    for n in 0..body.len() {
        assert!(
            Message::decode(&framed(TYPE_HELLO, 1, &body[..n])).is_err(),
            "n={n}"
        );
    }
    // oversize declared lengths
    let mut b = body.clone();
    b[6..8].copy_from_slice(&(MAX_EXE_LEN as u16 + 1).to_le_bytes());
    assert_eq!(
        Message::decode(&framed(TYPE_HELLO, 1, &b)),
        Err(Error::FieldTooLong {
            field: "executable path",
            len: MAX_EXE_LEN + 1,
            max: MAX_EXE_LEN
        })
    );
    let mut b = body.clone();
    b[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_HELLO, 1, &b)),
        Err(Error::FieldTooLong {
            field: "cgroup path",
            ..
        })
    ));
    // lengths that do not add up
    let mut b = body.clone();
    b[6..8].copy_from_slice(&3u16.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_HELLO, 1, &b)),
        Err(Error::LengthMismatch { what: "Hello", .. })
    ));
    // bad class, NUL in a path
    let mut b = body.clone();
    b[4] = 9;
    assert_eq!(
        Message::decode(&framed(TYPE_HELLO, 1, &b)),
        Err(Error::BadValue {
            field: "class",
            value: 9
        })
    );
    let mut b = body.clone();
    b[HELLO_FIXED_LEN + 2] = 0;
    assert!(matches!(
        Message::decode(&framed(TYPE_HELLO, 1, &b)),
        Err(Error::BadValue {
            field: "executable path",
            ..
        })
    ));
    // encode refuses what decode would refuse
    let mut out = [0u8; MAX_MESSAGE_LEN + 16];
    let long = [b'a'; MAX_EXE_LEN + 1];
    assert!(matches!(
        Message::Hello(Hello {
            exe: &long,
            ..hello()
        })
        .encode(&mut out),
        Err(Error::FieldTooLong { .. })
    ));
    assert_eq!(
        Message::Hello(hello()).encode(&mut out[..20]),
        Err(Error::BufferTooSmall {
            need: good.len(),
            have: 20
        })
    );
}

#[test]
fn welcome_body_errors() {
    let good = enc(&Message::Welcome(welcome()));
    let body = good[HEADER_LEN..].to_vec();
    for n in 0..body.len() {
        assert!(Message::decode(&framed(TYPE_WELCOME, 1, &body[..n])).is_err());
    }
    let mut b = body.clone();
    b[16..20].copy_from_slice(&1000u32.to_le_bytes());
    assert_eq!(
        Message::decode(&framed(TYPE_WELCOME, 1, &b)),
        Err(Error::BadCapacity { capacity: 1000 })
    );
    let mut b = body.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_WELCOME, 1, &b)),
        Err(Error::BadValue {
            field: "region_len",
            ..
        })
    ));
    let mut b = body.clone();
    let foreign = RING_LAYOUT_VERSION + 1;
    b[20..24].copy_from_slice(&foreign.to_le_bytes());
    assert_eq!(
        Message::decode(&framed(TYPE_WELCOME, 1, &b)),
        Err(Error::LayoutVersion {
            ours: RING_LAYOUT_VERSION,
            theirs: foreign
        })
    );
    let mut b = body.clone();
    b[24..28].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_WELCOME, 1, &b)),
        Err(Error::BadValue {
            field: "heartbeat_interval_ms",
            ..
        })
    ));
}

#[test]
fn reject_decodes_under_any_version() {
    let msg = "speak v1";
    let mut body = Vec::new();
    body.extend_from_slice(&RejectReason::VERSION_MISMATCH.0.to_le_bytes());
    body.extend_from_slice(&(msg.len() as u16).to_le_bytes());
    body.extend_from_slice(msg.as_bytes());
    let frame = framed(TYPE_REJECT, 9, &body);
    let m = Message::decode(&frame).unwrap();
    let Message::Reject(r) = m else {
        panic!("not a reject: {m:?}")
    };
    assert_eq!(r.peer_version, 9);
    assert_eq!(r.reason, RejectReason::VERSION_MISMATCH);
    let shown = r.to_string();
    assert!(
        shown.contains("v9") && shown.contains("version mismatch") && shown.contains(msg),
        "{shown}"
    );
    // every refusal has its own description; unknown reasons still decode
    let described: std::collections::BTreeSet<&str> =
        (1..=9).map(|c| RejectReason(c).describe()).collect();
    assert_eq!(described.len(), 9);
    assert!(!described.contains("unknown reason"));
    assert_eq!(RejectReason(10).describe(), "unknown reason");
    let mut b = body.clone();
    b[0..2].copy_from_slice(&500u16.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_REJECT, 1, &b)),
        Ok(Message::Reject(Reject {
            reason: RejectReason(500),
            ..
        }))
    ));
    // malformed rejects
    for n in 0..body.len() {
        assert!(Message::decode(&framed(TYPE_REJECT, 1, &body[..n])).is_err());
    }
    let mut b = body.clone();
    b[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_REJECT, 1, &b)),
        Err(Error::FieldTooLong { .. })
    ));
    let mut b = body.clone();
    b[4] = 0xFF;
    assert!(matches!(
        Message::decode(&framed(TYPE_REJECT, 1, &b)),
        Err(Error::BadValue { .. })
    ));
}

fn func_name() -> FuncName<'static> {
    FuncName {
        func_id: crate::record::func_id(b"_Z6matmulPfS_S_i"),
        name: b"_Z6matmulPfS_S_i",
        attrs: None,
    }
}

fn device() -> Device<'static> {
    Device {
        ordinal: 3,
        uuid: *b"0123456789abcdef",
        name: b"NVIDIA H100 80GB HBM3",
        shape: None,
    }
}

fn control() -> Control {
    Control {
        op: ControlOp::SetClass,
        client_id: 0x0102_0304_0506_0708,
        class: ClientClass::Inference,
    }
}

#[test]
fn new_messages_round_trip() {
    let long_name = [b'k'; MAX_FUNC_NAME_LEN];
    let long_dev = [b'd'; MAX_DEVICE_NAME_LEN];
    let long_msg = "m".repeat(MAX_CONTROL_MESSAGE_LEN);
    for m in [
        Message::FuncName(func_name()),
        Message::FuncName(FuncName {
            func_id: u64::MAX,
            name: &long_name,
            attrs: Some(FuncAttrs {
                regs_per_thread: u32::MAX,
                static_smem_bytes: 48 << 10,
            }),
        }),
        Message::FuncName(FuncName {
            func_id: 0,
            name: b"",
            attrs: None,
        }),
        Message::FuncName(FuncName {
            attrs: Some(FuncAttrs {
                regs_per_thread: 96,
                static_smem_bytes: 0,
            }),
            ..func_name()
        }),
        Message::Device(device()),
        Message::Device(Device {
            name: &long_dev,
            ..device()
        }),
        Message::Device(Device {
            ordinal: 0,
            uuid: [0; 16],
            name: b"",
            shape: None,
        }),
        Message::Device(Device {
            name: &long_dev,
            shape: Some(DeviceShape {
                sms: u32::MAX,
                ..DeviceShape::default()
            }),
            ..device()
        }),
        Message::Control(control()),
        Message::Control(Control {
            op: ControlOp::Reload,
            client_id: 0,
            class: ClientClass::Auto,
        }),
        Message::ControlReply(ControlReply {
            status: ControlReply::OK,
            message: "reloaded /etc/tandem/tandemd.toml",
        }),
        Message::ControlReply(ControlReply {
            status: RejectReason::NOT_PERMITTED.0,
            message: &long_msg,
        }),
    ] {
        let b = enc(&m);
        assert_eq!(Message::decode(&b), Ok(m), "{}", m.type_name());
        assert!(b.len() <= MAX_MESSAGE_LEN);
    }
    // Pinned type codes and fixed offsets (the shim and tandemctl rely on them).
    let b = enc(&Message::FuncName(func_name()));
    assert_eq!(get_u16(&b, 6), 4);
    assert_eq!(get_u64(&b, HEADER_LEN), func_name().func_id);
    assert_eq!(get_u16(&b, HEADER_LEN + 8), 16);
    let b = enc(&Message::Device(device()));
    assert_eq!(get_u16(&b, 6), 5);
    assert_eq!(get_u32(&b, HEADER_LEN), 3);
    assert_eq!(&b[HEADER_LEN + 4..HEADER_LEN + 20], b"0123456789abcdef");
    let b = enc(&Message::Control(control()));
    assert_eq!(get_u16(&b, 6), 6);
    assert_eq!(b.len(), HEADER_LEN + CONTROL_LEN);
    assert_eq!(get_u16(&b, HEADER_LEN), 2);
    assert_eq!(b[HEADER_LEN + 2], 1);
    assert_eq!(get_u64(&b, HEADER_LEN + 4), 0x0102_0304_0506_0708);
    let b = enc(&Message::ControlReply(ControlReply {
        status: 3,
        message: "no",
    }));
    assert_eq!(get_u16(&b, 6), 7);
    assert!(ControlReply {
        status: 0,
        message: ""
    }
    .is_ok());
}

#[test]
fn board_message_round_trips_and_checks_the_board_length() {
    for flags in [0, BOARD_FLAG_WRITABLE] {
        let m = Message::Board(BoardMsg { flags });
        let b = enc(&m);
        assert_eq!(get_u16(&b, 6), 10, "pinned type code");
        assert_eq!(b.len(), HEADER_LEN + BOARD_MSG_LEN);
        assert_eq!(Message::decode(&b), Ok(m));
    }
    let mut b = enc(&Message::Board(BoardMsg {
        flags: BOARD_FLAG_WRITABLE,
    }));
    b[HEADER_LEN] ^= 1;
    assert!(matches!(
        Message::decode(&b),
        Err(Error::BadValue {
            field: "board length",
            ..
        })
    ));
    let mut b = enc(&Message::Board(BoardMsg { flags: 0 }));
    b[HEADER_LEN + 4] = 0xFE;
    assert_eq!(
        Message::decode(&b),
        Ok(Message::Board(BoardMsg { flags: 0 })),
        "unknown flag bits are dropped on decode"
    );
    let mut out = [0u8; 64];
    assert!(Message::Board(BoardMsg { flags: 2 })
        .encode(&mut out)
        .is_err());
    assert!(Message::decode(&b[..b.len() - 1]).is_err(), "truncated");
}

#[test]
fn new_messages_reject_malformed_bodies() {
    for (ty, good) in [
        (TYPE_FUNC_NAME, enc(&Message::FuncName(func_name()))),
        (TYPE_DEVICE, enc(&Message::Device(device()))),
        (TYPE_CONTROL, enc(&Message::Control(control()))),
        (
            TYPE_CONTROL_REPLY,
            enc(&Message::ControlReply(ControlReply {
                status: 0,
                message: "ok",
            })),
        ),
        (
            TYPE_DEDUP,
            enc(&Message::Dedup({
                let mut d = Dedup::new(crate::dedup::DedupOp::Offer, 1 << 21, 2 << 20);
                d.shared_id = 4;
                d
            })),
        ),
    ] {
        let body = good[HEADER_LEN..].to_vec();
        // every truncation is an error, never a panic
        for n in 0..body.len() {
            assert!(
                Message::decode(&framed(ty, 1, &body[..n])).is_err(),
                "type {ty} n={n}"
            );
        }
        // one extra byte is an error
        let mut long = body.clone();
        long.push(b'x');
        assert!(Message::decode(&framed(ty, 1, &long)).is_err(), "type {ty}");
        // another version is a version mismatch
        assert_eq!(
            Message::decode(&framed(ty, 2, &body)),
            Err(Error::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: 2
            })
        );
    }

    // FuncName: oversize declared name, NUL in the name
    let mut b = enc(&Message::FuncName(func_name()))[HEADER_LEN..].to_vec();
    b[8..10].copy_from_slice(&(MAX_FUNC_NAME_LEN as u16 + 1).to_le_bytes());
    assert_eq!(
        Message::decode(&framed(TYPE_FUNC_NAME, 1, &b)),
        Err(Error::FieldTooLong {
            field: "kernel name",
            len: MAX_FUNC_NAME_LEN + 1,
            max: MAX_FUNC_NAME_LEN
        })
    );
    let mut b = enc(&Message::FuncName(func_name()))[HEADER_LEN..].to_vec();
    b[FUNC_NAME_FIXED_LEN + 1] = 0;
    assert!(matches!(
        Message::decode(&framed(TYPE_FUNC_NAME, 1, &b)),
        Err(Error::BadValue {
            field: "kernel name",
            ..
        })
    ));

    // Device: oversize name, NUL in the name
    let mut b = enc(&Message::Device(device()))[HEADER_LEN..].to_vec();
    b[20..22].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_DEVICE, 1, &b)),
        Err(Error::FieldTooLong {
            field: "device name",
            ..
        })
    ));
    let mut b = enc(&Message::Device(device()))[HEADER_LEN..].to_vec();
    b[DEVICE_FIXED_LEN] = 0;
    assert!(matches!(
        Message::decode(&framed(TYPE_DEVICE, 1, &b)),
        Err(Error::BadValue {
            field: "device name",
            ..
        })
    ));

    // Control: unknown op, bad class, non-zero reserved byte
    let good = enc(&Message::Control(control()))[HEADER_LEN..].to_vec();
    let mut b = good.clone();
    b[0..2].copy_from_slice(&9u16.to_le_bytes());
    assert_eq!(
        Message::decode(&framed(TYPE_CONTROL, 1, &b)),
        Err(Error::BadValue {
            field: "control op",
            value: 9
        })
    );
    let mut b = good.clone();
    b[2] = 7;
    assert_eq!(
        Message::decode(&framed(TYPE_CONTROL, 1, &b)),
        Err(Error::BadValue {
            field: "class",
            value: 7
        })
    );
    let mut b = good.clone();
    b[3] = 1;
    assert!(matches!(
        Message::decode(&framed(TYPE_CONTROL, 1, &b)),
        Err(Error::BadValue {
            field: "control reserved",
            ..
        })
    ));

    // ControlReply: oversize, not UTF-8
    let good = enc(&Message::ControlReply(ControlReply {
        status: 0,
        message: "ok",
    }))[HEADER_LEN..]
        .to_vec();
    let mut b = good.clone();
    b[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
    assert!(matches!(
        Message::decode(&framed(TYPE_CONTROL_REPLY, 1, &b)),
        Err(Error::FieldTooLong { .. })
    ));
    let mut b = good.clone();
    b[4] = 0xFF;
    assert!(matches!(
        Message::decode(&framed(TYPE_CONTROL_REPLY, 1, &b)),
        Err(Error::BadValue { .. })
    ));

    // encode refuses what decode refuses
    let mut out = vec![0u8; MAX_MESSAGE_LEN];
    let long = [b'a'; MAX_FUNC_NAME_LEN + 1];
    assert!(matches!(
        Message::FuncName(FuncName {
            func_id: 1,
            name: &long,
            attrs: None,
        })
        .encode(&mut out),
        Err(Error::FieldTooLong { .. })
    ));
    assert!(matches!(
        Message::Device(Device {
            name: b"a\0b",
            ..device()
        })
        .encode(&mut out),
        Err(Error::BadValue { .. })
    ));
    let long = "x".repeat(MAX_CONTROL_MESSAGE_LEN + 1);
    assert!(matches!(
        Message::ControlReply(ControlReply {
            status: 0,
            message: &long
        })
        .encode(&mut out),
        Err(Error::FieldTooLong { .. })
    ));
}

#[test]
fn garbage_never_panics_new_messages() {
    let mut x: u64 = 0x0123_4567_89AB_CDEF;
    let goods = [
        enc(&Message::FuncName(func_name())),
        enc(&Message::Device(device())),
        enc(&Message::Control(control())),
        enc(&Message::ControlReply(ControlReply {
            status: 1,
            message: "hello",
        })),
    ];
    for i in 0..40_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = goods[i % goods.len()].clone();
        let at = (x as usize) % b.len();
        b[at] = (x >> 32) as u8;
        b.truncate(((x >> 40) as usize) % (b.len() + 1));
        let _ = Message::decode(&b);
    }
}

#[test]
fn garbage_never_panics() {
    let mut x: u64 = 0xDEAD_BEEF_1234_5678;
    let good = enc(&Message::Hello(hello()));
    for _ in 0..50_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = good.clone();
        let i = (x as usize) % b.len();
        b[i] = (x >> 32) as u8;
        b.truncate(((x >> 40) as usize) % (b.len() + 1));
        let _ = Message::decode(&b);
    }
}

#[test]
fn seqpacket_with_fd() {
    use std::os::fd::AsFd;
    let mut sv = [0; 2];
    // SAFETY: sv is a valid out-array of two ints.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            sv.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0);
    // SAFETY: fresh fds from socketpair, owned by us.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };

    // Hello without fd.
    let hello_bytes = enc(&Message::Hello(hello()));
    send(a.as_fd(), &hello_bytes, None).unwrap();
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let got = recv(b.as_fd(), &mut buf).unwrap();
    assert!(got.fd.is_none());
    assert_eq!(
        Message::decode(&buf[..got.len]),
        Ok(Message::Hello(hello()))
    );

    // Welcome with a region fd; the receiver maps it and sees the ring.
    let layout = RingLayout::new(1024).unwrap();
    let (memfd, map) = crate::shm::create(c"tandem-ring", layout.region_len()).unwrap();
    let mut consumer = crate::ring::Consumer::init(&map, layout, 77).unwrap();
    send(
        b.as_fd(),
        &enc(&Message::Welcome(welcome())),
        Some(memfd.as_fd()),
    )
    .unwrap();
    let got = recv(a.as_fd(), &mut buf).unwrap();
    let Ok(Message::Welcome(w)) = Message::decode(&buf[..got.len]) else {
        panic!("no welcome")
    };
    let fd = got.fd.expect("fd attached");
    let client_map = crate::shm::map_received(fd.as_fd(), w.region_len as usize).unwrap();
    let mut p = crate::ring::Producer::attach(&client_map, w.layout().unwrap()).unwrap();
    assert!(p.push(&crate::record::Record::new(
        crate::record::EventKind::ALLOC,
        5
    )));
    let r = consumer.pop().unwrap().unwrap();
    assert_eq!(r.kind(), Ok(crate::record::EventKind::ALLOC));
    assert_eq!(
        crate::ring::control_block(&client_map, layout)
            .unwrap()
            .client_id(),
        77
    );

    // Too-small receive buffer: reported, not silently truncated.
    send(a.as_fd(), &hello_bytes, None).unwrap();
    assert!(matches!(
        recv(b.as_fd(), &mut buf[..8]),
        Err(Error::BadAncillary { .. })
    ));

    // Peer closes: len 0.
    drop(a);
    assert_eq!(recv(b.as_fd(), &mut buf).unwrap().len, 0);
}

/// The attributes tail: 8 bytes after the name, decoded where present; a
/// body with anything else after the name is refused (as before the tail).
#[test]
fn func_name_attributes_tail_is_optional_and_exact() {
    let with = FuncName {
        attrs: Some(FuncAttrs {
            regs_per_thread: 0x0102_0304,
            static_smem_bytes: 0x0506_0708,
        }),
        ..func_name()
    };
    let b = enc(&Message::FuncName(with));
    let plain = enc(&Message::FuncName(func_name()));
    assert_eq!(b.len(), plain.len() + FUNC_ATTRS_LEN);
    assert_eq!(
        b[HEADER_LEN..HEADER_LEN + 8],
        plain[HEADER_LEN..HEADER_LEN + 8],
        "same id"
    );
    let tail = &b[b.len() - FUNC_ATTRS_LEN..];
    assert_eq!(get_u32(tail, 0), 0x0102_0304);
    assert_eq!(get_u32(tail, 4), 0x0506_0708);
    match Message::decode(&b) {
        Ok(Message::FuncName(f)) => assert_eq!(f, with),
        other => panic!("{other:?}"),
    }
    match Message::decode(&plain) {
        Ok(Message::FuncName(f)) => assert_eq!(f.attrs, None),
        other => panic!("{other:?}"),
    }
    // A tail of another length is no FuncName.
    let mut body = b[HEADER_LEN..].to_vec();
    body.pop();
    assert!(Message::decode(&framed(TYPE_FUNC_NAME, PROTOCOL_VERSION, &body)).is_err());
}

/// The shape tail: 20 bytes after the device's name, decoded where present;
/// a body with anything else after the name is refused (as before the tail).
#[test]
fn device_shape_tail_is_optional_and_exact() {
    let with = Device {
        shape: Some(DeviceShape {
            sms: 132,
            threads_per_sm: 2048,
            regs_per_sm: 65_536,
            smem_per_sm: 233_472,
            blocks_per_sm: 32,
        }),
        ..device()
    };
    let b = enc(&Message::Device(with));
    let plain = enc(&Message::Device(device()));
    assert_eq!(b.len(), plain.len() + DEVICE_SHAPE_LEN);
    assert_eq!(b[HEADER_LEN..plain.len()], plain[HEADER_LEN..], "same head");
    let tail = &b[b.len() - DEVICE_SHAPE_LEN..];
    let words: Vec<u32> = (0..5).map(|i| get_u32(tail, 4 * i)).collect();
    assert_eq!(words, [132, 2048, 65_536, 233_472, 32]);
    match Message::decode(&b) {
        Ok(Message::Device(d)) => assert_eq!(d, with),
        other => panic!("{other:?}"),
    }
    match Message::decode(&plain) {
        Ok(Message::Device(d)) => assert_eq!(d.shape, None),
        other => panic!("{other:?}"),
    }
    let mut body = b[HEADER_LEN..].to_vec();
    body.pop();
    assert!(Message::decode(&framed(TYPE_DEVICE, PROTOCOL_VERSION, &body)).is_err());
}
