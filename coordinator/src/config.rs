//! `tandemd.toml`: the daemon's configuration, its documented defaults, and
//! errors that name the file, the key and what is wrong.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tandem_ident::Matcher;
use tandem_proto::ring::{MAX_CAPACITY, MIN_CAPACITY};
use tandem_proto::wire::{ClientClass, MAX_HEARTBEAT_INTERVAL_MS};

use crate::dedup::DedupConfig;
use crate::follow::FollowConfig;
use crate::mps::config::MpsConfig;
use crate::sched::SchedConfig;

/// Where tandemd looks for its configuration unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/tandem/tandemd.toml";

/// The documented defaults, printed by `tandemd --print-default-config` and
/// committed as `scripts/tandemd.toml`. Parsing it gives [`Config::default`]
/// (a unit test holds the two together).
pub const DEFAULT_CONFIG_TOML: &str = r#"# tandemd configuration (/etc/tandem/tandemd.toml).
#
# Every key is optional: a missing key (or a missing file) takes the default
# shown here. Unknown keys are errors, so a typo is reported, not ignored.
# Reload with `systemctl reload tandemd`, `kill -HUP $(pidof tandemd)` or
# `tandemctl reload`; a bad file is reported and the running configuration kept.

# Log level: "error", "warn", "info", "debug" or "trace".
# The environment variable TANDEM_LOG, when set, wins over this.
log_level = "info"

# Records per client ring (a power of two from 16 to 4194304; 64 bytes each).
# Applies to clients that connect after a change.
ring_capacity = 32768

# How often tandemd advances each client's heartbeat, in milliseconds (1..=60000).
# A client that sees no beat for 4 intervals stops waiting on its gate.
heartbeat_interval_ms = 100

# How long a new connection may take to send its first message, in milliseconds.
handshake_timeout_ms = 1000

# Most clients registered at once; more are refused with TOO_MANY_CLIENTS.
max_clients = 1024

# Users (numeric uids) who may run control operations (reload, set-class)
# besides root and the user tandemd runs as. A process in a container (its
# own pid namespace, or a pod's cgroup) never may, whatever its uid.
admins = []

[stats]
# Also serve GET /metrics over TCP, e.g. "0.0.0.0:9464" for Prometheus.
# Empty: only the unix socket stats.sock beside the main socket.
tcp_listen = ""
# Also serve GET /stats (executables, uids, cgroups, pods, kernel names) on
# tcp_listen. The TCP port has no authentication: keep this off unless the
# address is reachable only by those who may see that.
tcp_serves_stats = false

# Kubernetes: where the injector (tandem-nri) records each pod's namespace,
# name, labels and annotations, as the container runtime reports them, for
# the rules below that name namespaces, pod_labels or pod_annotations. Empty:
# no records; such rules then match no job. A job's pod UID and container id
# come from its cgroup path either way.
[kubernetes]
pod_info_dir = ""

[policy]
# The class a client that claims "auto" (TANDEM_CLASS unset) is granted:
# "inference", "training", or "detect": start as inference (if the client may
# claim inference, see below; else training) and become training at the first
# kernel whose name shows a backward pass or an optimizer step (backward,
# autograd, dgrad, wgrad, bprop, multi_tensor_apply, _foreach_, adam, sgd,
# optimizer; ASCII case-insensitive). The stats show the kernel that decided.
auto_class = "detect"

# Who may claim the inference class. root and the user tandemd runs as always
# may, outside containers; anyone else (root in a container included) needs
# to match one of these (uid, gid including supplementary groups, cgroup path
# prefix, exact executable path, the pod's namespace, or all of pod_labels,
# e.g. { "tandem.io/class" = "inference" }), as the kernel and the container
# runtime report them, never as the client says. A disallowed claim is
# granted "training" and the reason is shown in the stats.
[policy.inference]
anyone = false
uids = []
gids = []
cgroups = []
exes = []
namespaces = []
pod_labels = {}

# Operator overrides, first match wins, whatever the job claims. Each entry
# names exactly one of exe (exact path), uid, cgroup (path prefix) or
# namespace (of the job's pod), and a class:
#
# [[policy.override]]
# exe = "/opt/serving/bin/server"
# class = "inference"
#
# [[policy.override]]
# cgroup = "/system.slice/batch.slice"
# class = "training"
#
# [[policy.override]]
# namespace = "batch"
# class = "training"

# When training may launch on a GPU shared with inference (the gates). Times in
# nanoseconds (1..=10000000000). Estimated kernel durations are learned from
# each job's launches, syncs and completion marks; an inference request begins
# at tandem_request_begin() or at a launch after request_idle_gap_ns idle, and
# ends at tandem_request_end() or at the sync that returns its result.
[scheduler]
# false: every gate stays open (tandem only observes; stats still show latency).
enabled = true
# Training work (estimated GPU time) that may be queued per GPU while no
# inference request is active, shared by its training jobs: what an arriving
# request can find ahead of it. At least max_active_budget_ns. On a GPU with no
# inference job at all, training is never held back.
idle_budget_ns = 4000000
# The same while a request is active (the start value of the SLO adaptation),
# and the range the adaptation keeps it in.
active_budget_ns = 500000
min_active_budget_ns = 100000
max_active_budget_ns = 4000000
# An inference launch after this long with no launch or sync begins a request.
request_idle_gap_ns = 2000000
# A GPU stays "inference active" this long after an inference job's last launch
# or request end; training shims see it on the GPU board within a launch.
request_hold_ns = 1000000
# Estimate for a kernel never measured.
default_kernel_ns = 50000
# Training jobs are asked to record a completion mark (a CUDA event) after a
# launch at most this often; each mark that completes tells how long the
# kernels before it really took, without waiting for the job to sync.
# 0: no marks; else 50000..=10000000000.
mark_every_ns = 500000

# p99 request-latency targets for inference jobs (none by default). With a
# target, the scheduler adapts the training room of the job's GPU while its
# requests run (within min/max_active_budget_ns): smaller while the job's p99
# is above the target, larger while well under it. The first entry a job
# matches wins. An entry matches when every criterion it names matches: uids
# (numeric), executables (exact paths), cgroups (cgroup v2 path prefixes), as
# the kernel reports them, never as the job says. An entry naming no criterion
# matches every inference job: put one last for a default. /stats shows each
# inference job's slo_p99_target_ms beside its measured p99_ms.
#
# [[scheduler.slo]]
# p99_ms = 50.0
# executables = ["/opt/serving/bin/server"]
#
# [[scheduler.slo]]
# p99_ms = 200.0
# cgroups = ["/serving.slice"]
# Weight deduplication: identical 2 MiB pieces of device memory of jobs that
# share (TANDEM_SHARE_WEIGHTS=on, or the class defaults below) are merged into
# one read-only copy, only between processes of one trust group, only after a
# byte-for-byte comparison. Changes apply to clients that register after a
# reload: the sharing and the trust group of a registered client never change
# under it.
[dedup]
# Master switch: when false no client is told it may share.
enabled = true
# Share weights of jobs that did not set TANDEM_SHARE_WEIGHTS, by class (the
# class granted at registration). A job's explicit TANDEM_SHARE_WEIGHTS=off
# always wins.
default_inference = false
default_training = false
# A PUBLISH or OFFER not answered within this many ms is given up (1..=600000).
timeout_ms = 5000
# Granules tracked per client at most (candidates, merged, refused); more
# candidates are ignored and counted (1..=16777216).
max_candidates_per_client = 262144

# Trust groups: only processes in one group ever share memory. A process
# matching no group is in the group of its own pod ("pod:<pod uid>"), of its
# container outside Kubernetes ("container:<id>"), or, on the host, of its
# user id ("uid:<uid>": processes of one user can already read each other);
# never "all uid 0". A group matches when every criterion it lists matches
# (users and uids together are one criterion); the first matching group
# wins. Identity is what the kernel reports (uid, /proc/PID/exe,
# /proc/PID/cgroup) and, for pods, what the container runtime recorded
# (namespaces, pod_labels, pod_annotations), never what the job claims.
#
# [[dedup.group]]
# name = "models"
# users = ["alice"]          # and/or uids = [1000]
# executables = ["/usr/bin/python3"]
# cgroups = ["/system.slice/serving.slice"]   # cgroup path prefix
#
# [[dedup.group]]
# name = "llm-replicas"
# namespaces = ["serving"]
# pod_labels = { app = "llm" }

# Follow mode: a job shares a named region of its device memory (e.g. a
# training job's live weights, through tandem_follow_offer), and jobs of the
# same trust group (the groups above) on the same GPU map it read-only
# (tandem_follow_map), so their outputs track it. Both jobs set
# TANDEM_FOLLOW=on. A reload applies to later requests: regions already
# shared stay, and so do the mappings of them.
[follow]
# Master switch: when false no client is told it may use follow mode.
enabled = true
# Regions one client may share at once (1..=1024).
max_regions_per_client = 16

# tandem over MPS. Off by default: GPU measurements decide whether it helps.
# With enabled = true, tandemd starts an NVIDIA MPS control daemon
# (nvidia-cuda-mps-control -d) for the node's GPUs, or uses the one already
# running in pipe_dir, and stops the one it started when it stops. A job that
# registers has CUDA join it (the shim sets the CUDA_MPS_* variables before CUDA
# initialises): training jobs at training_priority and optionally capped in
# SMs, inference jobs at normal priority. tandem's gates still hold training
# back, and training_inflight_ns bounds the training work a GPU has in flight.
# If the daemon cannot be started, tandemd keeps running in plain time slicing
# and says why (its log, /stats "sharing", tandemctl status).
#
# The trade-off: the jobs under MPS on one GPU share one server context, so a
# fatal fault in one of them (an illegal memory access, say) reaches every MPS
# job on that GPU; they lose the isolation of separate contexts. Weight sharing
# and follow mode are not offered to jobs that join MPS (a stray write into
# shared memory would fail them all). MPS runs one user's server at a time (a
# job of another user waits until the first user's MPS jobs have ended), so
# tandem has the jobs of one uid join at a time and runs the others outside MPS.
# Stopping tandemd stops the daemon it started, and with it the GPU work of the
# jobs that joined. enabled, control_binary, pipe_dir and log_dir apply when
# tandemd restarts; the training_* values to jobs that register after a reload.
[mps]
enabled = false
# A program name looked up on tandemd's PATH, or an absolute path.
control_binary = "nvidia-cuda-mps-control"
# CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY (absolute paths). Empty:
# "mps" and "mps-log" beside tandemd's socket (/run/tandem/mps for the system
# service; not /tmp, which the service unit makes private to tandemd).
pipe_dir = ""
log_dir = ""
# CUDA_MPS_CLIENT_PRIORITY of training jobs: 0 normal, 1 below normal.
training_priority = 1
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of training jobs (1..=100); no cap when left out.
# training_thread_percentage = 50
# Training work a GPU may have in flight under MPS, in estimated ns
# (0..=10000000000; 0: no bound beyond [scheduler]).
training_inflight_ns = 2000000
"#;

/// A class the operator may grant ("auto" is a claim, not a grant).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantClass {
    /// Latency-sensitive.
    Inference,
    /// Throughput.
    #[default]
    Training,
}

impl From<GrantClass> for ClientClass {
    fn from(c: GrantClass) -> ClientClass {
        match c {
            GrantClass::Inference => ClientClass::Inference,
            GrantClass::Training => ClientClass::Training,
        }
    }
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// error | warn | info | debug | trace.
    pub log_level: String,
    /// Records per ring.
    pub ring_capacity: u32,
    /// Heartbeat period.
    pub heartbeat_interval_ms: u32,
    /// First-message deadline.
    pub handshake_timeout_ms: u32,
    /// Client limit.
    pub max_clients: u32,
    /// Extra uids allowed to run control operations.
    pub admins: Vec<u32>,
    /// Stats serving.
    pub stats: StatsConfig,
    /// `[kubernetes]`: the injector's pod records.
    pub kubernetes: crate::containers::KubernetesConfig,
    /// Class policy.
    pub policy: PolicyConfig,
    /// `[scheduler]`: the gate policy's parameters.
    pub scheduler: SchedConfig,
    /// `[dedup]`: weight sharing and trust groups.
    pub dedup: DedupConfig,
    /// `[follow]`: follow mode (shared regions mapped read-only).
    pub follow: FollowConfig,
    /// `[mps]`: tandem over MPS.
    pub mps: MpsConfig,
}

/// `[stats]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsConfig {
    /// Optional TCP address for the stats HTTP server ("" = off).
    pub tcp_listen: String,
    /// Serve `/stats` on the TCP address too (else only `/metrics`).
    pub tcp_serves_stats: bool,
}

/// What a client claiming "auto" gets (`[policy] auto_class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoClass {
    /// Always inference (subject to who may claim it).
    Inference,
    /// Always training.
    Training,
    /// From the kernel stream (`crate::autoclass`).
    Detect,
}

/// `[policy]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// What "auto" gets.
    pub auto_class: AutoClass,
    /// Who may claim inference.
    pub inference: InferenceAllow,
    /// Operator overrides (first match wins).
    #[serde(rename = "override")]
    pub overrides: Vec<Override>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            auto_class: AutoClass::Detect,
            inference: InferenceAllow::default(),
            overrides: Vec::new(),
        }
    }
}

/// `[policy.inference]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceAllow {
    /// Everyone may claim inference.
    pub anyone: bool,
    /// These uids may.
    pub uids: Vec<u32>,
    /// Members of these gids may.
    pub gids: Vec<u32>,
    /// Processes in cgroups under these prefixes may.
    pub cgroups: Vec<String>,
    /// These executables may.
    pub exes: Vec<String>,
    /// Jobs in pods of these namespaces may.
    pub namespaces: Vec<String>,
    /// Jobs in pods carrying all these labels may (empty: no criterion).
    pub pod_labels: std::collections::BTreeMap<String, String>,
}

/// `[[policy.override]]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// Exact executable path.
    #[serde(default)]
    pub exe: Option<String>,
    /// uid.
    #[serde(default)]
    pub uid: Option<u32>,
    /// cgroup path prefix.
    #[serde(default)]
    pub cgroup: Option<String>,
    /// Namespace of the job's pod.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The class to grant.
    pub class: GrantClass,
}

impl Override {
    /// Its criterion as a [`Matcher`]: the one of `exe`, `uid`, `cgroup`, `namespace` it
    /// names (validation allows exactly one).
    #[must_use]
    pub fn matcher(&self) -> Matcher<'_> {
        Matcher {
            uids: self.uid.as_slice(),
            user_uids: &[],
            executables: self.exe.as_slice(),
            cgroups: self.cgroup.as_slice(),
            namespaces: self.namespace.as_slice(),
            ..Matcher::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            log_level: "info".into(),
            ring_capacity: tandem_proto::ring::DEFAULT_CAPACITY,
            heartbeat_interval_ms: 100,
            handshake_timeout_ms: 1000,
            max_clients: 1024,
            admins: Vec::new(),
            stats: StatsConfig::default(),
            kubernetes: Default::default(),
            policy: PolicyConfig::default(),
            scheduler: SchedConfig::default(),
            dedup: DedupConfig::default(),
            follow: FollowConfig::default(),
            mps: MpsConfig::default(),
        }
    }
}

/// A configuration that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// `line:column`, when known.
    pub location: Option<(usize, usize)>,
    /// The dotted key, when known.
    pub key: Option<String>,
    /// What is wrong.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad configuration {}", self.path.display())?;
        if let Some((l, c)) = self.location {
            write!(f, " (line {l}, column {c})")?;
        }
        if let Some(k) = &self.key {
            write!(f, ": key `{k}`")?;
        }
        write!(f, ": {}", self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// How a configuration was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Read from the file.
    File,
    /// The file does not exist: defaults.
    MissingFile,
}

impl Config {
    /// Read `path`; a missing file gives the defaults.
    pub fn load(path: &Path) -> Result<(Config, Source), ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok((Config::parse(&text, path)?, Source::File)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok((Config::default(), Source::MissingFile))
            }
            Err(e) => Err(ConfigError {
                path: path.to_path_buf(),
                location: None,
                key: None,
                problem: format!("cannot read it: {e}"),
            }),
        }
    }

    /// Parse and validate `text` (from `path`, named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let span = e.span();
            let (location, key) = match &span {
                Some(s) => (Some(line_col(text, s.start)), key_at(text, s.start)),
                None => (None, None),
            };
            ConfigError {
                path: path.to_path_buf(),
                location,
                key,
                problem: e.message().trim().to_string(),
            }
        })?;
        let bad = |(key, problem): (String, String)| ConfigError {
            path: path.to_path_buf(),
            location: None,
            key: Some(key),
            problem,
        };
        cfg.validate().map_err(bad)?;
        cfg.dedup.resolve_users().map_err(bad)?;
        Ok(cfg)
    }

    /// Checks serde cannot express. Returns (key, problem).
    fn validate(&self) -> Result<(), (String, String)> {
        if parse_level(&self.log_level).is_none() {
            return Err((
                "log_level".into(),
                format!(
                    "{:?} is not a log level; use one of \"error\", \"warn\", \"info\", \"debug\", \"trace\"",
                    self.log_level
                ),
            ));
        }
        if tandem_proto::RingLayout::new(self.ring_capacity).is_err() {
            return Err((
                "ring_capacity".into(),
                format!(
                    "{} is not a power of two between {MIN_CAPACITY} and {MAX_CAPACITY}",
                    self.ring_capacity
                ),
            ));
        }
        if self.heartbeat_interval_ms == 0 || self.heartbeat_interval_ms > MAX_HEARTBEAT_INTERVAL_MS
        {
            return Err((
                "heartbeat_interval_ms".into(),
                format!(
                    "{} is out of range: use 1 to {MAX_HEARTBEAT_INTERVAL_MS}",
                    self.heartbeat_interval_ms
                ),
            ));
        }
        if self.handshake_timeout_ms == 0 || self.handshake_timeout_ms > 60_000 {
            return Err((
                "handshake_timeout_ms".into(),
                format!(
                    "{} is out of range: use 1 to 60000",
                    self.handshake_timeout_ms
                ),
            ));
        }
        if self.max_clients == 0 {
            return Err(("max_clients".into(), "must be at least 1".into()));
        }
        if !self.stats.tcp_listen.is_empty() && self.stats.tcp_listen.parse::<SocketAddr>().is_err()
        {
            return Err((
                "stats.tcp_listen".into(),
                format!(
                    "{:?} is not an address:port such as \"127.0.0.1:9464\" (or \"\" for none)",
                    self.stats.tcp_listen
                ),
            ));
        }
        self.scheduler
            .validate()
            .map_err(|e| (format!("scheduler.{}", e.field), e.problem))?;
        self.dedup.validate()?;
        self.follow.validate()?;
        self.mps.validate()?;
        for (i, o) in self.policy.overrides.iter().enumerate() {
            let n = usize::from(o.exe.is_some())
                + usize::from(o.uid.is_some())
                + usize::from(o.cgroup.is_some())
                + usize::from(o.namespace.is_some());
            if n != 1 {
                return Err((
                    format!("policy.override[{i}]"),
                    format!("names {n} of exe, uid, cgroup, namespace; an override must name exactly one"),
                ));
            }
        }
        Ok(())
    }

    /// The TCP stats address, if configured (validated at parse).
    #[must_use]
    pub fn stats_tcp(&self) -> Option<SocketAddr> {
        self.stats.tcp_listen.parse().ok()
    }

    /// The log level (validated at parse; `info` if somehow invalid).
    #[must_use]
    pub fn level(&self) -> tracing::Level {
        parse_level(&self.log_level).unwrap_or(tracing::Level::INFO)
    }
}

/// Parse a level name (also used for `TANDEM_LOG`).
#[must_use]
pub fn parse_level(s: &str) -> Option<tracing::Level> {
    match s.trim().to_ascii_lowercase().as_str() {
        "error" => Some(tracing::Level::ERROR),
        "warn" | "warning" => Some(tracing::Level::WARN),
        "info" => Some(tracing::Level::INFO),
        "debug" => Some(tracing::Level::DEBUG),
        "trace" => Some(tracing::Level::TRACE),
        _ => None,
    }
}

mod locate;
use locate::{key_at, line_col};

#[cfg(test)]
mod tests;
