//! The stats socket's HTTP: tandemd's request parser ([`route`]) and its
//! whole request handler ([`handle`]: the bounded head read, the routing,
//! the answer) over a connection that delivers the input in pieces, and
//! tandemctl's response parser ([`parse_response`]).
//!
//! Input: byte 0 picks the parser (`% 3`); for the handler, byte 1 the piece
//! size (1 to 64 bytes) and whether the stream ends in a timeout.
//!
//! Oracle: nothing panics; whatever arrives, the handler either answers one
//! well-formed response with a status it documents, which tandemctl's
//! parser reads back, or closes without answering when the peer closed
//! before a whole request head.

use std::io::{self, Read, Write};
use std::sync::OnceLock;

use tandem_coordinator::client::parse_response;
use tandem_coordinator::config::Config;
use tandem_coordinator::shared::Shared;
use tandem_coordinator::stats_http::{handle, route};

struct Conn<'a> {
    input: &'a [u8],
    piece: usize,
    timeout_at_end: bool,
    out: Vec<u8>,
}

impl Read for Conn<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.input.is_empty() && self.timeout_at_end {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.piece.min(buf.len()).min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Conn<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| crate::tandemd::shared_state(Config::default()))
}

/// One input.
pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 3 {
        0 => {
            let _ = route(rest);
        }
        1 => {
            let Some((&shape, input)) = rest.split_first() else {
                return;
            };
            let mut conn = Conn {
                input,
                piece: usize::from(shape % 64) + 1,
                timeout_at_end: shape & 64 != 0,
                out: Vec::new(),
            };
            handle(&mut conn, shared(), false);
            if conn.out.is_empty() {
                assert!(!conn.timeout_at_end, "a timeout is answered (408)");
                return;
            }
            let r = parse_response(&conn.out).expect("tandemctl reads tandemd's answer");
            assert!(
                [200, 400, 404, 405, 408, 431].contains(&r.status),
                "undocumented status {}",
                r.status
            );
        }
        _ => {
            let _ = parse_response(rest);
        }
    }
}
