//! One matcher for every rule that names jobs by uid, executable and cgroup:
//! `[[dedup.group]]` (trust groups), `[[scheduler.slo]]` (p99 targets) and
//! `[[policy.override]]` (operator overrides).
//!
//! A rule keeps its criteria as plain fields, so that `serde` reads them with
//! the rule's own `deny_unknown_fields` and points an error at the key that
//! caused it (`#[serde(flatten)]` would lose both). [`rule!`](crate::rule)
//! declares those fields once, with the same TOML keys everywhere (`uids`,
//! `executables`, `cgroups`, and for jobs in pods `namespaces`, `pod_labels`,
//! `pod_annotations`); [`Matcher`] is the one view of them that decides a
//! match.

use std::collections::BTreeMap;

use crate::job::{selector_holds, Job};

static NO_SELECTOR: BTreeMap<String, String> = BTreeMap::new();

/// A rule's criteria, borrowed from the rule: a job matches when every
/// criterion that is not empty matches (a criterion matches when any of its
/// entries does); a matcher with no criteria matches every job.
///
/// * user: the uid is in `uids` or in `user_uids` (one criterion);
/// * executable: the exact path is in `executables`;
/// * cgroup: a prefix in `cgroups` holds the cgroup ([`cgroup_under`](crate::cgroup_under));
/// * namespace: the job's pod is in one of `namespaces`;
/// * pod labels / annotations: the pod has every `key = value` listed.
///
/// Identity is the kernel's (SO_PEERCRED, `/proc`) and, for a pod, the
/// container runtime's as the injector recorded it: a criterion tandemd could
/// not check (an unreadable `/proc` entry, a job in no recorded pod) does not
/// match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matcher<'a> {
    /// Numeric user ids.
    pub uids: &'a [u32],
    /// User ids resolved from user names (one criterion with `uids`).
    pub user_uids: &'a [u32],
    /// Exact executable paths (`/proc/PID/exe`).
    pub executables: &'a [String],
    /// cgroup v2 path prefixes (whole path components).
    pub cgroups: &'a [String],
    /// Kubernetes namespaces of the job's pod.
    pub namespaces: &'a [String],
    /// Labels the job's pod must carry.
    pub pod_labels: &'a BTreeMap<String, String>,
    /// Annotations the job's pod must carry.
    pub pod_annotations: &'a BTreeMap<String, String>,
}

impl Default for Matcher<'_> {
    fn default() -> Self {
        Matcher {
            uids: &[],
            user_uids: &[],
            executables: &[],
            cgroups: &[],
            namespaces: &[],
            pod_labels: &NO_SELECTOR,
            pod_annotations: &NO_SELECTOR,
        }
    }
}

impl Matcher<'_> {
    /// Whether the matcher names no criterion at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.uids.is_empty()
            && self.user_uids.is_empty()
            && self.executables.is_empty()
            && self.cgroups.is_empty()
            && !self.names_pod()
    }

    /// Whether it names a pod criterion (namespaces, labels, annotations).
    #[must_use]
    pub fn names_pod(&self) -> bool {
        !self.namespaces.is_empty()
            || !self.pod_labels.is_empty()
            || !self.pod_annotations.is_empty()
    }

    /// Whether a job of `uid`, running `exe`, in `cgroup`, in no known pod,
    /// matches (a pod criterion never does).
    #[must_use]
    pub fn matches(&self, uid: u32, exe: Option<&str>, cgroup: Option<&str>) -> bool {
        self.matches_job(&Job {
            uid,
            exe,
            cgroup,
            pod: None,
        })
    }

    /// Whether `job` matches.
    #[must_use]
    pub fn matches_job(&self, job: &Job<'_>) -> bool {
        let user = (self.uids.is_empty() && self.user_uids.is_empty())
            || self.uids.contains(&job.uid)
            || self.user_uids.contains(&job.uid);
        let pod = !self.names_pod()
            || job.pod.is_some_and(|p| {
                (self.namespaces.is_empty() || self.namespaces.contains(&p.namespace))
                    && selector_holds(self.pod_labels, &p.labels)
                    && selector_holds(self.pod_annotations, &p.annotations)
            });
        user && pod
            && crate::exe_and_cgroup_match(self.executables, self.cgroups, job.exe, job.cgroup)
    }
}

/// Declare a rule struct that names jobs: the struct as written, followed by
/// the matcher's fields (TOML keys `uids`, `executables`, `cgroups`, and
/// after a leading `pods;` also `namespaces`, `pod_labels`,
/// `pod_annotations`; each optional, default empty), and `fn matcher(&self) -> Matcher<'_>` over
/// them. The caller derives `Deserialize` (and its `serde` attributes) as for
/// any struct: the fields are plain fields, so `deny_unknown_fields` and
/// error positions work as if written by hand.
///
/// A field named `user_uids: Vec<u32>` is not special here; a rule with user
/// names resolves them itself and adds them with
/// [`Matcher::user_uids`](crate::Matcher::user_uids).
#[macro_export]
macro_rules! rule {
    // `pods;`: also the pod criteria (`namespaces`, `pod_labels`,
    // `pod_annotations`), for rules matched with `Matcher::matches_job`.
    (
        pods;
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($body:tt)*
        }
    ) => {
        $crate::rule! {
            $(#[$meta])*
            $vis struct $name {
                $($body)*
                /// Kubernetes namespaces (criterion: the job's pod is in one of them).
                #[serde(default)]
                pub namespaces: ::std::vec::Vec<::std::string::String>,
                /// Pod labels (criterion: the job's pod carries all of them).
                #[serde(default)]
                pub pod_labels: ::std::collections::BTreeMap<::std::string::String, ::std::string::String>,
                /// Pod annotations (criterion: the job's pod carries all of them).
                #[serde(default)]
                pub pod_annotations: ::std::collections::BTreeMap<::std::string::String, ::std::string::String>,
            }
            matcher { namespaces, pod_labels, pod_annotations }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($body:tt)*
        }
        $(matcher { $($pod:ident),* })?
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($body)*
            /// Numeric user ids (criterion: the job's uid is one of them).
            #[serde(default)]
            pub uids: ::std::vec::Vec<u32>,
            /// Exact executable paths (`/proc/PID/exe`; criterion: the job's is one of them).
            #[serde(default)]
            pub executables: ::std::vec::Vec<::std::string::String>,
            /// cgroup v2 path prefixes, whole path components (criterion: one holds the job's cgroup).
            #[serde(default)]
            pub cgroups: ::std::vec::Vec<::std::string::String>,
        }

        impl $name {
            /// This rule's criteria as a `tandem_ident::Matcher`.
            #[must_use]
            // With `pods;` every field is named and the update is moot.
            #[allow(clippy::needless_update)]
            pub fn matcher(&self) -> $crate::Matcher<'_> {
                $crate::Matcher {
                    uids: &self.uids,
                    user_uids: &[],
                    executables: &self.executables,
                    cgroups: &self.cgroups,
                    $($($pod: &self.$pod,)*)?
                    ..$crate::Matcher::default()
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_string()).collect()
    }

    #[test]
    fn every_named_criterion_must_match() {
        let exes = strings(&["/usr/bin/python3"]);
        let cgs = strings(&["/kubepods"]);
        let m = Matcher {
            uids: &[7],
            executables: &exes,
            cgroups: &cgs,
            ..Matcher::default()
        };
        assert!(m.matches(7, Some("/usr/bin/python3"), Some("/kubepods/pod1")));
        assert!(!m.matches(8, Some("/usr/bin/python3"), Some("/kubepods/pod1")));
        assert!(!m.matches(7, Some("/usr/bin/python"), Some("/kubepods/pod1")));
        assert!(!m.matches(7, Some("/usr/bin/python3"), Some("/other")));
        assert!(
            !m.matches(7, None, Some("/kubepods/pod1")),
            "unreadable exe"
        );
        assert!(!m.is_empty());
    }

    #[test]
    fn pod_criteria_match_only_jobs_in_a_recorded_pod() {
        let ns = strings(&["serving"]);
        let mut labels = BTreeMap::new();
        labels.insert("app".to_string(), "llm".to_string());
        let m = Matcher {
            namespaces: &ns,
            pod_labels: &labels,
            ..Matcher::default()
        };
        assert!(!m.is_empty() && m.names_pod());
        let mut pod = crate::PodMeta {
            namespace: "serving".into(),
            labels: labels.clone(),
            ..crate::PodMeta::default()
        };
        pod.labels.insert("tier".into(), "a".into());
        let job = |pod| Job {
            uid: 0,
            pod,
            ..Job::default()
        };
        assert!(m.matches_job(&job(Some(&pod))));
        // No pod known: the criterion cannot be checked, so no match (also
        // through the pod-less entry point).
        assert!(!m.matches_job(&job(None)));
        assert!(!m.matches(0, None, None));
        let other_ns = crate::PodMeta {
            namespace: "batch".into(),
            ..pod.clone()
        };
        assert!(!m.matches_job(&job(Some(&other_ns))));
        let other_label = crate::PodMeta {
            labels: BTreeMap::from([("app".to_string(), "train".to_string())]),
            ..pod.clone()
        };
        assert!(!m.matches_job(&job(Some(&other_label))));
    }

    #[test]
    fn no_criteria_match_everyone_and_user_names_join_the_uids() {
        let m = Matcher::default();
        assert!(m.is_empty());
        assert!(m.matches(0, None, None));
        let m = Matcher {
            uids: &[1],
            user_uids: &[2],
            ..Matcher::default()
        };
        assert!(m.matches(1, None, None) && m.matches(2, None, None));
        assert!(!m.matches(3, None, None));
        let by_name_only = Matcher {
            user_uids: &[2],
            ..Matcher::default()
        };
        assert!(!by_name_only.is_empty());
        assert!(!by_name_only.matches(1, None, None));
    }
}
