//! Admission: who gets which class. Operator overrides first, then the
//! claim checked against `[policy.inference]`. Identity comes from the kernel
//! (SO_PEERCRED, /proc) and, for a job in a pod, from the container runtime
//! through the injector's record ([`crate::containers`]), never from what
//! the client says about itself. Root in a container is not root: only the
//! rules that name it (`anyone`, uids, cgroups, namespaces, labels) let a
//! contained job claim inference.

use tandem_proto::wire::ClientClass;

use crate::config::{AutoClass, Config, GrantClass};
use crate::containers::ContainerView;
use crate::slurm::SlurmJob;
use crate::sock::PeerCred;
pub use tandem_ident::{cgroup_under, exe_and_cgroup_match};
use tandem_ident::{selector_holds, Job};

/// What the kernel says about a peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Who {
    /// pid (SO_PEERCRED).
    pub pid: u32,
    /// uid (SO_PEERCRED).
    pub uid: u32,
    /// Primary gid (SO_PEERCRED).
    pub gid: u32,
    /// Supplementary groups (/proc/PID/status), if readable.
    pub groups: Vec<u32>,
    /// `/proc/PID/exe`, if readable.
    pub exe: Option<String>,
    /// The cgroup path (/proc/PID/cgroup: the v2 line, or on a cgroup v1
    /// host the line that names the pod and container), if readable.
    pub cgroup: Option<String>,
    /// The container it runs in, if any (pod, container, pod metadata).
    pub container: ContainerView,
    /// The Slurm job it runs in, if any (from the cgroup path).
    pub slurm: Option<SlurmJob>,
    /// Its parent, that one's parent, and so on (/proc/PID/stat), nearest
    /// first, pid 1 and 0 left out, at most [`MAX_ANCESTORS`]: what
    /// `tandemctl run` matches a wrapper's descendants by.
    pub ancestors: Vec<u32>,
}

/// How many ancestors [`Who::ancestors`] keeps.
pub const MAX_ANCESTORS: usize = 32;

/// The parent pid in the text of `/proc/PID/stat` (the field after the
/// command name, which may itself hold spaces and parentheses).
#[must_use]
pub fn ppid_of_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `pid`'s ancestors as [`Who::ancestors`] describes them; a gap in /proc
/// (a parent that just exited) ends the list.
#[must_use]
pub fn ancestors_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = pid;
    while out.len() < MAX_ANCESTORS {
        let Some(ppid) = std::fs::read_to_string(format!("/proc/{at}/stat"))
            .ok()
            .and_then(|s| ppid_of_stat(&s))
        else {
            break;
        };
        if ppid <= 1 || out.contains(&ppid) {
            break;
        }
        out.push(ppid);
        at = ppid;
    }
    out
}

impl Who {
    /// Read what /proc says about `cred.pid`, and the injector's record of
    /// its pod under `pod_info_dir` ("" = none), for a daemon running as
    /// `euid`; unreadable parts stay `None`.
    #[must_use]
    pub fn from_proc(cred: PeerCred, pod_info_dir: &str, euid: u32) -> Who {
        let base = format!("/proc/{}", cred.pid);
        let exe = std::fs::read_link(format!("{base}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let cgroup = std::fs::read_to_string(format!("{base}/cgroup"))
            .ok()
            .and_then(|s| tandem_ident::cgroup_of_proc(&s));
        let container = crate::containers::view(cred.pid, cgroup.as_deref(), pod_info_dir, euid);
        if container.contained && container.pidns.is_none() && crate::containers::gone(cred.pid) {
            crate::logging::warn_throttled(
                "peer gone before identified",
                &format!("peer pid {} exited before tandemd read its /proc: where it ran is unknown, so it is treated as a container's (not privileged)", cred.pid),
            );
        }
        let slurm = crate::slurm::job_of(cgroup.as_deref(), cred.uid);
        let groups = std::fs::read_to_string(format!("{base}/status"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("Groups:").map(|g| {
                        g.split_whitespace()
                            .filter_map(|x| x.parse().ok())
                            .collect()
                    })
                })
            })
            .unwrap_or_default();
        Who {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
            groups,
            exe,
            cgroup,
            container,
            slurm,
            ancestors: ancestors_of(cred.pid),
        }
    }

    /// What rules match against.
    #[must_use]
    pub fn job(&self) -> Job<'_> {
        Job {
            uid: self.uid,
            exe: self.exe.as_deref(),
            cgroup: self.cgroup.as_deref(),
            pod: self.container.pod.as_ref(),
        }
    }

    /// Runs in a container: its uid 0 is not the host's root.
    #[must_use]
    pub fn contained(&self) -> bool {
        self.container.contained
    }

    /// `uid N`, or `uid N in pod NS/NAME` / `uid N in a container` /
    /// `uid N in Slurm job J of USER`.
    #[must_use]
    pub fn describe(&self) -> String {
        match (&self.container.pod, self.contained(), &self.slurm) {
            (Some(p), _, _) => format!("uid {} in pod {}/{}", self.uid, p.namespace, p.name),
            (None, true, _) => format!("uid {} in a container", self.uid),
            (None, false, Some(j)) => {
                format!("uid {} in Slurm job {} of {}", self.uid, j.job, j.user)
            }
            (None, false, None) => format!("uid {}", self.uid),
        }
    }
}

/// The class to grant and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Granted.
    pub class: ClientClass,
    /// Shown in the stats.
    pub reason: String,
    /// `auto_class = "detect"` granted inference for now: the kernel stream
    /// may still turn it into training (`crate::autoclass`).
    pub detecting: bool,
}

impl Decision {
    fn fixed(class: ClientClass, reason: String) -> Decision {
        Decision {
            class,
            reason,
            detecting: false,
        }
    }
}

/// Decide the class of `who` claiming `claimed`, under `cfg`, for a daemon
/// running as `daemon_euid`.
#[must_use]
pub fn decide(cfg: &Config, daemon_euid: u32, who: &Who, claimed: ClientClass) -> Decision {
    let p = &cfg.policy;
    for (i, o) in p.overrides.iter().enumerate() {
        // A validated override names exactly one criterion; one naming
        // none matches no one.
        let m = o.matcher();
        let hit = !m.is_empty() && m.matches_job(&who.job());
        if hit {
            let what = if let Some(e) = &o.exe {
                format!("exe {e}")
            } else if let Some(u) = o.uid {
                format!("uid {u}")
            } else if let Some(n) = &o.namespace {
                format!("namespace {n}")
            } else {
                format!("cgroup {}", o.cgroup.as_deref().unwrap_or(""))
            };
            return Decision::fixed(o.class.into(), format!("operator override #{i} ({what})"));
        }
    }
    match claimed {
        ClientClass::Training => Decision::fixed(ClientClass::Training, "claimed training".into()),
        ClientClass::Auto => match p.auto_class {
            AutoClass::Inference => Decision::fixed(
                ClientClass::Inference,
                "claimed auto: policy.auto_class = inference".into(),
            ),
            AutoClass::Training => Decision::fixed(
                ClientClass::Training,
                "claimed auto: policy.auto_class = training".into(),
            ),
            AutoClass::Detect => match inference_allowed(cfg, daemon_euid, who) {
                Some(why) => Decision {
                    class: ClientClass::Inference,
                    reason: format!(
                        "auto: inference until a training kernel is seen (may claim inference: {why})"
                    ),
                    detecting: true,
                },
                None => Decision::fixed(
                    ClientClass::Training,
                    format!(
                        "auto: {} may not claim inference (see [policy.inference]): training",
                        who.describe()
                    ),
                ),
            },
        },
        ClientClass::Inference => match inference_allowed(cfg, daemon_euid, who) {
            Some(why) => Decision::fixed(
                ClientClass::Inference,
                format!("claimed inference, allowed ({why})"),
            ),
            None => Decision::fixed(
                GrantClass::Training.into(),
                format!(
                    "claimed inference, not allowed for {} (see [policy.inference] in tandemd.toml): granted training",
                    who.describe()
                ),
            ),
        },
    }
}

fn inference_allowed(cfg: &Config, daemon_euid: u32, who: &Who) -> Option<String> {
    let a = &cfg.policy.inference;
    // Privilege is the host's: root in a container is not root.
    if who.uid == 0 && !who.contained() {
        return Some("root".into());
    }
    if who.uid == daemon_euid && !who.contained() {
        return Some("same user as tandemd".into());
    }
    if let Some(p) = &who.container.pod {
        if a.namespaces.contains(&p.namespace) {
            return Some(format!("namespace {} listed", p.namespace));
        }
        if !a.pod_labels.is_empty() && selector_holds(&a.pod_labels, &p.labels) {
            return Some("pod labels match policy.inference.pod_labels".into());
        }
    }
    if let Some(j) = &who.slurm {
        if a.slurm_jobs.contains(&j.job) {
            return Some(format!("Slurm job {} listed", j.job));
        }
        if let Some(u) = a.slurm_users.iter().find(|u| j.user_is(u)) {
            return Some(format!("Slurm job {} of user {u} listed", j.job));
        }
    }
    if a.anyone {
        return Some("policy.inference.anyone".into());
    }
    if a.uids.contains(&who.uid) {
        return Some(format!("uid {} listed", who.uid));
    }
    if let Some(g) = std::iter::once(&who.gid)
        .chain(who.groups.iter())
        .find(|g| a.gids.contains(g))
    {
        return Some(format!("gid {g} listed"));
    }
    if let Some(c) = &who.cgroup {
        if let Some(p) = a.cgroups.iter().find(|p| cgroup_under(c, p)) {
            return Some(format!("cgroup under {p}"));
        }
    }
    if let Some(e) = &who.exe {
        if a.exes.iter().any(|x| x == e) {
            return Some(format!("exe {e} listed"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Override;

    #[test]
    fn ppid_is_read_past_a_command_name_with_spaces_and_parens() {
        assert_eq!(ppid_of_stat("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(ppid_of_stat("42 (a) b) (c) R 9 1 1"), Some(9));
        assert_eq!(ppid_of_stat("42 (sh"), None);
    }

    /// A peer that exited before tandemd read its /proc (it connected,
    /// sent its message and left, a forked child keeping the socket) has
    /// no pid namespace or cgroup to show: nothing says it was on the node,
    /// so its uid 0 is not the node's root, for inference or for control.
    #[test]
    fn a_peer_gone_before_its_proc_is_read_is_not_privileged() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        for pid in [pid, 0] {
            let cred = PeerCred {
                pid,
                uid: 0,
                gid: 0,
            };
            let who = Who::from_proc(cred, "", 500);
            assert!(who.contained(), "pid {pid}: {who:?}");
            let cfg = Config::default();
            let d = decide(&cfg, 500, &who, ClientClass::Inference);
            assert_eq!(d.class, ClientClass::Training, "pid {pid}: {}", d.reason);
            assert!(!crate::control::permitted(
                &cfg,
                500,
                who.uid,
                who.contained()
            ));
        }
    }

    #[test]
    fn ancestors_start_at_the_parent() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        let a = ancestors_of(std::process::id());
        if parent > 1 {
            assert_eq!(a.first(), Some(&parent), "{a:?}");
        }
        assert!(!a.contains(&1) && !a.contains(&std::process::id()), "{a:?}");
    }

    fn who(uid: u32) -> Who {
        Who {
            pid: 10,
            uid,
            gid: 100,
            groups: vec![100, 44],
            exe: Some("/usr/bin/python3".into()),
            cgroup: Some("/serving.slice/a.service".into()),
            container: ContainerView::default(),
            slurm: None,
            ancestors: Vec::new(),
        }
    }

    fn in_pod(uid: u32, namespace: &str) -> Who {
        let mut w = who(uid);
        w.container.contained = true;
        w.container.pod = Some(tandem_ident::PodMeta {
            namespace: namespace.into(),
            name: "p".into(),
            labels: [("app".to_string(), "llm".to_string())].into(),
            ..Default::default()
        });
        w
    }

    #[test]
    fn root_in_a_container_is_not_root() {
        let mut cfg = Config::default();
        let d = decide(&cfg, 0, &in_pod(0, "batch"), ClientClass::Inference);
        assert_eq!(d.class, ClientClass::Training, "{}", d.reason);
        assert!(d.reason.contains("uid 0 in pod batch/p"), "{}", d.reason);
        // tandemd's own uid inside a container is not tandemd's user either.
        assert_eq!(
            decide(&cfg, 1000, &in_pod(1000, "batch"), ClientClass::Inference).class,
            ClientClass::Training
        );
        // The operator names namespaces or labels that may claim it.
        cfg.policy.inference.namespaces = vec!["serving".into()];
        assert_eq!(
            decide(&cfg, 0, &in_pod(0, "serving"), ClientClass::Inference).class,
            ClientClass::Inference
        );
        assert_eq!(
            decide(&cfg, 0, &in_pod(0, "batch"), ClientClass::Inference).class,
            ClientClass::Training
        );
        cfg.policy.inference.pod_labels = [("app".to_string(), "llm".to_string())].into();
        let d = decide(&cfg, 0, &in_pod(0, "batch"), ClientClass::Inference);
        assert_eq!(d.class, ClientClass::Inference, "{}", d.reason);
        // Overrides may name a namespace.
        cfg.policy.overrides.push(Override {
            namespace: Some("batch".into()),
            ..Override::default()
        });
        let d = decide(&cfg, 0, &in_pod(0, "batch"), ClientClass::Inference);
        assert_eq!(d.class, ClientClass::Training, "{}", d.reason);
        assert!(d.reason.contains("namespace batch"), "{}", d.reason);
    }

    #[test]
    fn slurm_jobs_are_matched_by_user_and_job_not_by_cgroup() {
        let mut cfg = Config::default();
        let mut w = who(1000);
        w.cgroup = Some("/system.slice/slurmstepd.scope/job_6/step_0/user/task_0".into());
        w.slurm = crate::slurm::job_of(w.cgroup.as_deref(), 1000);
        w.slurm.as_mut().unwrap().user = "alice".into();
        let d = decide(&cfg, 0, &w, ClientClass::Inference);
        assert_eq!(d.class, ClientClass::Training, "{}", d.reason);
        assert!(d.reason.contains("Slurm job 6 of alice"), "{}", d.reason);
        // One rule for every job of a user, by name or uid.
        cfg.policy.inference.slurm_users = vec!["alice".into()];
        let d = decide(&cfg, 0, &w, ClientClass::Inference);
        assert_eq!(d.class, ClientClass::Inference, "{}", d.reason);
        assert!(
            d.reason.contains("Slurm job 6 of user alice"),
            "{}",
            d.reason
        );
        cfg.policy.inference.slurm_users = vec!["1000".into()];
        assert_eq!(
            decide(&cfg, 0, &w, ClientClass::Inference).class,
            ClientClass::Inference
        );
        // The same user outside a Slurm job is not matched.
        let outside = who(1000);
        assert_eq!(
            decide(&cfg, 0, &outside, ClientClass::Inference).class,
            ClientClass::Training
        );
        // Or one job by id.
        cfg.policy.inference.slurm_users.clear();
        cfg.policy.inference.slurm_jobs = vec![7];
        assert_eq!(
            decide(&cfg, 0, &w, ClientClass::Inference).class,
            ClientClass::Training
        );
        cfg.policy.inference.slurm_jobs = vec![6];
        assert_eq!(
            decide(&cfg, 0, &w, ClientClass::Inference).class,
            ClientClass::Inference
        );
    }

    #[test]
    fn inference_needs_permission() {
        let mut cfg = Config::default();
        let d = decide(&cfg, 0, &who(1000), ClientClass::Inference);
        assert_eq!(d.class, ClientClass::Training);
        assert!(d.reason.contains("not allowed"), "{}", d.reason);
        assert_eq!(
            decide(&cfg, 0, &who(0), ClientClass::Inference).class,
            ClientClass::Inference
        );
        assert_eq!(
            decide(&cfg, 1000, &who(1000), ClientClass::Inference).class,
            ClientClass::Inference
        );
        cfg.policy.inference.gids = vec![44];
        assert_eq!(
            decide(&cfg, 0, &who(1000), ClientClass::Inference).class,
            ClientClass::Inference
        );
        cfg.policy.inference.gids.clear();
        cfg.policy.inference.cgroups = vec!["/serving.slice".into()];
        assert_eq!(
            decide(&cfg, 0, &who(1000), ClientClass::Inference).class,
            ClientClass::Inference
        );
        cfg.policy.inference.cgroups = vec!["/serving.sl".into()];
        assert_eq!(
            decide(&cfg, 0, &who(1000), ClientClass::Inference).class,
            ClientClass::Training
        );
    }

    #[test]
    fn overrides_win_and_auto_follows_config() {
        let mut cfg = Config::default();
        assert_eq!(
            decide(&cfg, 0, &who(5), ClientClass::Auto).class,
            ClientClass::Training
        );
        cfg.policy.overrides.push(Override {
            exe: Some("/usr/bin/python3".into()),
            class: GrantClass::Inference,
            ..Override::default()
        });
        let d = decide(&cfg, 0, &who(5), ClientClass::Training);
        assert_eq!(d.class, ClientClass::Inference);
        assert!(d.reason.contains("override"), "{}", d.reason);
        // an unreadable exe never matches an exe rule
        let mut w = who(5);
        w.exe = None;
        assert_eq!(
            decide(&cfg, 0, &w, ClientClass::Training).class,
            ClientClass::Training
        );
    }
}
