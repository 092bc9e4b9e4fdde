//! Identity in containers: whether a peer runs in a container (then its root
//! is not the host's root: contract 5), its pod and container from its cgroup
//! path ([`tandem_ident::parse_cgroup_path`]), and its pod's metadata as the
//! node's injector recorded it (`[kubernetes] pod_info_dir`).
//!
//! The pod metadata comes from files the injector (`tandem-nri`, an NRI
//! plugin that gets it from the container runtime) writes as
//! `<pod_info_dir>/<pod uid>.json`; a job cannot write there, and a file not
//! owned by root or by tandemd's user, or writable by others, is ignored with
//! a warning. Nothing a job says about itself is used.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use tandem_ident::{Placement, PodMeta};
use tracing::warn;

/// Where tandem-nri writes pod records by default (`--records`) and where the
/// chart mounts them (`hostPaths.podInfoDir`): tandemd looks there unless told
/// otherwise, so a hand install beside tandem-nri needs no config line.
pub const DEFAULT_POD_INFO_DIR: &str = "/run/tandem-pods";

/// `[kubernetes]` in tandemd.toml.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// Where the injector records each pod's metadata (default
    /// [`DEFAULT_POD_INFO_DIR`]; "" = nowhere: rules on namespaces, labels
    /// and annotations then match no job). A directory that does not exist
    /// holds no records.
    pub pod_info_dir: String,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        KubernetesConfig {
            pod_info_dir: DEFAULT_POD_INFO_DIR.into(),
        }
    }
}

/// One `<pod uid>.json` as the injector writes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodInfo {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Container names by container id.
    pub containers: BTreeMap<String, String>,
}

/// The pod side of a client, as `GET /stats` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSnapshot {
    /// Pod UID (from the cgroup path).
    pub uid: Option<String>,
    /// Namespace (from the injector's record).
    pub namespace: Option<String>,
    /// Pod name (from the injector's record).
    pub name: Option<String>,
    /// Container name (from the injector's record).
    pub container: Option<String>,
    /// Container id (from the cgroup path).
    pub container_id: Option<String>,
    /// The runtime whose naming the cgroup path used.
    pub runtime: Option<String>,
}

/// What tandemd knows about the container a peer runs in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerView {
    /// Its pod and container, from the cgroup path.
    pub placement: Option<Placement>,
    /// Runs in a container (see [`contained`]): its root is not privileged.
    pub contained: bool,
    /// Its pid namespace (inode), if readable.
    pub pidns: Option<u64>,
    /// Its pod's metadata (namespace, labels, annotations), if recorded.
    pub pod: Option<PodMeta>,
    /// Its container's name, if recorded.
    pub container_name: Option<String>,
}

impl ContainerView {
    /// The stats' view.
    #[must_use]
    pub fn snapshot(&self) -> Option<PodSnapshot> {
        if self.placement.is_none() && self.pod.is_none() {
            return None;
        }
        let p = self.placement.as_ref();
        Some(PodSnapshot {
            uid: p.and_then(|p| p.pod_uid.clone()),
            namespace: self.pod.as_ref().map(|m| m.namespace.clone()),
            name: self.pod.as_ref().map(|m| m.name.clone()),
            container: self.container_name.clone(),
            container_id: p.and_then(|p| p.container_id.clone()),
            runtime: p.and_then(|p| p.runtime).map(|r| r.name().to_string()),
        })
    }

    /// The default trust group of a contained process (`None`: not
    /// contained): its pod, else its container, else its pid namespace, so
    /// that two root containers never share one by default.
    #[must_use]
    pub fn default_group(&self) -> Option<String> {
        if !self.contained {
            return None;
        }
        let p = self.placement.as_ref();
        if let Some(uid) = p.and_then(|p| p.pod_uid.as_deref()) {
            return Some(format!("pod:{uid}"));
        }
        if let Some(id) = p.and_then(Placement::short_id) {
            return Some(format!("container:{id}"));
        }
        Some(match self.pidns {
            Some(ns) => format!("pidns:{ns}"),
            None => "container:unknown".to_string(),
        })
    }
}

/// The pid namespace inode of `/proc/<pid>` (`pid` = "self" for tandemd).
fn pidns_of(pid: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Whether `pid` has no `/proc` entry now (pid 0: the kernel gave none):
/// the peer exited (its pid may soon be another's), so what was or was not
/// read about it does not say where it ran. Asked after the reads, so a
/// peer that left while they ran is caught too. Said by the caller that
/// admits the peer (`crate::admission`: this module logs nothing, as
/// `crate::logging` reads the configuration, which names this module's
/// types).
pub fn gone(pid: u32) -> bool {
    let gone = pid == 0
        || matches!(
            std::fs::symlink_metadata(format!("/proc/{pid}/ns/pid")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        );
    gone
}

/// tandemd's own pid namespace and placement (read once).
fn own() -> &'static (Option<u64>, Option<Placement>) {
    static OWN: OnceLock<(Option<u64>, Option<Placement>)> = OnceLock::new();
    OWN.get_or_init(|| {
        let placement = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| tandem_ident::cgroup_of_proc(&t))
            .and_then(|c| tandem_ident::parse_cgroup_path(&c));
        (pidns_of("self"), placement)
    })
}

/// Whether `p` is in tandemd's own pod (or, outside pods, its own container).
fn same_place(p: &Placement, own: Option<&Placement>) -> bool {
    let Some(own) = own else { return false };
    match (&p.pod_uid, &own.pod_uid) {
        (Some(a), Some(b)) => a == b,
        (None, None) => p.container_id == own.container_id,
        _ => false,
    }
}

/// Whether a peer in pid namespace `peer_ns`, placed at `placement`, runs in
/// a container as tandemd sees it (`own_ns`, `own`: tandemd's own): a pid
/// namespace other than tandemd's, or a pod or container cgroup other than
/// tandemd's own (an operator's `kubectl exec` into tandemd's pod is the
/// node's operator). Unknown namespaces count as the same.
#[must_use]
pub fn contained(
    peer_ns: Option<u64>,
    placement: Option<&Placement>,
    own_ns: Option<u64>,
    own: Option<&Placement>,
) -> bool {
    let other_ns = matches!((peer_ns, own_ns), (Some(a), Some(b)) if a != b);
    let other_place = placement.is_some_and(|p| !same_place(p, own));
    other_ns || other_place
}

/// Whether process `pid` runs in a container (see [`contained`]), from
/// its `/proc` entries.
#[must_use]
pub fn pid_contained(pid: u32) -> bool {
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|t| tandem_ident::cgroup_of_proc(&t));
    // No pod metadata directory: nothing but the placement is read.
    view(pid, cgroup.as_deref(), "", 0).contained
}

/// The container view of `pid`, whose cgroup path is `cgroup`, with pod
/// metadata from `pod_info_dir` ("" = none), for a daemon running as `euid`.
#[must_use]
pub fn view(pid: u32, cgroup: Option<&str>, pod_info_dir: &str, euid: u32) -> ContainerView {
    let placement = cgroup.and_then(tandem_ident::parse_cgroup_path);
    let pidns = pidns_of(&pid.to_string());
    let (own_ns, own_place) = own();
    // A peer gone before it could be placed counts as contained: an
    // unknown place is not the node's (it fails closed).
    let contained = contained(pidns, placement.as_ref(), *own_ns, own_place.as_ref()) || gone(pid);
    let info = placement
        .as_ref()
        .and_then(|p| p.pod_uid.as_deref())
        .filter(|_| !pod_info_dir.is_empty())
        .and_then(|uid| read_pod_info(Path::new(pod_info_dir), uid, euid));
    let container_name = info.as_ref().and_then(|i| {
        let id = placement.as_ref()?.container_id.as_deref()?;
        i.containers.get(id).cloned()
    });
    ContainerView {
        pod: info.map(|i| PodMeta {
            namespace: i.namespace,
            name: i.name,
            uid: i.uid,
            labels: i.labels,
            annotations: i.annotations,
        }),
        placement,
        contained,
        pidns,
        container_name,
    }
}

/// `<dir>/<uid>.json`, if present, trusted (owned by root or `euid`, not
/// writable by group or others) and about pod `uid`.
#[must_use]
pub fn read_pod_info(dir: &Path, uid: &str, euid: u32) -> Option<PodInfo> {
    // The uid came from a cgroup path: hex and dashes only, no path tricks.
    if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return None;
    }
    let path = dir.join(format!("{uid}.json"));
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || (meta.uid() != 0 && meta.uid() != euid) || meta.mode() & 0o022 != 0 {
        warn!(
            "ignoring {}: pod records must be regular files owned by root or tandemd's user and writable by no one else",
            path.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str::<PodInfo>(&text) {
        Ok(info) if info.uid == uid => Some(info),
        Ok(info) => {
            warn!(
                "ignoring {}: it describes pod {:?}",
                path.display(),
                info.uid
            );
            None
        }
        Err(e) => {
            warn!("ignoring {}: {e}", path.display());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const ID: &str = "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376";

    fn placed(pod: Option<&str>) -> Placement {
        Placement {
            pod_uid: pod.map(str::to_string),
            qos: None,
            container_id: Some(ID.into()),
            runtime: None,
        }
    }

    #[test]
    fn containers_are_other_pid_namespaces_or_other_pods() {
        // A host process beside a host tandemd.
        assert!(!contained(Some(1), None, Some(1), None));
        // Its own pid namespace (unshare -p, a pod): contained.
        assert!(contained(Some(2), None, Some(1), None));
        // A pod's cgroup, even sharing the host pid namespace (hostPID pods).
        assert!(contained(Some(1), Some(&placed(Some("a"))), Some(1), None));
        // tandemd's own pod (kubectl exec into it): the operator.
        let own = placed(Some("a"));
        assert!(!contained(
            Some(1),
            Some(&placed(Some("a"))),
            Some(1),
            Some(&own)
        ));
        assert!(contained(
            Some(1),
            Some(&placed(Some("b"))),
            Some(1),
            Some(&own)
        ));
        // A container with no pod (docker), and tandemd's own container.
        assert!(contained(Some(1), Some(&placed(None)), Some(1), None));
        assert!(!contained(
            Some(1),
            Some(&placed(None)),
            Some(1),
            Some(&placed(None))
        ));
        assert!(contained(Some(1), Some(&placed(None)), Some(1), Some(&own)));
    }

    #[test]
    fn default_groups_are_per_pod_then_container_then_pid_namespace() {
        let mut v = ContainerView {
            placement: Some(placed(Some("uid-1"))),
            contained: true,
            pidns: Some(9),
            ..ContainerView::default()
        };
        assert_eq!(v.default_group().as_deref(), Some("pod:uid-1"));
        v.placement = Some(placed(None));
        assert_eq!(v.default_group(), Some(format!("container:{}", &ID[..12])));
        v.placement = None;
        assert_eq!(v.default_group().as_deref(), Some("pidns:9"));
        v.contained = false;
        assert_eq!(v.default_group(), None);
    }

    /// The default is where tandem-nri writes and the chart mounts records, so
    /// a tandemd.toml without `[kubernetes]` (a hand install) still finds them.
    #[test]
    fn pod_records_are_found_where_the_chart_and_the_injector_put_them() {
        let cfg = crate::config::Config::parse("", Path::new("/etc/tandem/tandemd.toml")).unwrap();
        assert_eq!(cfg.kubernetes.pod_info_dir, DEFAULT_POD_INFO_DIR);
        let values = include_str!("../../deploy/helm/tandem/values.yaml");
        assert!(
            values
                .lines()
                .any(|l| l.trim() == format!("podInfoDir: {DEFAULT_POD_INFO_DIR}")),
            "the chart's hostPaths.podInfoDir is not {DEFAULT_POD_INFO_DIR}"
        );
        let nri = include_str!("../../inject/src/main.rs");
        assert!(
            nri.contains(&format!("PathBuf::from(\"{DEFAULT_POD_INFO_DIR}\")")),
            "tandem-nri's default --records is not {DEFAULT_POD_INFO_DIR}"
        );
    }

    #[test]
    fn pod_records_are_read_only_when_trusted() {
        let dir = std::env::temp_dir().join(format!("tandem-podinfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uid = "74c13223-5a00-11e9-b385-42010a80018d";
        let path = dir.join(format!("{uid}.json"));
        let body = format!(
            r#"{{"namespace":"serving","name":"llm-0","uid":"{uid}","labels":{{"app":"llm"}},"containers":{{"{ID}":"server"}}}}"#
        );
        std::fs::write(&path, &body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let info = read_pod_info(&dir, uid, euid).expect("trusted record");
        assert_eq!(info.namespace, "serving");
        assert_eq!(info.containers.get(ID).map(String::as_str), Some("server"));
        // Writable by others: ignored.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_pod_info(&dir, uid, euid), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Owned by someone else (here: tandemd pretends another euid, and
        // the file is not root's unless the test runs as root).
        if euid != 0 {
            assert_eq!(read_pod_info(&dir, uid, euid + 1), None);
        }
        // A path trick in the uid, and a record about another pod.
        assert_eq!(read_pod_info(&dir, "../x", euid), None);
        let other = "00000000-0000-0000-0000-000000000000";
        std::fs::write(dir.join(format!("{other}.json")), &body).unwrap();
        assert_eq!(read_pod_info(&dir, other, euid), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
