//! `tandemctl`: status, top, reload, set-class, run, cdi, trace, predict.
//!
//! The command line is parsed by clap: each subcommand is one variant of
//! [`Command`] whose arguments are a struct in its own module (`run`, `top`),
//! and [`main`] dispatches on it. A new subcommand is one more variant, one
//! more module and one more arm in [`main`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};
use tandem_proto::wire::{ClientClass, ControlOp};

use crate::client;

pub mod cdi;
pub mod predict;
pub mod run;
mod status_table;
pub mod stdout;
pub mod top;
pub mod trace;

pub use crate::client::TIMEOUT;
pub use status_table::{
    human_bytes, kernels, row, sharing_line, short_uuid, spatial_line, table, COLUMNS, HEADER,
};

/// tandemctl's command line.
#[derive(Debug, Parser)]
#[command(
    name = "tandemctl",
    version,
    about = "The tandem operator's CLI: what tandemd sees, and jobs run under libtandem.so",
    after_help = "The socket is --socket, else $TANDEM_SOCKET, else the default tandemd uses \
                  (/run/tandem/tandemd.sock for root, else $XDG_RUNTIME_DIR/tandem/tandemd.sock, \
                  else /tmp/tandem-UID/tandemd.sock)."
)]
pub struct Cli {
    /// tandemd's main socket (its stats socket sits beside it)
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Registered clients: a table, one line per GPU in use, totals
    Status(StatusArgs),
    /// The status table refreshed every second (q or Ctrl-C quits)
    Top(top::Args),
    /// Make tandemd re-read its configuration (privileged)
    Reload,
    /// Set a client's class (privileged)
    SetClass(SetClassArgs),
    /// Run CMD under libtandem.so, starting a private tandemd if none answers on the socket
    Run(run::Args),
    /// Container Device Interface: `cdi generate` writes a spec that gives containers tandem
    Cdi(cdi::Args),
    /// A client's recent behaviour as a tandem-trace/1 document (one request or one step)
    Trace(trace::Args),
    /// Predict what the jobs on a GPU and a candidate would see together (a model's prediction)
    Predict(predict::Args),
}

/// `tandemctl status`.
#[derive(Debug, clap::Args)]
#[command(after_help = COLUMNS)]
pub struct StatusArgs {
    /// Print the raw JSON snapshot (GET /stats) instead of the table
    #[arg(long)]
    pub json: bool,
}

/// `tandemctl set-class`.
#[derive(Debug, clap::Args)]
#[command(after_help = "auto hands the client back to the configured policy.")]
pub struct SetClassArgs {
    /// The client's id (the ID column of tandemctl status)
    pub id: u64,
    /// The class to give it
    #[arg(value_parser = ["inference", "training", "auto"])]
    pub class: String,
}

/// Run tandemctl with `args` (without the program name); returns the exit code.
pub fn main(args: &[OsString]) -> u8 {
    let cli = match Cli::try_parse_from(
        std::iter::once(OsString::from("tandemctl")).chain(args.iter().cloned()),
    ) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version print to stdout and exit 0; usage errors exit 2.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    let socket = cli
        .socket
        .unwrap_or_else(tandem_proto::paths::default_socket);
    let result = match cli.command {
        Command::Status(a) => status(&socket, &a),
        Command::Top(a) => return top::run(&socket, &a),
        Command::Reload => control(&socket, ControlOp::Reload, 0, ClientClass::Auto),
        Command::SetClass(a) => set_class(&socket, &a),
        Command::Run(a) => return run::run(&socket, &a),
        Command::Cdi(a) => return cdi::main(&a),
        Command::Trace(a) => trace::run(&socket, &a),
        Command::Predict(a) => return predict::run(&socket, &a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tandemctl: {e}");
            1
        }
    }
}

fn status(socket: &Path, args: &StatusArgs) -> Result<(), String> {
    let stats = tandem_proto::paths::stats_socket(socket);
    if args.json {
        let r = client::http_get(&stats, "/stats", TIMEOUT)?;
        if r.status != 200 {
            return Err(format!("GET /stats answered {}", r.status));
        }
        return stdout::print(&r.body).map(|_| ());
    }
    let snap = client::snapshot(&stats, TIMEOUT)?;
    stdout::print(&table(&snap)).map(|_| ())
}

fn set_class(socket: &Path, args: &SetClassArgs) -> Result<(), String> {
    let class = ClientClass::from_env_value(args.class.as_bytes()).ok_or_else(|| {
        format!(
            "{:?} is not a class: use inference, training or auto",
            args.class
        )
    })?;
    control(socket, ControlOp::SetClass, args.id, class)
}

fn control(socket: &Path, op: ControlOp, id: u64, class: ClientClass) -> Result<(), String> {
    let (status, msg) = client::control(socket, op, id, class, TIMEOUT)?;
    if status == 0 {
        stdout::print(&format!("{msg}\n")).map(|_| ())
    } else {
        Err(format!(
            "{} refused: {msg} ({})",
            op.name(),
            tandem_proto::RejectReason(status).describe()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ClientSnapshot, GpuSnapshot, Snapshot};

    #[test]
    fn table_shows_shared_bytes_and_savings() {
        let snap: Snapshot = serde_json::from_str(
            r#"{
            "version": "0", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s",
            "config_path": "c",
            "sharing": {"mode": "time_slicing_over_mps", "mps_pipe_dir": "/tmp/nvidia-mps",
                        "describe": "time slicing over MPS: an MPS control daemon runs (/tmp/nvidia-mps)"},
            "gpus": [{"uuid": "GPU-1", "name": "H100", "clients": [1], "launches": 0,
                      "dedup_saved_bytes": 4194304, "dedup_shared_copies": 2, "dedup_merges": 2},
                     {"uuid": "GPU-2", "name": "H100", "clients": [], "launches": 0}],
            "clients": [
                {"id": 1, "pid": 10, "uid": 0, "exe": "/x", "cgroup": "/", "class": "training",
                 "class_claimed": "auto", "class_reason": "r", "gpu": "GPU-1", "connected_s": 1.0,
                 "launches": 0, "launches_ex": 0, "graph_launches": 0, "graph_kernels": 0,
                 "launch_rate_hz": 0.0, "records": 0, "dropped": 0, "bad_records": 0,
                 "ring_detached": false, "bytes_allocated": 8388608, "allocs": 1, "frees": 0,
                 "copies": 0, "h2d_bytes": 0, "syncs": 0, "gate_wait_ns": 0, "gate_waits": 0,
                 "gate_timeouts": 0, "top_kernels": [],
                 "dedup": {"share_weights": true, "trust_group": "uid:0", "shared_bytes": 2097152}}
            ],
            "follow": {"enabled": true, "shared_bytes": 524288000, "mapped_bytes": 0,
                       "shares": 2, "maps": 2, "refusals": {"not_found": 1},
                       "regions": [
                {"name": "gpt2-small", "group": "uid:1000", "gpu": "GPU-1", "gpu_ordinal": 0,
                 "owner": 3, "owner_pid": 4242, "bytes": 522190848, "followers": 2, "maps": 2},
                {"name": "bert", "group": "models", "gpu": "GPU-2", "gpu_ordinal": null,
                 "owner": 4, "owner_pid": 4343, "bytes": 2097152, "followers": 1, "maps": 1}
            ]},
            "totals": {"clients": 1, "launches": 0, "dropped": 0, "clients_reclaimed": 0,
                       "rejected": 0, "clients_registered": 1, "handshake_timeouts": 0,
                       "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0}
            }"#,
        )
        .unwrap();
        let t = table(&snap);
        let cols: Vec<&str> = t.lines().next().unwrap().split_whitespace().collect();
        let row: Vec<&str> = t.lines().nth(1).unwrap().split_whitespace().collect();
        let at = cols.iter().position(|c| *c == "SHARED").unwrap();
        assert_eq!(row[at], "2.0MiB", "{t}");
        assert_eq!(row[at - 1], "8.0MiB", "{t}");
        assert!(t.contains("GPU-1 (H100): 4.0MiB saved"), "{t}");
        assert!(
            t.contains("\nfollow: gpt2-small (uid:1000, GPU 0): 498.0MiB shared by client 3 (pid 4242), 2 followers\n"),
            "{t}"
        );
        // No ordinal reported: the GPU's uuid; one follower.
        assert!(
            t.contains("\nfollow: bert (models, GPU-2): 2.0MiB shared by client 4 (pid 4343), 1 follower\n"),
            "{t}"
        );
        assert!(!t.contains("GPU-2 ("), "no dedup line without savings: {t}");
        assert!(
            t.contains("\nGPU-1 (H100): 0 inference, 1 training\n"),
            "a sharing line for the GPU with a job, none for the other: {t}"
        );
        assert_eq!(
            t.lines().last(),
            Some("sharing: time slicing over MPS: an MPS control daemon runs (/tmp/nvidia-mps)"),
            "{t}"
        );
    }

    #[test]
    fn the_sharing_line_says_who_shares_the_gpu_and_how() {
        let g: GpuSnapshot = serde_json::from_str(
            r#"{"uuid": "GPU-1", "name": "H100", "clients": [1, 2, 3], "launches": 9,
                "training_share": 0.456, "inference_active": true, "board_requests_open": 2}"#,
        )
        .unwrap();
        let client = |id: u64, class: &str, p99: Option<f64>| {
            crate::state::test_client(
                id,
                serde_json::json!({
                    "pid": id, "class": class, "gpu": "GPU-1",
                    "sched": {"backlog_ns": 0, "gate_open": true, "requests": 2, "p50_ms": null,
                              "p99_ms": p99, "slo_p99_target_ms": null, "train_share": 0.0,
                              "latency_buckets": [], "latency_sum_ns": 0}
                }),
            )
        };
        let cs = [
            client(1, "inference", Some(12.34)),
            client(2, "inference", Some(30.0)),
            client(3, "training", Some(99.0)),
        ];
        assert_eq!(
            sharing_line(&g, &cs).unwrap(),
            "GPU-1 (H100): 2 inference, 1 training; inference active; board: 2 open (inference requests and syncs); \
             training 46% of GPU work in the last 2 s; inference p99 30.0 ms"
        );
        assert_eq!(sharing_line(&g, &cs[..0]), None, "no jobs, no line");
    }

    #[test]
    fn the_spatial_line_says_armed_or_why_not() {
        let client = |spatial: serde_json::Value| {
            crate::state::test_client(7, serde_json::json!({"pid": 70, "spatial": spatial}))
        };
        assert_eq!(
            spatial_line(&client(serde_json::Value::Null)),
            None,
            "not asked"
        );
        let armed = client(serde_json::json!({"reserve": 0.25, "reserve_max": 0.25,
            "min_kernel_ns": 100000, "state": "armed", "descriptor_version": null,
            "masked_launches": 147}));
        assert_eq!(
            spatial_line(&armed).unwrap(),
            "spatial: client 7 (pid 70) leaves 25% of its GPU's TPCs to inference while it is \
             active: armed, 147 launches masked"
        );
        let narrow = client(serde_json::json!({"reserve": 0.061, "reserve_max": 0.25,
            "min_kernel_ns": 100000, "state": "armed", "descriptor_version": null,
            "masked_launches": 3}));
        assert_eq!(
            spatial_line(&narrow).unwrap(),
            "spatial: client 7 (pid 70) leaves 6% of its GPU's TPCs (as wide as inference's \
             kernels; at most 25%) to inference while it is active: armed, 3 launches masked"
        );
        let old = client(serde_json::json!({"reserve": 0.25, "min_kernel_ns": 100000,
            "state": "unknown_descriptor", "descriptor_version": 6, "masked_launches": 0}));
        assert!(
            spatial_line(&old)
                .unwrap()
                .ends_with("runs unmasked: unknown_descriptor (version 0x06)"),
            "{:?}",
            spatial_line(&old)
        );
    }

    /// A daemon that predates `sharing` still parses, and no sharing line is made up.
    #[test]
    fn table_without_sharing_from_older_daemon() {
        let snap: Snapshot = serde_json::from_str(
            r#"{
            "version": "0", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s",
            "config_path": "c", "gpus": [], "clients": [],
            "totals": {"clients": 0, "launches": 0, "dropped": 0, "clients_reclaimed": 0,
                       "rejected": 0, "clients_registered": 0, "handshake_timeouts": 0,
                       "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0}
            }"#,
        )
        .unwrap();
        assert_eq!(snap.sharing, None);
        assert_eq!(snap.follow, Default::default());
        let t = table(&snap);
        assert!(!t.contains("sharing"), "{t}");
        assert!(!t.contains("follow"), "no region, no follow line: {t}");
    }

    /// The table's words (issue 24): the GPU as a short UUID an operator
    /// can find in `nvidia-smi -L`, and KERNELS counting the kernels of
    /// graph launches, as the job's own count does.
    #[test]
    fn rows_show_a_short_uuid_and_kernels_run() {
        let c: ClientSnapshot = serde_json::from_value(serde_json::json!({
            "id": 1, "pid": 10, "uid": 0, "exe": "/job", "cgroup": "/", "class": "training",
            "class_claimed": "auto", "class_reason": "r",
            "gpu": "GPU-74616e64-656d-2d66-616b-656375646100", "connected_s": 1.0,
            "launches": 13, "launches_ex": 1, "graph_launches": 4, "graph_kernels": 10,
            "launch_rate_hz": 0.0, "records": 0, "dropped": 0, "bad_records": 0,
            "ring_detached": false, "bytes_allocated": 0, "allocs": 0, "frees": 0,
            "copies": 0, "h2d_bytes": 0, "syncs": 0, "gate_wait_ns": 0, "gate_waits": 0,
            "gate_timeouts": 0, "top_kernels": []
        }))
        .unwrap();
        assert_eq!(kernels(&c), 19);
        let cols: Vec<&str> = HEADER.split_whitespace().collect();
        let r = row(&c);
        let vals: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(cols.len(), vals.len(), "{HEADER}\n{r}");
        let at = |name: &str| vals[cols.iter().position(|c| *c == name).unwrap()];
        assert_eq!(at("GPU"), "GPU-74616e64");
        assert_eq!(at("KERNELS"), "19");
        // Columns line up under their header.
        let end = |line: &str, word: &str| line.find(word).unwrap() + word.len();
        assert_eq!(end(HEADER, "KERNELS"), end(&r, " 19"), "{HEADER}\n{r}");
        assert_eq!(short_uuid("GPU-1"), "GPU-1");
    }

    #[test]
    fn bytes() {
        assert_eq!(human_bytes(10), "10B");
        assert_eq!(human_bytes(2048), "2.0KiB");
        assert_eq!(human_bytes(3 << 30), "3.0GiB");
    }
}
