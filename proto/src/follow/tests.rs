use super::*;

fn sample(op: FollowOp) -> Follow {
    let mut f = Follow::new(op, 77, b"resnet50/v1", 96 << 20).unwrap();
    f.layout = *b"0123456789abcdef";
    if op.is_answer() {
        f.status = FollowStatus::MISMATCH.0;
    }
    f
}

#[test]
fn every_op_round_trips() {
    for raw in 1..=7 {
        let op = FollowOp::from_u16(raw).unwrap();
        let f = sample(op);
        let mut b = [0u8; FOLLOW_LEN];
        f.encode_body(&mut b).unwrap();
        let back = Follow::decode(&b).unwrap();
        assert_eq!(back, f, "{}", op.name());
        assert_eq!(back.name(), b"resnet50/v1");
        assert_eq!(op.from_shim(), !op.is_answer());
    }
    assert_eq!(FollowOp::from_u16(0), None);
    assert_eq!(FollowOp::from_u16(8), None);
}

#[test]
fn held_is_a_shim_op_without_an_answer_and_op_8_is_still_refused() {
    let op = FollowOp::from_u16(7).unwrap();
    assert_eq!(op, FollowOp::Held);
    assert_eq!(op.name(), "held");
    assert!(op.from_shim() && !op.is_answer());
    let mut f = Follow::new(FollowOp::Held, 0, b"model-b", 4 << 20).unwrap();
    f.layout = *b"layout-of-modelb";
    let mut b = [0u8; FOLLOW_LEN];
    f.encode_body(&mut b).unwrap();
    assert_eq!(&b[0..2], &7u16.to_le_bytes());
    let back = Follow::decode(&b).unwrap();
    assert_eq!(back, f);
    assert_eq!((back.request, back.status), (0, 0));
    // A HELD carries no status.
    let mut z = b;
    z[2] = 1;
    assert!(matches!(
        Follow::decode(&z),
        Err(Error::BadValue {
            field: "follow status",
            ..
        })
    ));
    let mut z = b;
    z[0..2].copy_from_slice(&8u16.to_le_bytes());
    assert!(matches!(
        Follow::decode(&z),
        Err(Error::BadValue {
            field: "follow op",
            value: 8
        })
    ));
}

#[test]
fn an_answer_echoes_the_request() {
    let m = sample(FollowOp::Map);
    let a = m.answer(FollowStatus::NOT_FOUND);
    assert_eq!(a.op, FollowOp::Mapped);
    assert_eq!(
        (a.request, a.len, a.layout, a.name()),
        (77, m.len, m.layout, m.name())
    );
    assert_eq!(FollowStatus(a.status).name(), "not_found");
    assert_eq!(
        sample(FollowOp::Share).answer(FollowStatus::OK).op,
        FollowOp::Shared
    );
}

#[test]
fn api_codes_are_distinct_and_every_status_has_one() {
    for (i, a) in api::CODES.iter().enumerate() {
        assert!(
            api::CODES[i + 1..].iter().all(|b| b.1 != a.1 && b.0 != a.0),
            "{}",
            a.0
        );
        assert_eq!(api::text(a.1), a.2);
    }
    assert_eq!(api::text(1234), c"unknown tandem_follow code");
    for s in 0..=FollowStatus::MAX {
        let code = api::from_status(FollowStatus(s));
        assert_eq!(code.is_none(), FollowStatus(s) == FollowStatus::NOT_READY);
        if let Some(c) = code {
            assert!(api::CODES.iter().any(|x| x.1 == c));
        }
    }
}

#[test]
fn names_are_printable_and_bounded() {
    assert!(valid_name(b"a"));
    assert!(valid_name(&[b'x'; MAX_NAME_LEN]));
    assert!(!valid_name(b""));
    assert!(!valid_name(&[b'x'; MAX_NAME_LEN + 1]));
    assert!(!valid_name(b"two words"));
    assert!(!valid_name(b"tab\there"));
    assert!(!valid_name("caf\u{e9}".as_bytes()));
    assert!(Follow::new(FollowOp::Map, 1, b"bad name", 1).is_none());
}

#[test]
fn bad_fields_are_named() {
    let mut b = [0u8; FOLLOW_LEN];
    sample(FollowOp::Share).encode_body(&mut b).unwrap();
    let field = |b: &[u8]| match Follow::decode(b) {
        Err(Error::BadValue { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let mut z = b;
    z[16..24].fill(0);
    assert_eq!(field(&z), "follow len");
    let mut z = b;
    z[16..24].copy_from_slice(&(MAX_REGION_LEN + 1).to_le_bytes());
    assert_eq!(field(&z), "follow len");
    let mut z = b;
    z[6] = 1;
    assert_eq!(field(&z), "follow reserved");
    let mut z = b;
    z[2] = 1; // Share carries no status
    assert_eq!(field(&z), "follow status");
    let mut z = b;
    z[0] = 99;
    assert_eq!(field(&z), "follow op");
    let mut z = b;
    z[4..6].copy_from_slice(&0u16.to_le_bytes());
    assert_eq!(field(&z), "follow name padding");
    let mut z = b;
    z[4..6].copy_from_slice(&57u16.to_le_bytes());
    assert_eq!(field(&z), "follow name");
    let mut z = b;
    z[4..6].copy_from_slice(&0u16.to_le_bytes());
    z[40..96].fill(0);
    assert_eq!(field(&z), "follow name");
    let mut z = b;
    z[41] = b' ';
    assert_eq!(field(&z), "follow name");
    let mut z = b;
    let mut a = sample(FollowOp::Mapped);
    a.status = 8;
    assert!(a.encode_body(&mut z).is_err());
    assert!(matches!(
        Follow::decode(&b[..40]),
        Err(Error::LengthMismatch { .. })
    ));
}
