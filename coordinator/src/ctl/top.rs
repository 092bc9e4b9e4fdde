//! `tandemctl top`: the status table refreshed every second, plain ANSI.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tandem_os::poll::{self, Seen};

use crate::client;

/// Restores the terminal mode on drop.
struct RawMode {
    fd: i32,
    saved: Option<libc::termios>,
}

impl RawMode {
    fn enter(fd: i32) -> RawMode {
        // SAFETY: an all-zero termios is a valid out-parameter.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `t` is valid; a non-tty fd just fails.
        if unsafe { libc::tcgetattr(fd, &mut t) } != 0 {
            return RawMode { fd, saved: None };
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO);
        t.c_cc[libc::VMIN] = 0;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: `t` is a valid termios.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) };
        RawMode {
            fd,
            saved: Some(saved),
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.saved {
            // SAFETY: restoring the saved, valid termios.
            unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, t) };
        }
    }
}

/// Run until q or Ctrl-C.
pub fn run(socket: &Path) -> Result<(), String> {
    let stats = tandem_proto::paths::stats_socket(socket);
    let quit = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&quit));
    }
    let stdin = std::io::stdin();
    let fd = stdin.as_raw_fd();
    let _raw = RawMode::enter(fd);
    let mut out = std::io::stdout();
    while !quit.load(Ordering::Relaxed) {
        let screen = match client::snapshot(&stats, super::TIMEOUT) {
            Ok(s) => super::table(&s),
            Err(e) => format!("{e}\n"),
        };
        let _ = write!(out, "\x1b[H\x1b[2Jtandemctl top (q quits)\n\n{screen}");
        let _ = out.flush();
        let mut seen = [Seen::default()];
        let r = poll::wait(
            &[stdin.as_fd()],
            &mut seen,
            Some(std::time::Duration::from_secs(1)),
        );
        let shown = matches!(r, Ok(n) if n > 0);
        if shown && seen[0].readable {
            let mut b = [0u8; 16];
            // SAFETY: reading into a valid buffer.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
            if n == 0
                || b[..n.max(0) as usize]
                    .iter()
                    .any(|&c| c == b'q' || c == b'Q')
            {
                break;
            }
        } else if shown && seen[0].closed {
            // stdin closed: keep refreshing until a signal, but do not spin.
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    let _ = writeln!(out);
    Ok(())
}
