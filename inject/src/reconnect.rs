//! How tandem-nri retries the runtime's NRI socket: exponential back-off
//! (1 s doubling to [`MAX_DELAY`]) and one log line per change of state
//! rather than one per attempt, so a node without NRI logs one line, not
//! one every few seconds forever.

use std::time::Duration;

/// The first wait after a failure or a lost connection.
pub const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest wait between attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// The retry state: the next wait and the last state logged.
#[derive(Debug)]
pub struct Reconnect {
    delay: Duration,
    logged: Option<String>,
    failures: u64,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            delay: FIRST_DELAY,
            logged: None,
            failures: 0,
        }
    }
}

impl Reconnect {
    /// An attempt failed with `why`: how long to wait, and the line to log
    /// if `why` differs from the last state logged (`None`: same as before,
    /// stay quiet).
    pub fn failed(&mut self, why: &str) -> (Duration, Option<String>) {
        let wait = self.delay;
        self.delay = (self.delay * 2).min(MAX_DELAY);
        self.failures += 1;
        let line = (self.logged.as_deref() != Some(why)).then(|| {
            self.logged = Some(why.to_string());
            format!(
                "{why}; retrying, waiting {} s then doubling up to {} s; said again only when this changes",
                wait.as_secs(),
                MAX_DELAY.as_secs()
            )
        });
        (wait, line)
    }

    /// Connected: the wait starts again from [`FIRST_DELAY`]; the line to
    /// log if the previous state was a failure.
    pub fn connected(&mut self, to: &str) -> Option<String> {
        self.delay = FIRST_DELAY;
        let line = self.logged.take().map(|_| {
            format!(
                "reached {to} after {} failed attempt{}",
                self.failures,
                if self.failures == 1 { "" } else { "s" }
            )
        });
        self.failures = 0;
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_failure_is_logged_once_and_waits_double_to_the_cap() {
        let mut r = Reconnect::default();
        let mut waits = Vec::new();
        let mut lines = 0;
        for _ in 0..10 {
            let (w, l) = r.failed("cannot reach /nri.sock (No such file or directory)");
            waits.push(w.as_secs());
            lines += usize::from(l.is_some());
        }
        assert_eq!(lines, 1);
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]);
        // A different failure is a new state: logged once.
        assert!(r
            .failed("cannot reach /nri.sock (Connection refused)")
            .1
            .is_some());
        assert!(r
            .failed("cannot reach /nri.sock (Connection refused)")
            .1
            .is_none());
        let back = r.connected("/nri.sock").expect("a change of state");
        assert_eq!(back, "reached /nri.sock after 12 failed attempts");
        // Connected again without a failure between: nothing to say.
        assert_eq!(r.connected("/nri.sock"), None);
        // After a connection, the wait starts from 1 s and the first
        // failure is logged again, even if it is the old one.
        let (w, l) = r.failed("cannot reach /nri.sock (No such file or directory)");
        assert_eq!((w, l.is_some()), (FIRST_DELAY, true));
    }
}
