//! NRI's transport: one unix socket multiplexed into logical connections
//! (containerd/nri `pkg/net/multiplex`: frames of a 4-byte connection id and
//! a 4-byte length, big-endian; connection 1 carries the plugin's service,
//! 2 the runtime's), each carrying ttrpc (containerd/ttrpc: messages of a
//! 10-byte header — length, stream id, type, flags — and a protobuf
//! `Request {service 1, method 2, payload 3}` or `Response {status 1,
//! payload 2}`).

use std::io::{self, Read, Write};

use crate::pb::{self, Value, Writer};

/// The plugin's service (the runtime calls it).
pub const PLUGIN_CONN: u32 = 1;
/// The runtime's service (the plugin calls it).
pub const RUNTIME_CONN: u32 = 2;
/// ttrpc message type: request.
pub const TYPE_REQUEST: u8 = 1;
/// ttrpc message type: response.
pub const TYPE_RESPONSE: u8 = 2;
/// Largest frame or message accepted (ttrpc's own default limit is 4 MiB).
pub const MAX_LEN: usize = 4 << 20;

/// Write one mux frame.
pub fn write_frame(w: &mut impl Write, conn: u32, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len()).map_err(|_| io::Error::other("frame too long"))?;
    let mut f = Vec::with_capacity(8 + payload.len());
    f.extend_from_slice(&conn.to_be_bytes());
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(payload);
    w.write_all(&f)
}

/// Read one mux frame: (connection id, payload).
pub fn read_frame(r: &mut impl Read) -> io::Result<(u32, Vec<u8>)> {
    let mut h = [0u8; 8];
    r.read_exact(&mut h)?;
    let conn = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    if len > MAX_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "mux frame too long",
        ));
    }
    let mut p = vec![0u8; len];
    r.read_exact(&mut p)?;
    Ok((conn, p))
}

/// One ttrpc message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stream id (odd: started by the client).
    pub stream: u32,
    /// [`TYPE_REQUEST`] or [`TYPE_RESPONSE`].
    pub kind: u8,
    /// The protobuf body.
    pub body: Vec<u8>,
}

impl Message {
    /// Header and body.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 + self.body.len());
        out.extend_from_slice(&(self.body.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.kind);
        out.push(0);
        out.extend_from_slice(&self.body);
        out
    }

    /// Take one whole message off the front of `buf`, if it holds one.
    pub fn take(buf: &mut Vec<u8>) -> io::Result<Option<Message>> {
        if buf.len() < 10 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len > MAX_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "ttrpc message too long",
            ));
        }
        if buf.len() < 10 + len {
            return Ok(None);
        }
        let stream = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let kind = buf[8];
        let body = buf[10..10 + len].to_vec();
        buf.drain(..10 + len);
        Ok(Some(Message { stream, kind, body }))
    }
}

/// A ttrpc request's body.
#[must_use]
pub fn request(service: &str, method: &str, payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.string(1, service).string(2, method).bytes(3, payload);
    w.0
}

/// (service, method, payload) of a request body.
pub fn parse_request(body: &[u8]) -> io::Result<(String, String, Vec<u8>)> {
    let bad = |e: pb::DecodeError| io::Error::new(io::ErrorKind::InvalidData, e.0);
    let (mut s, mut m, mut p) = (String::new(), String::new(), Vec::new());
    for (n, v) in pb::fields(body).map_err(bad)? {
        match (n, v) {
            (1, v) => s = pb::string(v),
            (2, v) => m = pb::string(v),
            (3, Value::Bytes(b)) => p = b.to_vec(),
            _ => {}
        }
    }
    Ok((s, m, p))
}

/// A successful response's body.
#[must_use]
pub fn response(payload: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.bytes(2, payload);
    w.0
}

/// (status code, message, payload) of a response body (code 0: OK).
pub fn parse_response(body: &[u8]) -> io::Result<(u64, String, Vec<u8>)> {
    let bad = |e: pb::DecodeError| io::Error::new(io::ErrorKind::InvalidData, e.0);
    let (mut code, mut msg, mut p) = (0, String::new(), Vec::new());
    for (n, v) in pb::fields(body).map_err(bad)? {
        match (n, v) {
            (1, Value::Bytes(st)) => {
                for (n, f) in pb::fields(st).map_err(bad)? {
                    match (n, f) {
                        (1, Value::Varint(c)) => code = c,
                        (2, f) => msg = pb::string(f),
                        _ => {}
                    }
                }
            }
            (2, Value::Bytes(b)) => p = b.to_vec(),
            _ => {}
        }
    }
    Ok((code, msg, p))
}
