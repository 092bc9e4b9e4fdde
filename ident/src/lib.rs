//! Who a process is, as the kernel says, and the rules that match it.
//!
//! tandemd decides by identity in three places (who may claim the inference
//! class, which `[[scheduler.slo]]` target a job gets, which dedup trust group
//! it joins); they all match with what this crate holds, so a rule means the
//! same thing wherever it is written ([`Matcher`], declared in a rule with
//! [`rule!`]). Nothing here does I/O.

mod matcher;
mod placement;
mod slurm;

pub use matcher::Matcher;
pub use placement::{cgroup_of_proc, parse_cgroup_path, Placement, Runtime};
pub use slurm::{parse_slurm_path, SlurmStep};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_prefix_is_by_component() {
        assert!(cgroup_under("/a/b", "/a"));
        assert!(cgroup_under("/a", "/a/"));
        assert!(!cgroup_under("/ab", "/a"));
        assert!(cgroup_under("/x", "/"));
    }

    #[test]
    fn empty_lists_match_everything_and_filled_lists_need_a_value() {
        assert!(exe_and_cgroup_match(&[], &[], None, None));
        let exes = vec!["/usr/bin/python3".to_string()];
        assert!(!exe_and_cgroup_match(&exes, &[], None, None));
        assert!(exe_and_cgroup_match(
            &exes,
            &[],
            Some("/usr/bin/python3"),
            None
        ));
        assert!(!exe_and_cgroup_match(
            &exes,
            &[],
            Some("/usr/bin/python"),
            None
        ));
        let cgs = vec!["/kubepods".to_string()];
        assert!(exe_and_cgroup_match(
            &[],
            &cgs,
            None,
            Some("/kubepods/pod1")
        ));
        assert!(!exe_and_cgroup_match(&[], &cgs, None, Some("/kubepodsx")));
        assert!(!exe_and_cgroup_match(&[], &cgs, None, None));
    }
}
