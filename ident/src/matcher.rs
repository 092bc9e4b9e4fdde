//! One matcher for every rule that names jobs by uid, executable and cgroup:
//! `[[dedup.group]]` (trust groups), `[[scheduler.slo]]` (p99 targets) and
//! `[[policy.override]]` (operator overrides).
//!
//! A rule keeps its criteria as plain fields, so that `serde` reads them with
//! the rule's own `deny_unknown_fields` and points an error at the key that
//! caused it (`#[serde(flatten)]` would lose both). [`rule!`](crate::rule)
//! declares those fields once, with the same TOML keys everywhere (`uids`,
//! `executables`, `cgroups`); [`Matcher`] is the one view of them that
//! decides a match.

/// A rule's criteria, borrowed from the rule: a job matches when every
/// criterion that is not empty matches (a criterion matches when any of its
/// entries does); a matcher with no criteria matches every job.
///
/// * user: the uid is in `uids` or in `user_uids` (one criterion);
/// * executable: the exact path is in `executables`;
/// * cgroup: a prefix in `cgroups` holds the cgroup ([`cgroup_under`](crate::cgroup_under)).
///
/// Identity is the kernel's (SO_PEERCRED, `/proc`): a criterion tandemd could
/// not check (an unreadable `/proc` entry, `None`) does not match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Matcher<'a> {
    /// Numeric user ids.
    pub uids: &'a [u32],
    /// User ids resolved from user names (one criterion with `uids`).
    pub user_uids: &'a [u32],
    /// Exact executable paths (`/proc/PID/exe`).
    pub executables: &'a [String],
    /// cgroup v2 path prefixes (whole path components).
    pub cgroups: &'a [String],
}

impl Matcher<'_> {
    /// Whether the matcher names no criterion at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.uids.is_empty()
            && self.user_uids.is_empty()
            && self.executables.is_empty()
            && self.cgroups.is_empty()
    }

    /// Whether a job of `uid`, running `exe`, in `cgroup`, matches.
    #[must_use]
    pub fn matches(&self, uid: u32, exe: Option<&str>, cgroup: Option<&str>) -> bool {
        let user = (self.uids.is_empty() && self.user_uids.is_empty())
            || self.uids.contains(&uid)
            || self.user_uids.contains(&uid);
        user && crate::exe_and_cgroup_match(self.executables, self.cgroups, exe, cgroup)
    }
}

/// Declare a rule struct that names jobs: the struct as written, followed by
/// the matcher's fields (TOML keys `uids`, `executables`, `cgroups`, each
/// optional, default empty), and `fn matcher(&self) -> Matcher<'_>` over
/// them. The caller derives `Deserialize` (and its `serde` attributes) as for
/// any struct: the fields are plain fields, so `deny_unknown_fields` and
/// error positions work as if written by hand.
///
/// A field named `user_uids: Vec<u32>` is not special here; a rule with user
/// names resolves them itself and adds them with
/// [`Matcher::user_uids`](crate::Matcher::user_uids).
#[macro_export]
macro_rules! rule {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($body:tt)*
        }
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
            pub fn matcher(&self) -> $crate::Matcher<'_> {
                $crate::Matcher {
                    uids: &self.uids,
                    user_uids: &[],
                    executables: &self.executables,
                    cgroups: &self.cgroups,
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
