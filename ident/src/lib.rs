//! Who a process is, as the kernel says, and the rules that match it.
//!
//! tandemd decides by identity in three places (who may claim the inference
//! class, which `[[scheduler.slo]]` target a job gets, which dedup trust group
//! it joins); they all match with what this crate holds, so a rule means the
//! same thing wherever it is written ([`Matcher`], declared in a rule with
//! [`rule!`]). Nothing here does I/O.

mod job;
mod matcher;
mod placement;
mod slurm;

pub use job::{cgroup_under, exe_and_cgroup_match, selector_holds, Job, PodMeta};
pub use matcher::Matcher;
pub use placement::{cgroup_of_proc, parse_cgroup_path, Placement, Runtime};
pub use slurm::{parse_slurm_path, SlurmStep};

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
