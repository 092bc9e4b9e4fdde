//! `[dedup]` in tandemd.toml, and trust groups: which registered processes
//! may ever share weight memory with each other.
//!
//! A group matches a process when every non-empty criterion matches (a
//! criterion matches when any of its entries does): the user (`users` and
//! `uids` together: the uid is one of them), the executable (`executables`,
//! exact path), the cgroup (`cgroups`, path prefix) and, for jobs in pods,
//! the pod (`namespaces`, `pod_labels`, `pod_annotations`). The first
//! matching group wins; a process matching none is in its pod's group
//! (`pod:<uid>`), its container's (`container:<id>`) or, on the host, its
//! user's (`uid:<uid>`: one user's processes can already read each other's
//! memory). Two pods that both run as root never share by default.
//!
//! Identity is what the kernel reports (SO_PEERCRED, `/proc/PID/exe`,
//! `/proc/PID/cgroup`), never what the Hello claims: a trust group decides
//! whose memory a process may read (contracts 5 and 6). A criterion tandemd
//! cannot check (an unreadable `/proc` entry) does not match.

use std::ffi::CString;

use serde::{Deserialize, Serialize};
use tandem_ident::Matcher;
use tandem_proto::wire::{
    ClientClass, HELLO_FLAG_NO_SHARE_WEIGHTS, HELLO_FLAG_SHARE_WEIGHTS, WELCOME_FLAG_SHARE_WEIGHTS,
};

use crate::admission::Who;

/// Prefixes of the default groups' names, which configured groups may not use.
pub const RESERVED_PREFIXES: [&str; 4] = ["uid:", "pod:", "container:", "pidns:"];

/// Default `[dedup] timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u32 = 5000;
/// Largest `[dedup] timeout_ms`.
pub const MAX_TIMEOUT_MS: u32 = 600_000;
/// Default `[dedup] max_candidates_per_client`.
pub const DEFAULT_MAX_CANDIDATES: u32 = 262_144;
/// Largest `[dedup] max_candidates_per_client`.
pub const MAX_MAX_CANDIDATES: u32 = 1 << 24;

/// `[dedup]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DedupConfig {
    /// Master switch: when false no client is told it may share.
    pub enabled: bool,
    /// Share the weights of inference jobs that did not ask.
    pub default_inference: bool,
    /// Share the weights of training jobs that did not ask.
    pub default_training: bool,
    /// A PUBLISH or OFFER not answered within this many ms is given up.
    pub timeout_ms: u32,
    /// Granules (candidates, merged, refused) tracked per client at most.
    pub max_candidates_per_client: u32,
    /// `[[dedup.group]]`, first match wins.
    #[serde(rename = "group")]
    pub groups: Vec<TrustGroup>,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            enabled: true,
            default_inference: false,
            default_training: false,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_candidates_per_client: DEFAULT_MAX_CANDIDATES,
            groups: Vec::new(),
        }
    }
}

tandem_ident::rule! {
    pods;
    /// `[[dedup.group]]`: a name and the criteria (`users`, and the rule's
    /// `uids`, `executables`, `cgroups`).
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct TrustGroup {
        /// Unique, non-empty; shown in the stats.
        pub name: String,
        /// User names (resolved to uids when the file is read; one criterion
        /// with `uids`).
        #[serde(default)]
        pub users: Vec<String>,
        /// `users` resolved (filled by [`DedupConfig::resolve_users`]).
        #[serde(skip)]
        pub user_uids: Vec<u32>,
    }
}

impl TrustGroup {
    /// Whether `who` is in this group (see the module docs).
    #[must_use]
    pub fn matches(&self, who: &Who) -> bool {
        Matcher {
            user_uids: &self.user_uids,
            ..self.matcher()
        }
        .matches_job(&who.job())
    }

    fn has_criteria(&self) -> bool {
        !self.users.is_empty() || !self.matcher().is_empty()
    }
}

impl DedupConfig {
    /// Checks serde cannot express. Returns (key, problem).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err((
                "dedup.timeout_ms".into(),
                format!(
                    "{} is out of range: use 1 to {MAX_TIMEOUT_MS}",
                    self.timeout_ms
                ),
            ));
        }
        if self.max_candidates_per_client == 0
            || self.max_candidates_per_client > MAX_MAX_CANDIDATES
        {
            return Err((
                "dedup.max_candidates_per_client".into(),
                format!(
                    "{} is out of range: use 1 to {MAX_MAX_CANDIDATES}",
                    self.max_candidates_per_client
                ),
            ));
        }
        for (i, g) in self.groups.iter().enumerate() {
            let key = format!("dedup.group[{i}]");
            if g.name.trim().is_empty() {
                return Err((
                    key,
                    "has no name; every trust group needs a unique `name`".into(),
                ));
            }
            if let Some(p) = RESERVED_PREFIXES.iter().find(|p| g.name.starts_with(**p)) {
                return Err((
                    key,
                    format!(
                        "group {:?}: names starting with {p:?} are reserved for the default groups (per user, pod, container)",
                        g.name
                    ),
                ));
            }
            if let Some(j) = self.groups[..i].iter().position(|o| o.name == g.name) {
                return Err((
                    key,
                    format!(
                        "group {:?} is defined twice (also dedup.group[{j}]); names must be unique",
                        g.name
                    ),
                ));
            }
            if !g.has_criteria() {
                return Err((
                    key,
                    format!(
                        "group {:?} has no criteria: give it users, uids, executables or cgroups (a group matching everyone would share memory across users)",
                        g.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Resolve every group's `users` to uids (the system's user database,
    /// once per read of the file). Returns (key, problem) for an unknown name.
    pub fn resolve_users(&mut self) -> Result<(), (String, String)> {
        for (i, g) in self.groups.iter_mut().enumerate() {
            g.user_uids.clear();
            for u in &g.users {
                match uid_of(u) {
                    Some(uid) => g.user_uids.push(uid),
                    None => {
                        return Err((
                            format!("dedup.group[{i}]"),
                            format!(
                                "group {:?}: no user named {u:?} on this system (use uids = [...] for numeric ids)",
                                g.name
                            ),
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// The trust group of `who`: the first configured group it matches, else
    /// its default: its pod's, its container's, or on the host `uid:<uid>`.
    #[must_use]
    pub fn group_of(&self, who: &Who) -> String {
        self.groups.iter().find(|g| g.matches(who)).map_or_else(
            || {
                who.container
                    .default_group()
                    .unwrap_or_else(|| format!("uid:{}", who.uid))
            },
            |g| g.name.clone(),
        )
    }

    /// Whether a client with Hello `hello_flags`, granted `class`, may share.
    #[must_use]
    pub fn share(&self, hello_flags: u8, class: ClientClass) -> bool {
        if !self.enabled || hello_flags & HELLO_FLAG_NO_SHARE_WEIGHTS != 0 {
            return false;
        }
        let by_default = match class {
            ClientClass::Inference => self.default_inference,
            ClientClass::Training | ClientClass::Auto => self.default_training,
        };
        hello_flags & HELLO_FLAG_SHARE_WEIGHTS != 0 || by_default
    }

    /// The index's limits under this configuration.
    #[must_use]
    pub fn index_config(&self) -> super::IndexConfig {
        super::IndexConfig {
            granule_len: super::GRANULE_LEN,
            timeout_ns: u64::from(self.timeout_ms) * 1_000_000,
            max_entries_per_client: self.max_candidates_per_client as usize,
        }
    }

    /// The Welcome flags for [`share`](Self::share).
    #[must_use]
    pub fn welcome_flags(&self, hello_flags: u8, class: ClientClass) -> u8 {
        if self.share(hello_flags, class) {
            WELCOME_FLAG_SHARE_WEIGHTS
        } else {
            0
        }
    }
}

/// The uid of user `name` (`getpwnam_r`), if it exists.
fn uid_of(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid out-parameter.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `c` is NUL-terminated; `pw`, `buf` (with its length) and
        // `out` are valid, writable out-parameters for the call.
        let r = unsafe {
            libc::getpwnam_r(
                c.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            )
        };
        if r == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return (r == 0 && !out.is_null()).then_some(pw.pw_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(uid: u32, exe: Option<&str>, cgroup: Option<&str>) -> Who {
        Who {
            pid: 1,
            uid,
            gid: uid,
            groups: Vec::new(),
            exe: exe.map(str::to_string),
            cgroup: cgroup.map(str::to_string),
            container: Default::default(),
            ancestors: Vec::new(),
            slurm: None,
        }
    }

    fn group(name: &str) -> TrustGroup {
        TrustGroup {
            name: name.into(),
            ..TrustGroup::default()
        }
    }

    fn parse(text: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::Config::parse(text, std::path::Path::new("/etc/tandem/tandemd.toml"))
    }

    #[test]
    fn config_file_defaults_groups_and_errors() {
        let d = crate::config::Config::default().dedup;
        assert!(d.enabled && !d.default_inference && !d.default_training);
        assert_eq!((d.timeout_ms, d.groups.len()), (5000, 0));
        let c = parse(
            "[dedup]\ndefault_inference = true\ntimeout_ms = 250\n\
             [[dedup.group]]\nname = \"models\"\nusers = [\"root\"]\nuids = [1000]\n\
             executables = [\"/usr/bin/python3\"]\ncgroups = [\"/kubepods/inference\"]\n\
             [[dedup.group]]\nname = \"batch\"\ncgroups = [\"/batch.slice\"]\n",
        )
        .unwrap();
        assert!(c.dedup.default_inference);
        assert_eq!(c.dedup.timeout_ms, 250);
        assert_eq!(c.dedup.groups[0].user_uids, vec![0], "users resolved");
        assert_eq!(c.dedup.groups[1].name, "batch");
        for (text, key, needle) in [
            ("[[dedup.group]]\nname = \"empty\"\n", "dedup.group[0]", "\"empty\" has no criteria"),
            (
                "[[dedup.group]]\nname = \"a\"\nuids = [1]\n[[dedup.group]]\nname = \"a\"\nuids = [2]\n",
                "dedup.group[1]",
                "\"a\" is defined twice",
            ),
            ("[[dedup.group]]\nuids = [1]\n", "dedup.group", "name"),
            (
                "[[dedup.group]]\nname = \"x\"\nusers = [\"no-such-user-tandem\"]\n",
                "dedup.group[0]",
                "no-such-user-tandem",
            ),
            ("[[dedup.group]]\nname = \"x\"\nexes = [\"/a\"]\n", "dedup.group.exes", "exes"),
            ("[dedup]\ntimeout_ms = 0\n", "dedup.timeout_ms", "out of range"),
        ] {
            let e = parse(text).unwrap_err();
            let msg = e.to_string();
            assert_eq!(e.key.as_deref(), Some(key), "{text}: {msg}");
            assert!(msg.contains(needle), "{text}: {msg}");
        }
    }

    fn root_in_pod(pod_uid: &str, namespace: &str) -> Who {
        let mut w = who(0, Some("/usr/bin/python3"), None);
        w.container.contained = true;
        w.container.placement = Some(tandem_ident::Placement {
            pod_uid: Some(pod_uid.into()),
            qos: None,
            container_id: None,
            runtime: None,
        });
        w.container.pod = Some(tandem_ident::PodMeta {
            namespace: namespace.into(),
            labels: [("app".to_string(), "llm".to_string())].into(),
            ..Default::default()
        });
        w
    }

    #[test]
    fn root_pods_are_apart_by_default_and_together_by_rule() {
        let mut d = crate::config::Config::default().dedup;
        let (a, b) = (
            root_in_pod("aaaa-1", "serving"),
            root_in_pod("bbbb-2", "serving"),
        );
        assert_eq!(d.group_of(&a), "pod:aaaa-1");
        assert_eq!(d.group_of(&b), "pod:bbbb-2");
        // A host root process keeps the per-user group.
        assert_eq!(d.group_of(&who(0, None, None)), "uid:0");
        let c = parse(
            "[[dedup.group]]\nname = \"llm\"\nnamespaces = [\"serving\"]\npod_labels = { app = \"llm\" }\n",
        )
        .unwrap();
        d = c.dedup;
        assert_eq!(
            (d.group_of(&a), d.group_of(&b)),
            ("llm".into(), "llm".into())
        );
        assert_eq!(d.group_of(&root_in_pod("cccc-3", "batch")), "pod:cccc-3");
        // The default groups' prefixes are reserved.
        for name in ["pod:x", "container:x", "pidns:1", "uid:0"] {
            let e =
                parse(&format!("[[dedup.group]]\nname = \"{name}\"\nuids = [1]\n")).unwrap_err();
            assert!(e.problem.contains("reserved"), "{name}: {e}");
        }
    }

    #[test]
    fn every_non_empty_criterion_must_match() {
        let g = TrustGroup {
            uids: vec![1000],
            executables: vec!["/usr/bin/python3".into()],
            cgroups: vec!["/kubepods/inference".into()],
            ..group("models")
        };
        let ok = who(
            1000,
            Some("/usr/bin/python3"),
            Some("/kubepods/inference/pod1"),
        );
        assert!(g.matches(&ok));
        assert!(!g.matches(&Who {
            uid: 1001,
            ..ok.clone()
        }));
        assert!(!g.matches(&Who {
            exe: Some("/usr/bin/python3.12".into()),
            ..ok.clone()
        }));
        assert!(!g.matches(&Who {
            cgroup: Some("/kubepods/inference-x".into()),
            ..ok.clone()
        }));
        // What tandemd cannot see does not match.
        assert!(!g.matches(&Who {
            exe: None,
            ..ok.clone()
        }));
        assert!(!g.matches(&Who { cgroup: None, ..ok }));
    }

    #[test]
    fn users_and_uids_are_one_criterion() {
        let mut g = TrustGroup {
            uids: vec![7],
            users: vec!["root".into()],
            ..group("ops")
        };
        let mut cfg = DedupConfig {
            groups: vec![g.clone()],
            ..DedupConfig::default()
        };
        cfg.resolve_users().unwrap();
        g = cfg.groups[0].clone();
        assert_eq!(g.user_uids, vec![0]);
        assert!(g.matches(&who(0, None, None)));
        assert!(g.matches(&who(7, None, None)));
        assert!(!g.matches(&who(8, None, None)));
    }

    #[test]
    fn first_match_wins_and_the_rest_is_per_uid() {
        let cfg = DedupConfig {
            groups: vec![
                TrustGroup {
                    executables: vec!["/a".into()],
                    ..group("first")
                },
                TrustGroup {
                    uids: vec![5],
                    ..group("second")
                },
            ],
            ..DedupConfig::default()
        };
        assert_eq!(cfg.group_of(&who(5, Some("/a"), None)), "first");
        assert_eq!(cfg.group_of(&who(5, Some("/b"), None)), "second");
        assert_eq!(cfg.group_of(&who(6, Some("/b"), None)), "uid:6");
    }

    #[test]
    fn bad_groups_are_named() {
        let check = |groups: Vec<TrustGroup>, needle: &str, key: &str| {
            let cfg = DedupConfig {
                groups,
                ..DedupConfig::default()
            };
            let (k, msg) = cfg.validate().unwrap_err();
            assert_eq!(k, key, "{msg}");
            assert!(msg.contains(needle), "{msg}");
        };
        let some = |n: &str| TrustGroup {
            uids: vec![1],
            ..group(n)
        };
        check(
            vec![group("lonely")],
            "\"lonely\" has no criteria",
            "dedup.group[0]",
        );
        check(
            vec![some("a"), some("b"), some("a")],
            "\"a\" is defined twice",
            "dedup.group[2]",
        );
        check(vec![some(" ")], "no name", "dedup.group[0]");
        check(vec![some("uid:0")], "reserved", "dedup.group[0]");
        let mut cfg = DedupConfig {
            groups: vec![TrustGroup {
                users: vec!["no-such-user-tandem-test".into()],
                ..group("x")
            }],
            ..DedupConfig::default()
        };
        let (k, msg) = cfg.resolve_users().unwrap_err();
        assert_eq!(k, "dedup.group[0]");
        assert!(msg.contains("no-such-user-tandem-test"), "{msg}");
    }

    #[test]
    fn who_may_share() {
        let on = HELLO_FLAG_SHARE_WEIGHTS;
        let off = HELLO_FLAG_NO_SHARE_WEIGHTS;
        let d = DedupConfig::default();
        assert!(d.share(on, ClientClass::Training));
        assert!(!d.share(0, ClientClass::Training));
        assert!(!d.share(0, ClientClass::Inference));
        assert!(!d.share(on | off, ClientClass::Inference), "off wins");
        let inf = DedupConfig {
            default_inference: true,
            ..DedupConfig::default()
        };
        assert!(inf.share(0, ClientClass::Inference));
        assert!(!inf.share(0, ClientClass::Training));
        assert!(
            !inf.share(off, ClientClass::Inference),
            "off wins over defaults"
        );
        let tr = DedupConfig {
            default_training: true,
            ..DedupConfig::default()
        };
        assert!(tr.share(0, ClientClass::Training));
        let disabled = DedupConfig {
            enabled: false,
            default_inference: true,
            ..DedupConfig::default()
        };
        assert!(!disabled.share(on, ClientClass::Inference));
        assert_eq!(disabled.welcome_flags(on, ClientClass::Training), 0);
        assert_eq!(
            d.welcome_flags(on, ClientClass::Training),
            WELCOME_FLAG_SHARE_WEIGHTS
        );
    }
}
