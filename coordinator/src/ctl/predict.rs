//! `tandemctl predict`: what the jobs on one GPU and a candidate would see
//! together, from their live traces, by the GPU-sharing model (`tandem-sim
//! predict`, run as a separate program). Every figure is a prediction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::client;
use crate::predict::{
    device_of, find_gpu, label, live_job, run_sim, sim_path, traces_for_gpu, LiveTraces, SimJob,
    SimOpts, TraceError,
};

/// How long the model may run.
pub const SIM_TIMEOUT: Duration = Duration::from_secs(120);

/// `tandemctl predict`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Each job on the GPU is traced live (GET /trace on tandemd's stats socket); \
    the candidate is a trace file (tandem-trace/1) or the id of a client elsewhere on the node. \
    tandem-sim is found through $TANDEM_SIM, next to tandemctl, or on PATH. Verdicts: fits (in a \
    mode without MPS), fits only over MPS, does not fit; see docs/placement.md."
)]
pub struct Args {
    /// The GPU: its index in tandemctl status, or its UUID (or a unique prefix)
    #[arg(long, value_name = "N|UUID")]
    pub gpu: String,
    /// The candidate: a trace file, or a client id (a job running elsewhere on the node)
    #[arg(long, value_name = "ID|FILE")]
    pub add: String,
    /// The candidate's class (must agree with its trace)
    #[arg(long, value_parser = ["inference", "training"])]
    pub class: Option<String>,
    /// The candidate's request rate, requests/s (inference; default: the rate tandemd has seen for a live candidate, else half load)
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Seconds of recent behaviour each live trace covers, a whole number (default: the capture's)
    #[arg(long, value_name = "S")]
    pub seconds: Option<u64>,
    /// Inference p99 target, as a ratio of its alone p99 (default 1.10)
    #[arg(long, value_name = "X")]
    pub p99_target: Option<f64>,
    /// Training target: share of its alone throughput kept (default 0.90)
    #[arg(long, value_name = "X")]
    pub kept_target: Option<f64>,
    /// Print the model's JSON answer
    #[arg(long)]
    pub json: bool,
    /// Name the kernels that carry the predicted delay (top five per mode)
    #[arg(long)]
    pub why: bool,
    /// Predict again with the inference jobs' kernels 2% longer, and say
    /// how far that moves each p99 (twice the time)
    #[arg(long)]
    pub steepness: bool,
}

/// Live traces over tandemd's stats socket (`GET /trace`).
pub struct StatsTraces {
    /// The stats socket.
    pub stats: PathBuf,
}

impl LiveTraces for StatsTraces {
    fn trace(&self, id: u64, seconds: Option<u64>) -> Result<String, TraceError> {
        let target = match seconds {
            Some(s) => format!("/trace?id={id}&seconds={s}"),
            None => format!("/trace?id={id}"),
        };
        let r = client::http_get(&self.stats, &target, client::TIMEOUT * 4)
            .map_err(TraceError::Failed)?;
        let why = || r.body.trim().to_string();
        match r.status {
            200 => Ok(r.body),
            404 => Err(TraceError::Unknown(why())),
            409 => Err(TraceError::NotYet(why())),
            s => Err(TraceError::Failed(format!(
                "GET /trace answered {s}: {}",
                why()
            ))),
        }
    }
}

/// Runs `tandemctl predict` against `socket`'s tandemd with the model at
/// `sim`; returns what to print.
///
/// # Errors
/// One line: the GPU, the client, the trace or the model that failed.
pub fn predict(socket: &Path, a: &Args, sim: &Path) -> Result<String, String> {
    let stats = tandem_proto::paths::stats_socket(socket);
    let snap = client::snapshot(&stats, client::TIMEOUT)?;
    let gpu = find_gpu(&snap, &a.gpu)?;
    let src = StatsTraces {
        stats: stats.clone(),
    };
    let candidate = match a.add.parse::<u64>() {
        Ok(id) if !Path::new(&a.add).exists() => {
            let c = snap.clients.iter().find(|c| c.id == id).ok_or_else(|| {
                format!(
                    "unknown client id {id}: tandemd has no such client (tandemctl status lists them; a file named {id} does not exist either)"
                )
            })?;
            if gpu.clients.contains(&id) {
                return Err(format!(
                    "{} is already on GPU {}: the candidate must be a job not yet on it",
                    label(c),
                    gpu.uuid
                ));
            }
            if let (Some(want), true) = (
                &a.class,
                matches!(c.class.as_str(), "inference" | "training"),
            ) {
                if *want != c.class {
                    return Err(format!(
                        "--class {want}, but tandemd runs {} as {}: the class must match the job",
                        label(c),
                        c.class
                    ));
                }
            }
            live_job(&src, c, a.seconds)?
        }
        _ => SimJob {
            label: a.add.clone(),
            class: a.class.clone(),
            trace: std::fs::read_to_string(&a.add)
                .map_err(|e| format!("{}: cannot read the trace: {e}", a.add))?,
            slo_p99_ms: None,
            rate: None,
        },
    };
    let candidate = SimJob {
        rate: a.rate.or(candidate.rate),
        class: a.class.clone().or(candidate.class),
        ..candidate
    };
    let jobs = traces_for_gpu(&src, &snap, gpu, a.seconds)?;
    let opts = SimOpts {
        device: device_of(&gpu.name).into(),
        json: a.json,
        why: a.why,
        steepness: a.steepness,
        p99_target: a.p99_target,
        kept_target: a.kept_target,
        threads: None,
    };
    run_sim(sim, &jobs, &candidate, &opts, SIM_TIMEOUT)
}

/// `tandemctl predict`: prints the answer; exit 0, or 1 with one line.
pub fn run(socket: &Path, a: &Args) -> u8 {
    match predict(socket, a, &sim_path()) {
        Ok(out) => super::stdout::print_last("tandemctl predict", &out),
        Err(e) => {
            eprintln!("tandemctl predict: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const TRACE: &str = r#"{"format": "tandem-trace/1", "job": "JOB", "class": "CLASS", "source": "measured", "ops": []}"#;

    fn client(id: u64, class: &str, gpu: &str, exe: &str, slo: Option<f64>) -> serde_json::Value {
        // Inference clients have served 300 requests in their 10 s.
        let requests = if class == "inference" { 300 } else { 0 };
        crate::state::test_client_json(
            id,
            serde_json::json!({
                "pid": 100 + id, "exe": exe, "class": class, "gpu": gpu, "connected_s": 10.0,
                "sched": {"backlog_ns": 0, "gate_open": true, "requests": requests,
                          "p50_ms": null, "p99_ms": null, "slo_p99_target_ms": slo,
                          "train_share": 0.0, "latency_buckets": [], "latency_sum_ns": 0}
            }),
        )
    }

    /// The node: GPU 0 (an A100) runs client 1 (training) and client 2
    /// (inference, SLO 25 ms); GPU 1 runs client 3 (inference); GPU 2 has
    /// no jobs; client 4 has not run long enough for a trace.
    fn snapshot() -> String {
        serde_json::json!({
            "version": "0", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s",
            "config_path": "c",
            "gpus": [
                {"uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-80GB", "clients": [1, 2], "launches": 0},
                {"uuid": "GPU-bbbb", "name": "NVIDIA H100 80GB HBM3", "clients": [3, 4], "launches": 0},
                {"uuid": "GPU-cccc", "name": "NVIDIA H100 80GB HBM3", "clients": [], "launches": 0}
            ],
            "clients": [
                client(1, "training", "GPU-aaaa", "/usr/bin/trainer", None),
                client(2, "inference", "GPU-aaaa", "/srv/server", Some(25.0)),
                client(3, "inference", "GPU-bbbb", "/srv/other", None),
                client(4, "training", "GPU-bbbb", "/srv/young", None)
            ],
            "totals": {"clients": 4, "launches": 0, "dropped": 0, "clients_reclaimed": 0,
                       "rejected": 0, "clients_registered": 4, "handshake_timeouts": 0,
                       "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0}
        })
        .to_string()
    }

    /// A fake tandemd stats socket serving /stats and /trace, until dropped.
    struct FakeDaemon {
        dir: PathBuf,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl FakeDaemon {
        fn start(name: &str) -> FakeDaemon {
            let dir = std::env::temp_dir()
                .join(format!("tandemctl-predict-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let stats = tandem_proto::paths::stats_socket(&dir.join("tandemd.sock"));
            let l = UnixListener::bind(&stats).unwrap();
            l.set_nonblocking(true).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let s2 = stop.clone();
            let thread = std::thread::spawn(move || {
                while !s2.load(Ordering::Relaxed) {
                    let Ok((mut c, _)) = l.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    c.set_nonblocking(false).unwrap();
                    let mut buf = [0u8; 4096];
                    let n = c.read(&mut buf).unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).to_string();
                    let target = head.split(' ').nth(1).unwrap_or("").to_string();
                    let trace = |job: &str, class: &str| {
                        (200, TRACE.replace("JOB", job).replace("CLASS", class))
                    };
                    let (code, body) = match target.as_str() {
                        "/stats" => (200, snapshot()),
                        "/trace?id=1" => trace("trainer_step", "training"),
                        "/trace?id=2" => trace("server_request", "inference"),
                        "/trace?id=3" => trace("other_request", "inference"),
                        "/trace?id=4" => (409, "client 4: 0 steps seen, need 3\n".into()),
                        _ => (404, "no such client\n".to_string()),
                    };
                    let _ = write!(
                        c,
                        "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
            FakeDaemon {
                dir,
                stop,
                thread: Some(thread),
            }
        }

        fn socket(&self) -> PathBuf {
            self.dir.join("tandemd.sock")
        }

        /// A fake tandem-sim: prints its arguments, then the job name in
        /// each trace file it was given (or fails with `fail`, naming its
        /// first job's file, `$5` after `predict --device D --job`).
        fn sim(&self, fail: Option<&str>) -> PathBuf {
            let p = self.dir.join("tandem-sim");
            let body = match fail {
                Some(msg) => format!("#!/bin/sh\necho \"tandem-sim predict: $5: {msg}\" >&2\nexit 2\n"),
                None => "#!/bin/sh\necho \"ARGS: $*\"\nfor a in \"$@\"; do case $a in *.json) grep -o '\"job\": \"[a-z_]*\"' \"$a\";; esac; done\n".to_string(),
            };
            std::fs::write(&p, body).unwrap();
            let mut perm = std::fs::metadata(&p).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&p, perm).unwrap();
            p
        }
    }

    impl Drop for FakeDaemon {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn args(gpu: &str, add: &str) -> Args {
        Args {
            gpu: gpu.into(),
            add: add.into(),
            class: None,
            rate: None,
            seconds: None,
            p99_target: None,
            kept_target: None,
            json: false,
            why: false,
            steepness: false,
        }
    }

    #[test]
    fn predicts_from_the_live_traces_of_the_gpus_jobs_and_a_live_candidate() {
        let d = FakeDaemon::start("live");
        let sim = d.sim(None);
        let mut a = args("0", "3");
        a.json = true;
        a.why = true;
        a.steepness = true;
        let out = predict(&d.socket(), &a, &sim).unwrap();
        let argline = out.lines().next().unwrap();
        // The A100 is predicted as one; each job's label, class and SLO.
        assert!(
            argline.starts_with("ARGS: predict --device a100 --job "),
            "{out}"
        );
        assert!(
            argline.contains("job0.json --class training --label client 1 (trainer) --job "),
            "{out}"
        );
        assert!(
            argline.contains(
                "job1.json --class inference --label client 2 (server) --slo-p99-ms 25 --rate 30 --add "
            ),
            "{out}"
        );
        assert!(
            argline.contains(
                "candidate.json --class inference --label client 3 (other) --rate 30 --json --why --steepness"
            ),
            "{out}"
        );
        // The traces the model read are the ones tandemd served.
        let jobs: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(
            jobs,
            [
                r#""job": "trainer_step""#,
                r#""job": "server_request""#,
                r#""job": "other_request""#
            ]
        );
        // The temporary traces are gone.
        let tmp = argline
            .split(' ')
            .find(|w| w.ends_with("candidate.json"))
            .unwrap();
        assert!(!Path::new(tmp).exists(), "{tmp} left behind");
    }

    #[test]
    fn a_candidate_from_a_file_goes_to_the_model_with_its_class_and_rate() {
        let d = FakeDaemon::start("file");
        let sim = d.sim(None);
        let file = d.dir.join("cand.json");
        std::fs::write(
            &file,
            TRACE
                .replace("JOB", "from_file")
                .replace("CLASS", "inference"),
        )
        .unwrap();
        let mut a = args("GPU-aaaa", &file.display().to_string());
        a.class = Some("inference".into());
        a.rate = Some(40.0);
        a.kept_target = Some(0.8);
        let out = predict(&d.socket(), &a, &sim).unwrap();
        assert!(out.contains("--class inference --label "), "{out}");
        assert!(
            out.contains("cand.json --rate 40 --kept-target 0.8"),
            "{out}"
        );
        assert!(out.ends_with("\"job\": \"from_file\"\n"), "{out}");
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let d = FakeDaemon::start("errors");
        let sim = d.sim(None);
        let err = |gpu: &str, add: &str| predict(&d.socket(), &args(gpu, add), &sim).unwrap_err();
        let e = err("2", "3");
        assert_eq!(
            e,
            "GPU GPU-cccc (NVIDIA H100 80GB HBM3) has no jobs: there is nothing to predict the candidate against (it would run alone)"
        );
        let e = err("0", "42");
        assert!(
            e.starts_with("unknown client id 42: tandemd has no such client"),
            "{e}"
        );
        let e = err("7", "3");
        assert!(e.starts_with("no GPU 7: tandemd sees 0: GPU-aaaa"), "{e}");
        let e = err("0", "1");
        assert!(
            e.contains("client 1 (trainer) is already on GPU GPU-aaaa"),
            "{e}"
        );
        // GPU 1 holds client 4, whose trace is not ready yet.
        let e = err("1", "1");
        assert!(
            e.starts_with("client 4 (young): not enough data for a trace yet (client 4: 0 steps seen, need 3)"),
            "{e}"
        );
        let mut a = args("0", "3");
        a.class = Some("training".into());
        let e = predict(&d.socket(), &a, &sim).unwrap_err();
        assert!(
            e.contains("--class training, but tandemd runs client 3 (other) as inference"),
            "{e}"
        );
        // The model's one-line refusal, with our temporary file named as the job.
        let bad = d.sim(Some("ops[0].duration_ns: expected a non-negative integer"));
        let e = predict(&d.socket(), &args("0", "3"), &bad).unwrap_err();
        assert_eq!(
            e,
            "client 1 (trainer): ops[0].duration_ns: expected a non-negative integer"
        );
        let e = predict(&d.socket(), &args("0", "3"), &d.dir.join("no-sim")).unwrap_err();
        assert!(e.starts_with("cannot run the model "), "{e}");
    }
}
