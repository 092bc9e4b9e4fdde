//! The Slurm job and step a process runs in, read from its cgroup path.
//!
//! With `proctrack/cgroup` (and `task/cgroup`) slurmd's step daemon puts
//! every task in a cgroup named for its job and step:
//!
//! | cgroup plugin | path |
//! | --- | --- |
//! | `cgroup/v1` (freezer, cpuset, memory, devices hierarchies) | `/slurm/uid_<uid>/job_<id>/step_<step>[/task_<n>]` |
//! | `cgroup/v1`, several slurmd per host | `/slurm_<node>/uid_<uid>/job_<id>/step_<step>…` |
//! | `cgroup/v2` | `/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>` |
//! | `cgroup/v2`, several slurmd per host | `/system.slice/<node>_slurmstepd.scope/job_<id>/…` |
//!
//! (Slurm's "Control Group v2 plugin" page, slurm.schedmd.com/cgroup_v2.html,
//! section on the cgroup hierarchy; its cgroup v1 layout in
//! slurm.schedmd.com/cgroups.html and `src/plugins/cgroup/v1`.) `<step>` is a
//! number or `batch`, `extern`, `interactive`. The job id is only taken
//! where this layout puts it, from the root of the hierarchy: `/slurm[_<node>]/
//! uid_<n>/job_<id>` or `/system.slice/[<node>_]slurmstepd.scope/job_<id>`.
//! Only root creates cgroups there; anywhere else (a user's delegated
//! subtree on cgroup v2, where anyone may name a cgroup `slurmstepd.scope`)
//! or in a path seen from another cgroup namespace (`/../…`) it is not
//! taken, so a process cannot pass itself off as a Slurm job.

/// A Slurm job step as its cgroup path names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmStep {
    /// The job id.
    pub job: u64,
    /// The step (`0`, `batch`, `extern`, …), if the path goes that deep.
    pub step: Option<String>,
    /// The job's uid, where the path names it (cgroup v1).
    pub uid: Option<u32>,
}

fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

fn is_slurm_v1_root(c: &str) -> bool {
    c == "slurm" || c.strip_prefix("slurm_").is_some_and(|n| !n.is_empty())
}

fn is_stepd_scope(c: &str) -> bool {
    c == "slurmstepd.scope" || c.ends_with("_slurmstepd.scope")
}

/// The Slurm job step a cgroup path names; `None` for any other path.
#[must_use]
pub fn parse_slurm_path(path: &str) -> Option<SlurmStep> {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if comps.contains(&"..") {
        return None;
    }
    let (root, parent, job) = (comps.first()?, comps.get(1)?, comps.get(2)?);
    let uid = if *root == "system.slice" && is_stepd_scope(parent) {
        None
    } else if is_slurm_v1_root(root) {
        Some(number::<u32>(parent.strip_prefix("uid_")?)?)
    } else {
        return None;
    };
    let job = number::<u64>(job.strip_prefix("job_")?)?;
    let step = comps
        .get(3)
        .and_then(|c| c.strip_prefix("step_"))
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Some(SlurmStep { job, step, uid })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(job: u64, step: &str, uid: Option<u32>) -> Option<SlurmStep> {
        Some(SlurmStep {
            job,
            step: Some(step.into()),
            uid,
        })
    }

    #[test]
    fn cgroup_v1_freezer_and_cpuset_paths() {
        // slurmd 22.05 with proctrack/cgroup on cgroup v1: the freezer line
        // of a task of `srun` job 6 as root, on a host whose slurmd runs
        // with node name "vm" (`slurm_<node>`), and the plain layout.
        assert_eq!(
            parse_slurm_path("/slurm_vm/uid_0/job_6/step_0"),
            step(6, "0", Some(0))
        );
        assert_eq!(
            parse_slurm_path("/slurm/uid_1000/job_6/step_0/task_0"),
            step(6, "0", Some(1000))
        );
        assert_eq!(
            parse_slurm_path("/slurm/uid_1000/job_42/step_batch"),
            step(42, "batch", Some(1000))
        );
        // The job's own cgroup (the extern step's parent).
        assert_eq!(
            parse_slurm_path("/slurm/uid_1000/job_42"),
            Some(SlurmStep {
                job: 42,
                step: None,
                uid: Some(1000)
            })
        );
    }

    #[test]
    fn cgroup_v2_paths() {
        // cgroup/v2: a task of step 0 of job 6, and slurmstepd's own cgroup.
        assert_eq!(
            parse_slurm_path("/system.slice/slurmstepd.scope/job_6/step_0/user/task_0"),
            step(6, "0", None)
        );
        assert_eq!(
            parse_slurm_path("/system.slice/slurmstepd.scope/job_6/step_extern/slurm"),
            step(6, "extern", None)
        );
        // Several slurmd on one host: `<node>_slurmstepd.scope`.
        assert_eq!(
            parse_slurm_path("/system.slice/n1_slurmstepd.scope/job_7/step_batch/user/task_0"),
            step(7, "batch", None)
        );
    }

    #[test]
    fn job_components_outside_the_layout_name_nothing() {
        for path in [
            "/",
            "/system.slice/slurmd.service",
            "/system.slice/slurmstepd.scope/system",
            "/user.slice/job_6/step_0",
            "/uid_0/job_6/step_0",
            "/other/uid_0/job_6",
            "/slurm/uid_x/job_6",
            "/slurm/uid_0/job_/step_0",
            "/slurm/uid_0/job_6x/step_0",
            "/process_api/0123456789abcdef0123456789abcdef",
            // Not from the root: a user's delegated subtree on cgroup v2 may
            // hold cgroups of any name.
            "/user.slice/user-1000.slice/user@1000.service/app.slice/slurmstepd.scope/job_6/step_0",
            "/user.slice/user-1000.slice/user@1000.service/slurm/uid_0/job_6",
            "/system.slice/x.service/slurmstepd.scope/job_6",
            "/../system.slice/slurmstepd.scope/job_6/step_0",
        ] {
            assert_eq!(parse_slurm_path(path), None, "{path}");
        }
    }
}
