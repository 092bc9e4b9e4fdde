//! Diagnostics on stderr, chosen by `TANDEM_LOG`.
//!
//! Only cold paths log. A line is formatted into a stack buffer and written with
//! one `write(2)`, so logging never allocates and works inside a constructor,
//! an `atexit` handler or a child after `fork`.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Level {
    Off = 0,
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl Level {
    /// Parses a `TANDEM_LOG` value; `None` when it names no level.
    pub fn parse(value: &[u8]) -> Option<Self> {
        Some(match value {
            b"off" | b"0" => Level::Off,
            b"error" => Level::Error,
            b"warn" | b"" => Level::Warn,
            b"info" => Level::Info,
            b"debug" => Level::Debug,
            b"trace" => Level::Trace,
            _ => return None,
        })
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Warn as u8);

/// Reads `TANDEM_LOG` once (from the constructor). An unknown value keeps the
/// default and says so, naming the accepted values.
pub fn init_from_env() {
    let Some(value) = crate::env::var(c"TANDEM_LOG") else {
        return;
    };
    match Level::parse(value) {
        Some(level) => LEVEL.store(level as u8, Ordering::Relaxed),
        None => line(
            Level::Warn,
            format_args!(
                "TANDEM_LOG={:?} is not a level; use off, error, warn, info, debug or trace (using warn)",
                String8(value)
            ),
        ),
    }
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Writes `tandem[<pid>]: <message>` to stderr if `level` is enabled.
pub fn line(level: Level, message: fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let mut buf = LineBuf::new();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    // LineBuf never fails; it truncates.
    let _ = write!(buf, "tandem[{pid}]: ");
    let _ = buf.write_fmt(message);
    buf.finish_and_write();
}

/// Like [`line`] but with no `[pid]`, for the one message an operator greps for.
pub fn raw_line(message: fmt::Arguments<'_>) {
    let mut buf = LineBuf::new();
    let _ = buf.write_fmt(message);
    buf.finish_and_write();
}

#[macro_export]
macro_rules! log {
    ($level:ident, $($arg:tt)*) => {
        $crate::log::line($crate::log::Level::$level, format_args!($($arg)*))
    };
}

/// Shows bytes from the environment without allocating or trusting them to be UTF-8.
pub struct String8<'a>(pub &'a [u8]);

impl fmt::Debug for String8<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_char(char::REPLACEMENT_CHARACTER)?;
            }
        }
        f.write_char('"')
    }
}

const LINE_MAX: usize = 2048;

struct LineBuf {
    bytes: [u8; LINE_MAX],
    len: usize,
}

impl LineBuf {
    fn new() -> Self {
        Self {
            bytes: [0; LINE_MAX],
            len: 0,
        }
    }

    fn finish_and_write(mut self) {
        if self.len == LINE_MAX {
            self.len -= 1;
        }
        self.bytes[self.len] = b'\n';
        self.len += 1;
        let mut done = 0;
        while done < self.len {
            // SAFETY: the range [done, len) lies inside `bytes`.
            let n = unsafe {
                libc::write(
                    libc::STDERR_FILENO,
                    self.bytes[done..].as_ptr().cast(),
                    self.len - done,
                )
            };
            if n > 0 {
                done += n as usize;
            } else if n < 0 && errno() == libc::EINTR {
                continue;
            } else {
                return;
            }
        }
    }
}

impl Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = LINE_MAX - self.len;
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_level_and_rejects_others() {
        assert_eq!(Level::parse(b"off"), Some(Level::Off));
        assert_eq!(Level::parse(b"debug"), Some(Level::Debug));
        assert_eq!(Level::parse(b"trace"), Some(Level::Trace));
        assert_eq!(Level::parse(b""), Some(Level::Warn));
        assert_eq!(Level::parse(b"DEBUG"), None);
        assert_eq!(Level::parse(b"verbose"), None);
    }

    #[test]
    fn long_lines_are_truncated_not_overflowed() {
        let mut buf = LineBuf::new();
        for _ in 0..100 {
            buf.write_str(&"x".repeat(100)).unwrap();
        }
        assert_eq!(buf.len, LINE_MAX);
    }

    #[test]
    fn non_utf8_environment_values_are_shown_safely() {
        let shown = format!("{:?}", String8(b"a\xffb"));
        assert_eq!(shown, "\"a\u{fffd}b\"");
    }
}
