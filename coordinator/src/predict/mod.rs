//! Predictions before placing a job (issue 25), shared by `tandemctl
//! predict` and tandemd's `GET/POST /predict`: the live traces of the jobs
//! on one GPU ([`traces_for_gpu`]), and a run of the `tandem-sim` binary on
//! them ([`run_sim`]). tandemd never links the GPU-sharing model: the model
//! runs as a separate process, bounded in time, on trace files in a private
//! temporary directory.
//!
//! Where the traces come from is one seam, [`LiveTraces`]: `tandemctl`
//! asks tandemd's stats socket (`GET /trace?id=N[&seconds=S]`: 200 with one
//! `tandem-trace/1` document, 404 for an unknown client, 409 while there is
//! not enough data yet), and tandemd asks its own capture
//! ([`DaemonTraces`]).

pub mod http;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::state::{ClientSnapshot, GpuSnapshot, Snapshot};

/// Why a client's trace could not be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceError {
    /// No such client (HTTP 404).
    Unknown(String),
    /// Not enough data yet (HTTP 409).
    NotYet(String),
    /// Anything else (the capture is missing, tandemd did not answer).
    Failed(String),
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceError::Unknown(m) | TraceError::NotYet(m) | TraceError::Failed(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Where live traces come from: one `tandem-trace/1` document per client.
pub trait LiveTraces {
    /// Client `id`'s recent behaviour (over `seconds`, or the capture's
    /// default window).
    ///
    /// # Errors
    /// See [`TraceError`].
    fn trace(&self, id: u64, seconds: Option<u64>) -> Result<String, TraceError>;
}

/// tandemd's own source of traces: its live capture.
///
/// tandemd's own capture (`GET /trace`'s answers, without the socket).
pub struct DaemonTraces<'a> {
    /// The daemon's state (the capture lives beside the clients).
    pub shared: &'a crate::shared::Shared,
}

impl LiveTraces for DaemonTraces<'_> {
    fn trace(&self, id: u64, seconds: Option<u64>) -> Result<String, TraceError> {
        use crate::capture::{DEFAULT_SECONDS, MAX_SECONDS};
        let s = seconds.unwrap_or(DEFAULT_SECONDS).clamp(1, MAX_SECONDS);
        crate::trace_query::trace_json(self.shared, id, s).map_err(|r| match r.status {
            404 => TraceError::Unknown(r.message),
            409 => TraceError::NotYet(r.message),
            _ => TraceError::Failed(r.message),
        })
    }
}

/// One job handed to `tandem-sim predict`.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    /// How it is named in the answer (`client 7 (python)`).
    pub label: String,
    /// `inference` or `training`, if known (tandem-sim checks that it
    /// agrees with the trace).
    pub class: Option<String>,
    /// The trace document.
    pub trace: String,
    /// tandemd's `[[scheduler.slo]]` p99 target for it, ms.
    pub slo_p99_ms: Option<f64>,
    /// Inference: requests/s, when known.
    pub rate: Option<f64>,
}

/// The GPU `sel` names in a snapshot: its index among the snapshot's GPUs
/// (as `tandemctl status` lists them), or its UUID or a unique prefix.
///
/// # Errors
/// No such GPU, or a prefix that names several.
pub fn find_gpu<'a>(snap: &'a Snapshot, sel: &str) -> Result<&'a GpuSnapshot, String> {
    let known = || {
        if snap.gpus.is_empty() {
            "tandemd sees no GPU (no client has reported one yet)".to_string()
        } else {
            format!(
                "tandemd sees {}",
                snap.gpus
                    .iter()
                    .enumerate()
                    .map(|(i, g)| format!("{i}: {} ({})", g.uuid, g.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    };
    if let Ok(i) = sel.parse::<usize>() {
        return snap
            .gpus
            .get(i)
            .ok_or_else(|| format!("no GPU {i}: {}", known()));
    }
    let hits: Vec<&GpuSnapshot> = snap
        .gpus
        .iter()
        .filter(|g| g.uuid.starts_with(sel) || g.uuid.eq_ignore_ascii_case(sel))
        .collect();
    match hits.as_slice() {
        [g] => Ok(g),
        [] => Err(format!("no GPU {sel}: {}", known())),
        _ => Err(format!("GPU {sel} is ambiguous: {}", known())),
    }
}

/// How a client is named in a prediction.
#[must_use]
pub fn label(c: &ClientSnapshot) -> String {
    let exe = Path::new(&c.exe)
        .file_name()
        .map_or_else(|| c.exe.clone(), |n| n.to_string_lossy().into_owned());
    format!("client {} ({exe})", c.id)
}

/// A client's class, if it is one a prediction takes.
fn class_of(c: &ClientSnapshot) -> Option<String> {
    matches!(c.class.as_str(), "inference" | "training").then(|| c.class.clone())
}

/// An inference client's request rate as tandemd has seen it: requests
/// completed over the time it has been connected (at least 10 requests
/// over at least a second; else none, and the model takes half load).
#[must_use]
pub fn live_rate(c: &ClientSnapshot) -> Option<f64> {
    let s = c.sched.as_ref()?;
    (c.class == "inference" && s.requests >= 10 && c.connected_s >= 1.0)
        .then(|| s.requests as f64 / c.connected_s)
}

/// A live client as a job of a prediction.
///
/// # Errors
/// Its trace could not be had: the message names the client.
pub fn live_job(
    src: &dyn LiveTraces,
    c: &ClientSnapshot,
    seconds: Option<u64>,
) -> Result<SimJob, String> {
    let trace = src.trace(c.id, seconds).map_err(|e| match e {
        TraceError::NotYet(m) => format!(
            "{}: not enough data for a trace yet ({m}): try again once it has run a few requests or steps",
            label(c)
        ),
        TraceError::Unknown(m) => format!("{}: tandemd no longer knows it ({m})", label(c)),
        TraceError::Failed(m) => format!("{}: no trace: {m}", label(c)),
    })?;
    Ok(SimJob {
        label: label(c),
        class: class_of(c),
        trace,
        slo_p99_ms: c.sched.as_ref().and_then(|s| s.slo_p99_target_ms),
        rate: live_rate(c),
    })
}

/// The live traces of the jobs on `gpu`.
///
/// # Errors
/// The GPU has no jobs, or a job's trace could not be had.
pub fn traces_for_gpu(
    src: &dyn LiveTraces,
    snap: &Snapshot,
    gpu: &GpuSnapshot,
    seconds: Option<u64>,
) -> Result<Vec<SimJob>, String> {
    let on: Vec<&ClientSnapshot> = snap
        .clients
        .iter()
        .filter(|c| gpu.clients.contains(&c.id) || c.gpu.as_deref() == Some(&gpu.uuid))
        .collect();
    if on.is_empty() {
        return Err(format!(
            "GPU {} ({}) has no jobs: there is nothing to predict the candidate against (it would run alone)",
            gpu.uuid, gpu.name
        ));
    }
    on.into_iter().map(|c| live_job(src, c, seconds)).collect()
}

/// The model's description of a GPU by its name: `a100` for an A100,
/// `h200` for an H200 (the H100's die with HBM3e), else `h100` (the model
/// describes those three).
#[must_use]
pub fn device_of(gpu_name: &str) -> &'static str {
    let name = gpu_name.to_ascii_uppercase();
    if name.contains("A100") {
        "a100"
    } else if name.contains("H200") {
        "h200"
    } else {
        "h100"
    }
}

/// Where `tandem-sim` is: `$TANDEM_SIM`, else next to this executable,
/// else on `PATH`.
#[must_use]
pub fn sim_path() -> PathBuf {
    if let Some(p) = std::env::var_os("TANDEM_SIM") {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("tandem-sim")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("tandem-sim"))
}

/// The rest of `tandem-sim predict`'s command line.
#[derive(Clone, Debug, Default)]
pub struct SimOpts {
    /// `h100`, `a100` or `h200`.
    pub device: String,
    /// `--json`.
    pub json: bool,
    /// `--why`.
    pub why: bool,
    /// `--steepness`.
    pub steepness: bool,
    /// `--p99-target`.
    pub p99_target: Option<f64>,
    /// `--kept-target`.
    pub kept_target: Option<f64>,
    /// `--threads`.
    pub threads: Option<usize>,
}

/// Largest answer read back from tandem-sim.
const MAX_OUTPUT: u64 = 16 << 20;

/// A private temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let base = std::env::temp_dir();
        for n in 0..100u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let p = base.join(format!("tandem-predict-{}-{nanos}-{n}", std::process::id()));
            let mut b = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            match b.create(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free temporary directory name"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn push_job(args: &mut Vec<String>, flag: &str, path: &Path, j: &SimJob) {
    args.extend([flag.into(), path.display().to_string()]);
    if let Some(c) = &j.class {
        args.extend(["--class".into(), c.clone()]);
    }
    args.extend(["--label".into(), j.label.clone()]);
    if let Some(ms) = j.slo_p99_ms {
        args.extend(["--slo-p99-ms".into(), ms.to_string()]);
    }
    if let Some(r) = j.rate {
        args.extend(["--rate".into(), r.to_string()]);
    }
}

/// Runs `sim predict` on `jobs` and `candidate`, at most `timeout`;
/// returns its standard output (the answer).
///
/// # Errors
/// tandem-sim could not start, ran past `timeout` (it is killed), or
/// refused the input: its one-line message.
pub fn run_sim(
    sim: &Path,
    jobs: &[SimJob],
    candidate: &SimJob,
    opts: &SimOpts,
    timeout: Duration,
) -> Result<String, String> {
    let dir = TempDir::new().map_err(|e| format!("a temporary directory for the traces: {e}"))?;
    let mut args = vec!["predict".to_string()];
    if !opts.device.is_empty() {
        args.extend(["--device".into(), opts.device.clone()]);
    }
    for (i, j) in jobs.iter().enumerate() {
        let p = dir.0.join(format!("job{i}.json"));
        std::fs::write(&p, &j.trace).map_err(|e| format!("writing {}: {e}", p.display()))?;
        push_job(&mut args, "--job", &p, j);
    }
    let p = dir.0.join("candidate.json");
    std::fs::write(&p, &candidate.trace).map_err(|e| format!("writing {}: {e}", p.display()))?;
    push_job(&mut args, "--add", &p, candidate);
    if opts.json {
        args.push("--json".into());
    }
    if opts.why {
        args.push("--why".into());
    }
    if opts.steepness {
        args.push("--steepness".into());
    }
    if let Some(x) = opts.p99_target {
        args.extend(["--p99-target".into(), x.to_string()]);
    }
    if let Some(x) = opts.kept_target {
        args.extend(["--kept-target".into(), x.to_string()]);
    }
    if let Some(n) = opts.threads {
        args.extend(["--threads".into(), n.to_string()]);
    }
    let mut names: Vec<(String, String)> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            (
                dir.0.join(format!("job{i}.json")).display().to_string(),
                j.label.clone(),
            )
        })
        .collect();
    names.push((p.display().to_string(), candidate.label.clone()));
    let mut child = Command::new(sim)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run the model {}: {e} (install tandem-sim next to tandemctl/tandemd, or set TANDEM_SIM)",
                sim.display()
            )
        })?;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(r) = r {
                let _ = r.take(MAX_OUTPUT).read_to_end(&mut out);
            }
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the model ran past its {} s limit and was stopped",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for the model: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if status.success() {
        Ok(out)
    } else {
        let line = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(if line.is_empty() {
            format!("the model failed ({status})")
        } else {
            // The files are ours: name the jobs instead.
            names.iter().fold(
                line.trim_start_matches("tandem-sim predict: ").to_string(),
                |l, (path, label)| l.replace(path.as_str(), label),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::device_of;

    #[test]
    fn each_gpu_name_gets_the_model_that_describes_it() {
        for (name, device) in [
            ("NVIDIA A100-SXM4-40GB", "a100"),
            ("NVIDIA H200", "h200"),
            ("NVIDIA H200 NVL", "h200"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA L40S", "h100"),
        ] {
            assert_eq!(device_of(name), device, "{name}");
        }
    }
}
