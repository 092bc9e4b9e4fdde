//! Admission: who gets which class. Operator overrides first, then the
//! claim checked against `[policy.inference]`. Identity comes from the kernel
//! (SO_PEERCRED, /proc), never from what the client says about itself.

use tandem_proto::wire::ClientClass;

use crate::config::{AutoClass, Config, GrantClass};
use crate::sock::PeerCred;
pub use tandem_ident::{cgroup_under, exe_and_cgroup_match};

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
    /// The cgroup v2 path (`0::` line of /proc/PID/cgroup), if readable.
    pub cgroup: Option<String>,
}

impl Who {
    /// Read what /proc says about `cred.pid`; unreadable parts stay `None`.
    #[must_use]
    pub fn from_proc(cred: PeerCred) -> Who {
        let base = format!("/proc/{}", cred.pid);
        let exe = std::fs::read_link(format!("{base}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let cgroup = std::fs::read_to_string(format!("{base}/cgroup"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            });
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
        let hit = !m.is_empty() && m.matches(who.uid, who.exe.as_deref(), who.cgroup.as_deref());
        if hit {
            let what = if let Some(e) = &o.exe {
                format!("exe {e}")
            } else if let Some(u) = o.uid {
                format!("uid {u}")
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
                        "auto: uid {} may not claim inference (see [policy.inference]): training",
                        who.uid
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
                    "claimed inference, not allowed for uid {} (see [policy.inference] in tandemd.toml): granted training",
                    who.uid
                ),
            ),
        },
    }
}

fn inference_allowed(cfg: &Config, daemon_euid: u32, who: &Who) -> Option<String> {
    let a = &cfg.policy.inference;
    if who.uid == 0 {
        return Some("root".into());
    }
    if who.uid == daemon_euid {
        return Some("same user as tandemd".into());
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

    fn who(uid: u32) -> Who {
        Who {
            pid: 10,
            uid,
            gid: 100,
            groups: vec![100, 44],
            exe: Some("/usr/bin/python3".into()),
            cgroup: Some("/serving.slice/a.service".into()),
        }
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
            uid: None,
            cgroup: None,
            class: GrantClass::Inference,
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
