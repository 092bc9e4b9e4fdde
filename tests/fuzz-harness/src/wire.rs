//! Every wire decoder: Hello, Welcome, Reject, FuncName, Device, Control,
//! ControlReply, Dedup, Follow and Board, through [`Message::decode`] as
//! tandemd and the shim call it on each datagram.
//!
//! Input: byte 0 even, the rest is a whole datagram (header included); byte
//! 0 odd, byte 1 picks the type code (`% TYPE_CODES`: the ten types, codes 1
//! to 10, and the unknown code 0) and the rest is a body, framed by a correct
//! header, so the fuzzer spends its time inside the body decoders.
//!
//! Oracle: a message that decodes encodes again (decode checks everything
//! encode checks) to a datagram that decodes to the same message.

use tandem_proto::wire::{
    message_type, Message, BOARD_FLAG_WRITABLE, HEADER_LEN, PROTOCOL_VERSION, WIRE_MAGIC,
};

/// Type codes the body mode frames: 0 (no such type) to 10 (Board), the
/// highest code [`Message::decode`] knows.
const TYPE_CODES: u8 = 11;

/// One input.
pub fn run(data: &[u8]) {
    if let Some(d) = datagram(data) {
        check(&d);
    }
}

/// The datagram an input stands for (see the module docs).
fn datagram(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    if mode & 1 == 0 {
        return Some(rest.to_vec());
    }
    let (&ty, body) = rest.split_first()?;
    let body_len = u32::try_from(body.len()).ok()?;
    let mut dgram = Vec::with_capacity(HEADER_LEN + body.len());
    dgram.extend_from_slice(&WIRE_MAGIC.to_le_bytes());
    dgram.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    dgram.extend_from_slice(&u16::from(ty % TYPE_CODES).to_le_bytes());
    dgram.extend_from_slice(&body_len.to_le_bytes());
    dgram.extend_from_slice(body);
    Some(dgram)
}

/// The message type an input decodes to, if it decodes (for the figures:
/// how many corpus inputs reach each decoder's success path).
#[must_use]
pub fn decoded_type(data: &[u8]) -> Option<&'static str> {
    let d = datagram(data)?;
    Message::decode(&d).ok().map(|m| m.type_name())
}

fn check(dgram: &[u8]) {
    let ty = message_type(dgram);
    let msg = match Message::decode(dgram) {
        Ok(m) => m,
        Err(e) => {
            // Every error renders (tandemd logs it, the shim prints it).
            let _ = e.to_string();
            return;
        }
    };
    assert!(ty.is_some(), "a decoded datagram has a header");
    let _ = format!("{msg:?} {}", msg.type_name());
    match &msg {
        Message::Reject(r) => {
            let _ = r.to_string();
        }
        Message::Follow(f) => {
            let _ = (f.name(), f.name_str());
            f.validate().expect("a decoded Follow validates");
        }
        Message::Dedup(d) => d.validate().expect("a decoded Dedup validates"),
        Message::Welcome(w) => {
            let layout = w.layout().expect("a decoded Welcome has a valid layout");
            assert_eq!(layout.region_len() as u64, w.region_len);
        }
        // The shim maps the board writable on this bit alone: no other bit
        // a peer sets may survive decoding.
        Message::Board(b) => assert_eq!(b.flags & !BOARD_FLAG_WRITABLE, 0, "unknown Board flags"),
        _ => {}
    }
    let mut out = vec![0u8; msg.encoded_len()];
    let n = msg.encode(&mut out).expect("a decoded message encodes");
    assert_eq!(n, out.len(), "encode writes encoded_len bytes");
    let again = Message::decode(&out).expect("an encoded message decodes");
    match (msg, again) {
        // The header's version is the sender's: ours after re-encoding.
        (Message::Reject(a), Message::Reject(b)) => {
            assert_eq!((a.reason, a.message), (b.reason, b.message));
            assert_eq!(b.peer_version, PROTOCOL_VERSION);
        }
        (a, b) => assert_eq!(a, b, "decode(encode(m)) == m"),
    }
}
