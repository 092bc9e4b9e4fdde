//! Which containers get tandem and what they get: the library, the socket
//! and the environment, for containers that use an NVIDIA GPU, unless their
//! pod opts out (`tandem.io/inject: "false"`).

use crate::api::{Adjustment, Container, Mount, Pod};

/// Pod annotation: `"false"` keeps tandem out of the pod's containers.
pub const OPT_OUT: &str = "tandem.io/inject";
/// Pod annotation: the class the pod's jobs claim (`TANDEM_CLASS`); the
/// operator's `[policy]` still decides what is granted.
pub const CLASS: &str = "tandem.io/class";
/// Pod annotation: `TANDEM_SHARE_WEIGHTS` for the pod's jobs.
pub const SHARE_WEIGHTS: &str = "tandem.io/share-weights";

/// Where things are, on the host and in the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// Host directory holding `libtandem.so` (the DaemonSet installs it).
    pub host_lib_dir: String,
    /// Host directory holding tandemd's sockets.
    pub host_socket_dir: String,
    /// Where both appear in the container.
    pub container_lib_dir: String,
    /// See [`Paths::container_lib_dir`].
    pub container_socket_dir: String,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            host_lib_dir: "/var/lib/tandem/lib".into(),
            host_socket_dir: "/run/tandem".into(),
            container_lib_dir: "/usr/local/lib/tandem".into(),
            container_socket_dir: "/run/tandem".into(),
        }
    }
}

/// Why a container gets no tandem, or `None` when it does.
#[must_use]
pub fn skip_reason(pod: &Pod, c: &Container) -> Option<&'static str> {
    if pod
        .annotations
        .get(OPT_OUT)
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
    {
        return Some("pod annotation tandem.io/inject=false");
    }
    if !uses_gpu(c) {
        return Some("no NVIDIA GPU in the container");
    }
    None
}

fn env_of<'a>(c: &'a Container, key: &str) -> Option<&'a str> {
    c.env
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Whether the container has an NVIDIA GPU: a `/dev/nvidia<N>` device, a
/// `nvidia.com/gpu` CDI device, or `NVIDIA_VISIBLE_DEVICES` naming one (the
/// NVIDIA device plugin's and container toolkit's ways).
#[must_use]
pub fn uses_gpu(c: &Container) -> bool {
    let dev = c.devices.iter().any(|d| {
        d.strip_prefix("/dev/nvidia")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    let cdi = c
        .cdi_devices
        .iter()
        .any(|d| d.starts_with("nvidia.com/gpu="));
    let env = env_of(c, "NVIDIA_VISIBLE_DEVICES")
        .is_some_and(|v| !v.is_empty() && v != "void" && v != "none");
    dev || cdi || env
}

/// The adjustment for a container that gets tandem.
#[must_use]
pub fn adjustment(pod: &Pod, c: &Container, paths: &Paths) -> Adjustment {
    let lib = format!("{}/libtandem.so", paths.container_lib_dir);
    // Keep what the image preloads; ours goes first so it sees dlopen first.
    let preload = match env_of(c, "LD_PRELOAD").filter(|v| !v.trim().is_empty()) {
        Some(old) if old.split([' ', ':']).any(|x| x == lib) => old.to_string(),
        Some(old) => format!("{lib}:{old}"),
        None => lib,
    };
    let mut env = vec![
        ("LD_PRELOAD".to_string(), preload),
        (
            "TANDEM_SOCKET".to_string(),
            format!("{}/tandemd.sock", paths.container_socket_dir),
        ),
    ];
    for (ann, var) in [
        (CLASS, "TANDEM_CLASS"),
        (SHARE_WEIGHTS, "TANDEM_SHARE_WEIGHTS"),
    ] {
        if let (Some(v), None) = (pod.annotations.get(ann), env_of(c, var)) {
            env.push((var.to_string(), v.clone()));
        }
    }
    let ro = |host: &str, ctr: &str| Mount {
        destination: ctr.to_string(),
        source: host.to_string(),
        options: vec!["rbind".into(), "ro".into(), "nosuid".into(), "nodev".into()],
    };
    Adjustment {
        mounts: vec![
            ro(&paths.host_lib_dir, &paths.container_lib_dir),
            ro(&paths.host_socket_dir, &paths.container_socket_dir),
        ],
        env,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu_container(env: &[&str]) -> Container {
        Container {
            id: "c1".into(),
            name: "main".into(),
            env: env.iter().map(|s| (*s).to_string()).collect(),
            devices: vec!["/dev/nvidiactl".into(), "/dev/nvidia0".into()],
            ..Container::default()
        }
    }

    #[test]
    fn only_gpu_containers_of_pods_that_did_not_opt_out() {
        let pod = Pod::default();
        assert_eq!(skip_reason(&pod, &gpu_container(&[])), None);
        let no_gpu = Container {
            devices: vec!["/dev/nvidiactl".into()],
            env: vec!["NVIDIA_VISIBLE_DEVICES=void".into()],
            ..Container::default()
        };
        assert!(skip_reason(&pod, &no_gpu).is_some());
        let by_env = Container {
            env: vec!["NVIDIA_VISIBLE_DEVICES=GPU-1234".into()],
            ..Container::default()
        };
        assert!(uses_gpu(&by_env));
        let by_cdi = Container {
            cdi_devices: vec!["nvidia.com/gpu=0".into()],
            ..Container::default()
        };
        assert!(uses_gpu(&by_cdi));
        let mut out = Pod::default();
        out.annotations.insert(OPT_OUT.into(), "False".into());
        assert_eq!(
            skip_reason(&out, &gpu_container(&[])),
            Some("pod annotation tandem.io/inject=false")
        );
    }

    #[test]
    fn library_socket_and_environment() {
        let paths = Paths::default();
        let mut pod = Pod::default();
        pod.annotations.insert(CLASS.into(), "inference".into());
        pod.annotations.insert(SHARE_WEIGHTS.into(), "on".into());
        let a = adjustment(&pod, &gpu_container(&["TANDEM_SHARE_WEIGHTS=off"]), &paths);
        assert_eq!(a.mounts.len(), 2);
        assert_eq!(a.mounts[0].source, "/var/lib/tandem/lib");
        assert_eq!(a.mounts[0].destination, "/usr/local/lib/tandem");
        assert!(a
            .mounts
            .iter()
            .all(|m| m.options.contains(&"ro".to_string())));
        let env: std::collections::BTreeMap<_, _> = a.env.into_iter().collect();
        assert_eq!(env["LD_PRELOAD"], "/usr/local/lib/tandem/libtandem.so");
        assert_eq!(env["TANDEM_SOCKET"], "/run/tandem/tandemd.sock");
        assert_eq!(env["TANDEM_CLASS"], "inference");
        // The container's own setting wins over the pod's annotation.
        assert!(!env.contains_key("TANDEM_SHARE_WEIGHTS"));
        // An image's own preload is kept, after ours.
        let a = adjustment(
            &Pod::default(),
            &gpu_container(&["LD_PRELOAD=/opt/x.so"]),
            &paths,
        );
        assert_eq!(a.env[0].1, "/usr/local/lib/tandem/libtandem.so:/opt/x.so");
    }
}
