//! `tandemctl trace ID [--seconds N] [--out FILE]`: a client's recent
//! behaviour as one `tandem-trace/1` document (`GET /trace` on the stats
//! socket; how the request or step is found: `crate::capture`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::client;

/// `tandemctl trace`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "An inference job's trace is one request (its median-duration one), a training \
                  job's one step (from its repeating launch sequence); kernel durations come \
                  from completion marks. `tandem-sim check-trace FILE` checks the file."
)]
pub struct Args {
    /// The client's id (the ID column of tandemctl status)
    pub id: u64,
    /// How far back to look, seconds (1 to 600)
    #[arg(long, default_value_t = crate::capture::DEFAULT_SECONDS, value_name = "N")]
    pub seconds: u64,
    /// Write the trace here instead of to stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Building a trace reads up to a window of records and fits their
/// durations: more than a snapshot takes.
const TRACE_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetch the trace and print or write it.
///
/// # Errors
/// tandemd unreachable, or its refusal (no such client, not enough data)
/// as it worded it, or the file not writable.
pub fn run(socket: &Path, args: &Args) -> Result<(), String> {
    let stats = tandem_proto::paths::stats_socket(socket);
    let target = format!("/trace?id={}&seconds={}", args.id, args.seconds);
    let r = client::http_get(&stats, &target, TRACE_TIMEOUT)?;
    if r.status != 200 {
        let why = r.body.trim();
        return Err(if why.is_empty() {
            format!("GET {target} answered {}", r.status)
        } else {
            why.to_string()
        });
    }
    match &args.out {
        None => super::stdout::print(&r.body).map(|_| ())?,
        Some(path) => std::fs::write(path, &r.body)
            .map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))?,
    }
    Ok(())
}
