//! Standard output for the operator's tools (`tandemctl`, `tandem-sim`),
//! where the reader may go away before the output ends.
//!
//! Rust ignores `SIGPIPE`, so a write to a pipe whose reader has exited
//! (`tandemctl status | head -3`) fails with `EPIPE`, and `print!` panics on
//! it. A tool that printed what was asked for until the reader left has done
//! its job: [`print`] reports that as [`Gone`], the caller stops writing and
//! exits 0, as `cat` does (without its signal). Any other failure (a full
//! disk under `> file`) is an error the caller reports.

use std::io::{ErrorKind, Write};

/// The reader of stdout has closed it: stop writing, and succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

/// Writes `text` to stdout and flushes it. `Ok(Err(Gone))`: the reader has
/// gone; `Err`: any other failure to write, as a message.
pub fn print(text: &str) -> Result<Result<(), Gone>, String> {
    write_to(&mut std::io::stdout().lock(), text)
}

/// [`print`] to any writer (the tests' broken ones).
pub fn write_to(out: &mut impl Write, text: &str) -> Result<Result<(), Gone>, String> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(Ok(())),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(Err(Gone)),
        Err(e) => Err(format!("cannot write to stdout: {e}")),
    }
}

/// [`print`] for a command that ends once it has printed: the exit code,
/// 0 when written or when the reader had gone, else 1 with the error on
/// stderr under `who`.
pub fn print_last(who: &str, text: &str) -> u8 {
    match print(text) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("{who}: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A writer that fails every write with one error kind.
    struct Failing(ErrorKind);

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(self.0))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_gone_and_other_failures_are_errors() {
        let mut ok = Vec::new();
        assert_eq!(write_to(&mut ok, "a\n"), Ok(Ok(())));
        assert_eq!(ok, b"a\n");
        assert_eq!(
            write_to(&mut Failing(ErrorKind::BrokenPipe), "a"),
            Ok(Err(Gone))
        );
        let full = write_to(&mut Failing(ErrorKind::StorageFull), "a");
        assert!(
            full.as_ref().is_err_and(|e| e.contains("cannot write")),
            "{full:?}"
        );
    }
}
