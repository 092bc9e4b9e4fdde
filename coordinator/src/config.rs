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
pub const DEFAULT_CONFIG_TOML: &str = include_str!("config/default.toml");

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
    /// `[trace]`: the window `tandemctl trace` reads.
    pub trace: crate::capture::TraceConfig,
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
    /// Slurm jobs of these users (names, or uids in decimal) may: a task
    /// slurmstepd placed in the job's cgroup, not the same user's other
    /// processes.
    pub slurm_users: Vec<String>,
    /// These Slurm jobs (ids) may.
    pub slurm_jobs: Vec<u64>,
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
            trace: crate::capture::TraceConfig::default(),
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
        self.trace.validate()?;
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
