//! Where a process runs: its pod and container, read from its cgroup path.
//!
//! The kernel puts every container in a cgroup whose path names the pod and
//! the container; the layout depends on the kubelet's cgroup driver, the
//! container runtime and the cgroup version, but the pieces are always two
//! path components:
//!
//! | driver, runtime | pod component | container component |
//! | --- | --- | --- |
//! | cgroupfs, containerd or docker (v1 and v2) | `pod<uid>` | `<64 hex>` |
//! | cgroupfs, CRI-O | `pod<uid>` | `crio-<64 hex>` |
//! | systemd, containerd | `kubepods-<qos>-pod<uid_with_underscores>.slice` | `cri-containerd-<64 hex>.scope` |
//! | systemd, CRI-O | same | `crio-<64 hex>.scope` |
//! | systemd, docker / cri-dockerd | same | `docker-<64 hex>.scope` |
//!
//! A container outside Kubernetes has a container component and no pod:
//!
//! | runtime, driver | path |
//! | --- | --- |
//! | docker, cgroupfs | `/docker/<64 hex>` |
//! | docker, systemd | `/system.slice/docker-<64 hex>.scope` |
//! | podman, cgroupfs | `/libpod_parent/libpod-<64 hex>` (in a pod: `/libpod_parent/<pod id>/libpod-<64 hex>`) |
//! | podman, systemd | `/machine.slice/libpod-<64 hex>.scope` (in a pod: `machine-libpod_pod_<pod id>.slice/…`) |
//!
//! (podman: libpod's `CgroupfsDefaultCgroupParent = "/libpod_parent"` and
//! `SystemdDefaultCgroupParent = "machine.slice"`, with the container's
//! cgroup named `libpod-<id>` under either; its monitor is
//! `libpod-conmon-<id>.scope`, not the container.)
//!
//! A bare hex run is a container id only where a runtime puts one: below a
//! pod component, or below `docker`. Elsewhere it is someone else's name (a
//! sandbox's `/process_api/<32 hex>`, a service's instance id), so a hex
//! run alone never makes a process a container. The parser looks at
//! components, not at whole paths, so it also reads the paths a reader in
//! another cgroup namespace sees (`/../../kubepods-…-pod….slice/cri-…scope`),
//! nested hierarchies (kind's `/kubelet.slice/kubelet-kubepods.slice/…`), and
//! sub-cgroups a container makes below its own (`…/<id>.scope/init`).

/// The container runtime a container component names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// `cri-containerd-<id>.scope` (systemd driver).
    Containerd,
    /// `crio-<id>[.scope]`.
    CriO,
    /// `docker-<id>.scope` (docker, cri-dockerd) or `/docker/<id>`.
    Docker,
    /// `libpod-<id>[.scope]` (podman).
    Podman,
    /// A bare id (cgroupfs driver: containerd and docker look the same).
    Unknown,
}

impl Runtime {
    /// Lower-case name for stats.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Unknown => "unknown",
        }
    }
}

/// A process's pod and container, as its cgroup path names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The pod's UID in the API's form (dashes, lower case), if in a pod.
    pub pod_uid: Option<String>,
    /// The pod's QoS class from the path (`guaranteed` when the path has none).
    pub qos: Option<&'static str>,
    /// The container id (hex), if the path names one.
    pub container_id: Option<String>,
    /// Which runtime's naming the container component used.
    pub runtime: Option<Runtime>,
}

impl Placement {
    /// The container id's first 12 characters (what `crictl ps` shows).
    #[must_use]
    pub fn short_id(&self) -> Option<&str> {
        self.container_id
            .as_deref()
            .map(|id| &id[..id.len().min(12)])
    }
}

fn is_hex_id(s: &str) -> bool {
    (12..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_pod_uid(s: &str) -> bool {
    // API UIDs are dashed UUIDs; static (mirror) pods' are 32 hex digits.
    (8..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The QoS class a name of the pod's parent (or of the pod's slice) shows.
fn qos_of(s: &str) -> &'static str {
    if s.contains("besteffort") {
        "besteffort"
    } else if s.contains("burstable") {
        "burstable"
    } else {
        "guaranteed"
    }
}

/// The pod UID and QoS of pod component `c` below `parent`, if it is one.
fn pod_component(c: &str, parent: &str) -> Option<(String, &'static str)> {
    if let Some(uid) = c.strip_prefix("pod") {
        // cgroupfs: `…/<qos>/pod<uid>` (guaranteed: `kubepods/pod<uid>`).
        return is_pod_uid(uid).then(|| (uid.to_ascii_lowercase(), qos_of(parent)));
    }
    let stem = c.strip_suffix(".slice")?;
    // systemd: `…-pod<uid with _ for ->.slice`; the slice's own name
    // repeats its parents' (`kubepods-burstable-pod…`).
    let at = stem.rfind("-pod")?;
    let uid = stem[at + 4..].replace('_', "-");
    is_pod_uid(&uid).then(|| (uid.to_ascii_lowercase(), qos_of(&stem[..at])))
}

/// The container id and runtime of a container component, if it is one.
fn container_component(c: &str) -> Option<(String, Runtime)> {
    let stem = c.strip_suffix(".scope").unwrap_or(c);
    let (id, runtime) = if let Some(id) = stem.strip_prefix("cri-containerd-") {
        (id, Runtime::Containerd)
    } else if let Some(id) = stem.strip_prefix("crio-") {
        // `crio-conmon-<id>` is CRI-O's monitor process, not the container.
        (id, Runtime::CriO)
    } else if let Some(id) = stem
        .strip_prefix("docker-")
        .or_else(|| stem.strip_prefix("cri-dockerd-"))
    {
        (id, Runtime::Docker)
    } else if let Some(id) = stem.strip_prefix("libpod-") {
        // `libpod-conmon-<id>` is podman's monitor: not hex, so not taken.
        (id, Runtime::Podman)
    } else {
        (stem, Runtime::Unknown)
    };
    is_hex_id(id).then(|| (id.to_ascii_lowercase(), runtime))
}

/// The pod and container a cgroup path names; `None` when it names neither
/// (a host process, a systemd service).
#[must_use]
pub fn parse_cgroup_path(path: &str) -> Option<Placement> {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != "." && *c != "..")
        .collect();
    // The last pod component: a pod's own sub-cgroups come after it.
    let parent = |i: usize| if i == 0 { "" } else { comps[i - 1] };
    let pod_at = (0..comps.len())
        .rev()
        .find_map(|i| pod_component(comps[i], parent(i)).map(|p| (i, p)));
    let (pod_uid, qos, search_from) = match pod_at {
        Some((i, (uid, qos))) => (Some(uid), Some(qos), i + 1),
        None => (None, None, 0),
    };
    // The container is the first container-like component below the pod (a
    // container's own sub-cgroups follow it); outside a pod, the first one at
    // all. A bare id counts only where a runtime puts one: directly below the
    // pod, or below `docker` (`/docker/<id>`); anywhere else a hex run is
    // not a container id.
    let container = comps[search_from..].iter().enumerate().find_map(|(k, c)| {
        let (id, rt) = container_component(c)?;
        let i = search_from + k;
        match rt {
            Runtime::Unknown if i > 0 && comps[i - 1] == "docker" => Some((id, Runtime::Docker)),
            Runtime::Unknown if pod_uid.is_some() && i == search_from => Some((id, rt)),
            Runtime::Unknown => None,
            _ => Some((id, rt)),
        }
    });
    if pod_uid.is_none() && container.is_none() {
        return None;
    }
    let (container_id, runtime) = match container {
        Some((id, rt)) => (Some(id), Some(rt)),
        None => (None, None),
    };
    Some(Placement {
        pod_uid,
        qos,
        container_id,
        runtime,
    })
}

/// The cgroup path to identify a process by, from the text of its
/// `/proc/PID/cgroup`: the cgroup v2 path (`0::…`) when it names a pod, a
/// container or a Slurm job, else the first cgroup v1 line that does (on a
/// cgroup v1 or hybrid host the v2 line is just `/`, and Slurm's
/// `proctrack/cgroup` names the job only in the hierarchies it uses, such as
/// freezer, while memory may hold anything), else the v2 path, else the
/// first v1 path.
#[must_use]
pub fn cgroup_of_proc(text: &str) -> Option<String> {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if id == "0" && ctrl.is_empty() {
            v2 = Some(path);
        } else {
            v1.push(path);
        }
    }
    let names_one =
        |p: &&str| parse_cgroup_path(p).is_some() || crate::parse_slurm_path(p).is_some();
    v2.filter(names_one)
        .or_else(|| v1.iter().copied().find(names_one))
        .or(v2)
        .or_else(|| v1.first().copied())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376";
    const ID2: &str = "8a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9";
    const UID: &str = "74c13223-5a00-11e9-b385-42010a80018d";
    const UID_: &str = "74c13223_5a00_11e9_b385_42010a80018d";

    fn at(path: &str) -> Placement {
        parse_cgroup_path(path).unwrap_or_else(|| panic!("{path} names no container"))
    }

    fn check(path: &str, qos: &str, runtime: Runtime) {
        let p = at(path);
        assert_eq!(p.pod_uid.as_deref(), Some(UID), "{path}");
        assert_eq!(p.qos, Some(qos), "{path}");
        assert_eq!(p.container_id.as_deref(), Some(ID), "{path}");
        assert_eq!(p.runtime, Some(runtime), "{path}");
    }

    #[test]
    fn cgroupfs_driver_paths_v1_and_v2() {
        // The kubelet's cgroupfs driver: the same path in every v1 hierarchy
        // and in the v2 one (containerd, docker: bare id; CRI-O: crio-<id>).
        check(
            &format!("/kubepods/besteffort/pod{UID}/{ID}"),
            "besteffort",
            Runtime::Unknown,
        );
        check(
            &format!("/kubepods/burstable/pod{UID}/{ID}"),
            "burstable",
            Runtime::Unknown,
        );
        check(
            &format!("/kubepods/pod{UID}/{ID}"),
            "guaranteed",
            Runtime::Unknown,
        );
        check(
            &format!("/kubepods/burstable/pod{UID}/crio-{ID}"),
            "burstable",
            Runtime::CriO,
        );
    }

    #[test]
    fn systemd_driver_paths_per_runtime() {
        let pod =
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice");
        check(
            &format!("{pod}/cri-containerd-{ID}.scope"),
            "burstable",
            Runtime::Containerd,
        );
        check(
            &format!("{pod}/crio-{ID}.scope"),
            "burstable",
            Runtime::CriO,
        );
        check(
            &format!("{pod}/docker-{ID}.scope"),
            "burstable",
            Runtime::Docker,
        );
        // Guaranteed pods sit directly under kubepods.slice.
        check(
            &format!("/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope"),
            "guaranteed",
            Runtime::CriO,
        );
        check(
            &format!(
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope"
            ),
            "besteffort",
            Runtime::Containerd,
        );
    }

    #[test]
    fn nested_relative_and_sub_cgroup_paths() {
        // kind / nested kubelets prefix the hierarchy.
        check(
            &format!(
                "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"
            ),
            "burstable",
            Runtime::Containerd,
        );
        // Read from another cgroup namespace (tandemd in its own pod).
        check(
            &format!("/../../kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope"),
            "burstable",
            Runtime::Containerd,
        );
        // A container that made its own sub-cgroup (systemd in a container).
        check(
            &format!("/kubepods/burstable/pod{UID}/{ID}/init.scope"),
            "burstable",
            Runtime::Unknown,
        );
    }

    #[test]
    fn pods_without_containers_and_containers_without_pods() {
        // The pod's own cgroup (a process the runtime put there, e.g. the pause process's parent).
        let p = at(&format!("/kubepods/burstable/pod{UID}"));
        assert_eq!(p.pod_uid.as_deref(), Some(UID));
        assert_eq!(p.container_id, None);
        // Docker outside Kubernetes, both drivers.
        for path in [
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
        ] {
            let p = at(&path);
            assert_eq!(p.pod_uid, None, "{path}");
            assert_eq!(p.container_id.as_deref(), Some(ID), "{path}");
            assert_eq!(p.runtime, Some(Runtime::Docker), "{path}");
        }
        assert_eq!(at(&format!("/docker/{ID}")).short_id(), Some(&ID[..12]));
        // Static pods' UIDs are 32 hex digits.
        let st = "6d1b0c4a8d5b6a0e9f3c2b1a09876543";
        assert_eq!(
            at(&format!("/kubepods/pod{st}/{ID}")).pod_uid.as_deref(),
            Some(st)
        );
    }

    #[test]
    fn podman_paths_both_managers() {
        // podman 4.3 (Debian 12) as root with the cgroupfs manager on a
        // cgroup v1 host: libpod's default parent `/libpod_parent` and the
        // container's `libpod-<id>`; in a pod, the pod's id in between.
        for path in [
            format!("/libpod_parent/libpod-{ID}"),
            format!("/libpod_parent/{ID2}/libpod-{ID}"),
            // The systemd manager: `machine.slice/libpod-<id>.scope`, with a
            // sub-cgroup of its own on cgroup v2, and rootless under the
            // user's manager.
            format!("/machine.slice/libpod-{ID}.scope"),
            format!("/machine.slice/libpod-{ID}.scope/container"),
            format!("/machine.slice/machine-libpod_pod_{ID2}.slice/libpod-{ID}.scope"),
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"),
        ] {
            let p = at(&path);
            assert_eq!(p.pod_uid, None, "{path}");
            assert_eq!(p.container_id.as_deref(), Some(ID), "{path}");
            assert_eq!(p.runtime, Some(Runtime::Podman), "{path}");
        }
        // conmon, podman's monitor, is not the container.
        assert_eq!(
            parse_cgroup_path(&format!("/machine.slice/libpod-conmon-{ID}.scope")),
            None
        );
    }

    #[test]
    fn a_hex_run_outside_a_runtime_layout_is_no_container() {
        // This machine's own memory cgroup on cgroup v1 (a sandbox's
        // `/process_api/<32 hex>`), a service instance, a pod's id outside a
        // pod layout: none names a container.
        for path in [
            "/process_api/0123456789abcdef0123456789abcdef".to_string(),
            format!("/system.slice/app@{ID}.service"),
            format!("/system.slice/{ID}"),
            format!("/{ID}"),
            format!("/libpod_parent/{ID2}"),
        ] {
            assert_eq!(parse_cgroup_path(&path), None, "{path}");
        }
    }

    #[test]
    fn host_paths_name_nothing() {
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-3.scope",
            "/system.slice/containerd.service",
            "/system.slice/tandemd.service",
            "/kubepods.slice",
            "/kubepods/burstable",
            "/serving.slice/a.service",
            // A hex-looking service name in the middle is not a container.
            "/deadbeefdeadbeef/x",
            "/kubepods/podnot-a-uid!/x",
        ] {
            assert_eq!(parse_cgroup_path(path), None, "{path}");
        }
    }

    #[test]
    fn proc_cgroup_prefers_the_line_that_names_a_container() {
        // cgroup v2 only.
        let v2 = format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope\n");
        assert_eq!(cgroup_of_proc(&v2).as_deref(), Some(&v2[3..v2.len() - 1]));
        // Hybrid (v1 controllers + an empty v2 line), as on this kind of host.
        let hybrid = format!(
            "12:memory:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n0::/\n"
        );
        let got = cgroup_of_proc(&hybrid).unwrap();
        assert_eq!(at(&got).container_id.as_deref(), Some(ID));
        // A host process: the v2 path as it is.
        assert_eq!(
            cgroup_of_proc("1:name=systemd:/user.slice\n0::/user.slice/x.scope\n").as_deref(),
            Some("/user.slice/x.scope")
        );
        // cgroup v1 only, no v2 line.
        assert_eq!(
            cgroup_of_proc("3:cpu,cpuacct:/system.slice/a.service\n").as_deref(),
            Some("/system.slice/a.service")
        );
        assert_eq!(cgroup_of_proc(""), None);
    }

    #[test]
    fn proc_cgroup_on_v1_takes_the_slurm_job_over_the_memory_cgroup() {
        // A task of Slurm job 6 (proctrack/cgroup, cgroup/v1) on a hybrid
        // host whose memory hierarchy holds the machine's own sandbox
        // cgroup: the freezer line names the job.
        let text = "13:memory:/process_api/0123456789abcdef0123456789abcdef\n\
                    7:freezer:/slurm_vm/uid_0/job_6/step_0\n\
                    1:name=systemd:/init.scope\n0::/\n";
        assert_eq!(
            cgroup_of_proc(text).as_deref(),
            Some("/slurm_vm/uid_0/job_6/step_0")
        );
        // cgroup/v2: the v2 line itself.
        let v2 = "0::/system.slice/slurmstepd.scope/job_6/step_0/user/task_0\n";
        assert_eq!(
            cgroup_of_proc(v2).as_deref(),
            Some("/system.slice/slurmstepd.scope/job_6/step_0/user/task_0")
        );
    }
}
