//! What a rule is matched against (a job, its pod's metadata), and the tests of its parts
//! that every rule shares: selectors, cgroup prefixes, executables.

use std::collections::BTreeMap;

/// A pod's metadata as the node's injector recorded it from the container
/// runtime (never from the pod itself): what rules on namespaces, labels and
/// annotations match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMeta {
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
}

/// What a rule is matched against: a job as the kernel (and, for its pod,
/// the runtime) describes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Job<'a> {
    /// uid (SO_PEERCRED).
    pub uid: u32,
    /// `/proc/PID/exe`, if readable.
    pub exe: Option<&'a str>,
    /// The cgroup path, if readable.
    pub cgroup: Option<&'a str>,
    /// The pod's metadata, when the job runs in a pod the injector recorded.
    pub pod: Option<&'a PodMeta>,
}

/// Whether every `key = value` of `selector` is in `map` (an empty selector
/// holds for every map).
#[must_use]
pub fn selector_holds(selector: &BTreeMap<String, String>, map: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| map.get(k) == Some(v))
}

/// `prefix` is `path` or a parent of it (path components, not bytes).
#[must_use]
pub fn cgroup_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return true;
    }
    path == prefix || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// Whether a job running `exe`, in `cgroup`, meets a rule's executable and
/// cgroup criteria: each list that is not empty must hold the exact
/// executable, or a prefix of the cgroup ([`cgroup_under`]); an empty list
/// matches every job. (`[[scheduler.slo]]` and `[[dedup.group]]` entries.)
#[must_use]
pub fn exe_and_cgroup_match(
    executables: &[String],
    cgroups: &[String],
    exe: Option<&str>,
    cgroup: Option<&str>,
) -> bool {
    (executables.is_empty() || exe.is_some_and(|e| executables.iter().any(|x| x == e)))
        && (cgroups.is_empty()
            || cgroup.is_some_and(|c| cgroups.iter().any(|p| cgroup_under(c, p))))
}
