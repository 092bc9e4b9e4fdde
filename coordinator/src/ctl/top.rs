//! `tandemctl top`: the status table refreshed every second, plain ANSI on a
//! terminal; plain tables one after another in batch mode (`-b`) or a pipe.

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

/// `tandemctl top`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Outside a terminal (a pipe, a file) top writes plain tables, as with -b. \
It exits 1 when tandemd cannot be reached: at once in batch mode, else when the last refresh failed."
)]
pub struct Args {
    /// Batch mode: plain tables one after another, no escape codes, no keys read
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,
    /// Stop after N refreshes (default: until q, Ctrl-C or SIGTERM)
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    pub iterations: Option<u64>,
    /// Seconds between refreshes
    #[arg(short = 'd', long = "delay", value_name = "SECS", default_value_t = 1.0,
          value_parser = parse_delay)]
    pub delay: f64,
}

fn parse_delay(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if d.is_finite() && (0.0..=3600.0).contains(&d) => Ok(d),
        _ => Err(format!("{s:?} is not a number of seconds from 0 to 3600")),
    }
}

/// Whether `fd` is a terminal.
fn is_tty(fd: i32) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// Run until q, Ctrl-C, SIGTERM or `-n` refreshes; returns the exit code.
pub fn run(socket: &Path, args: &Args) -> u8 {
    let stats = tandem_proto::paths::stats_socket(socket);
    let quit = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&quit));
    }
    let mut out = std::io::stdout();
    // Escape codes and keys only with a terminal on both ends.
    let screen = !args.batch && is_tty(out.as_raw_fd()) && is_tty(std::io::stdin().as_raw_fd());
    let delay = std::time::Duration::from_secs_f64(args.delay);
    let stdin = std::io::stdin();
    let fd = stdin.as_raw_fd();
    let _raw = screen.then(|| RawMode::enter(fd));
    let mut shown = 0u64;
    let mut failed = false;
    while !quit.load(Ordering::Relaxed) {
        let snap = client::snapshot(&stats, client::TIMEOUT);
        failed = snap.is_err();
        shown += 1;
        let frame = match (&snap, screen) {
            (Ok(s), true) => format!(
                "\x1b[H\x1b[2Jtandemctl top (q quits)\n\n{}",
                super::status_table::table(s)
            ),
            (Err(e), true) if shown > 1 => {
                format!("\x1b[H\x1b[2Jtandemctl top (q quits)\n\n{e}\n")
            }
            (Ok(s), false) => {
                let sep = if shown > 1 { "\n" } else { "" };
                format!("{sep}{}", super::status_table::table(s))
            }
            // Unreachable at the first look, or at any look in batch mode:
            // say so and fail, as top does when it cannot read /proc.
            (Err(e), _) => {
                eprintln!("tandemctl top: {e}");
                return 1;
            }
        };
        // A reader that has gone (`top -b | head`) ends the run, as done.
        match super::stdout::print(&frame) {
            Ok(Ok(())) => {}
            Ok(Err(super::stdout::Gone)) => return 0,
            Err(e) => {
                eprintln!("tandemctl top: {e}");
                return 1;
            }
        }
        if args.iterations.is_some_and(|n| shown >= n) {
            break;
        }
        if !screen {
            sleep_unless(&quit, delay);
            continue;
        }
        let mut seen = [Seen::default()];
        let r = poll::wait(&[stdin.as_fd()], &mut seen, Some(delay));
        let woke = matches!(r, Ok(n) if n > 0);
        if woke && seen[0].readable {
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
        } else if woke && seen[0].closed {
            // stdin closed: keep refreshing until a signal, but do not spin.
            sleep_unless(&quit, delay);
        }
    }
    if screen {
        let _ = writeln!(out);
    }
    u8::from(failed)
}

/// Sleep for `d`, waking early (within 50 ms) when `quit` is set.
fn sleep_unless(quit: &AtomicBool, d: std::time::Duration) {
    let end = std::time::Instant::now() + d;
    while !quit.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
    }
}
