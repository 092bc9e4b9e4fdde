//! Identity under Slurm: the job a peer runs in, from its cgroup path
//! ([`tandem_ident::parse_slurm_path`]), and the job's user. tandemd shows
//! both in `/stats` (`"slurm"`), on metrics (`slurm_job`, `slurm_user`) and
//! matches them with `[policy.inference] slurm_users` and `slurm_jobs`.
//! Like a pod's identity, it comes from the kernel (the cgroup slurmstepd
//! put the task in, SO_PEERCRED), never from the job's environment.

use std::ffi::CStr;

use serde::{Deserialize, Serialize};

/// A Slurm job step, as `GET /stats` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// The job id.
    pub job: u64,
    /// The step (`0`, `batch`, `extern`, …), if the cgroup path names it.
    pub step: Option<String>,
    /// The job's user: its name, or its uid where the name is unknown.
    pub user: String,
    /// The job's uid.
    pub uid: u32,
}

impl SlurmJob {
    /// Whether `name` (a user name, or a uid in decimal) is this job's user.
    #[must_use]
    pub fn user_is(&self, name: &str) -> bool {
        self.user == name || name.parse::<u32>().is_ok_and(|u| u == self.uid)
    }
}

/// The Slurm job of a peer of `peer_uid` in `cgroup`, if it runs in one.
/// The user is the uid the cgroup path names (cgroup v1), else the peer's.
#[must_use]
pub fn job_of(cgroup: Option<&str>, peer_uid: u32) -> Option<SlurmJob> {
    let step = tandem_ident::parse_slurm_path(cgroup?)?;
    let uid = step.uid.unwrap_or(peer_uid);
    Some(SlurmJob {
        job: step.job,
        step: step.step,
        user: user_name(uid).unwrap_or_else(|| uid.to_string()),
        uid,
    })
}

/// The name of user `uid` (`getpwuid_r`), if it has one. Asked only for
/// peers in a Slurm job, once, when they register.
fn user_name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid out-parameter.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `pw`, `buf` (with its length) and `out` are valid,
        // writable out-parameters for the call.
        let r =
            unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
        if r == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if r != 0 || out.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points to a NUL-terminated string in
        // `buf`, which outlives this borrow.
        let name = unsafe { CStr::from_ptr(pw.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_come_from_the_slurm_cgroup_layouts_only() {
        // cgroup v1 names the job's uid; root has a name everywhere.
        let j = job_of(Some("/slurm_vm/uid_0/job_6/step_0"), 1000).unwrap();
        assert_eq!((j.job, j.step.as_deref(), j.uid), (6, Some("0"), 0));
        assert_eq!(j.user, "root");
        assert!(j.user_is("root") && j.user_is("0") && !j.user_is("1000"));
        // cgroup v2: the peer's uid; a uid with no name reads as the number.
        let j = job_of(
            Some("/system.slice/slurmstepd.scope/job_7/step_batch/user/task_0"),
            4_000_000_000,
        )
        .unwrap();
        assert_eq!((j.job, j.uid), (7, 4_000_000_000));
        assert_eq!(j.user, "4000000000");
        assert_eq!(job_of(Some("/user.slice/job_7"), 0), None);
        assert_eq!(job_of(None, 0), None);
    }
}
