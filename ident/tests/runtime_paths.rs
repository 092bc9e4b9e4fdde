//! Identity from `/proc/PID/cgroup` as real runtimes write it: whole files,
//! read from a job's process while it ran, fed to what tandemd feeds them to
//! (`cgroup_of_proc`, then `parse_cgroup_path` and `parse_slurm_path`).
//!
//! Captured by `scripts/integration` on a Debian 12 VM with hybrid cgroups
//! (v1 controllers, an empty v2 hierarchy at /sys/fs/cgroup/unified, no
//! systemd; the memory hierarchy holds the VM's own `/process_api/<32 hex>`):
//! podman 4.3.1, docker 26.1.5, containerd 1.7.24 (CRI, cgroupfs) with runc
//! 1.1.5, and Slurm 22.05.8 with `proctrack/cgroup` on cgroup v1. The
//! layouts that cannot run there (the kubelet's systemd driver, Slurm's
//! cgroup/v2, which slurmd 22.05 refuses on a hybrid host) are the v2 lines
//! nodes print, as published from an EKS node and from a Slurm site's
//! `cat /proc/$$/cgroup` in an `srun` shell.

use tandem_ident::{cgroup_of_proc, parse_cgroup_path, parse_slurm_path, Runtime, SlurmStep};

/// The file with `PATH` on each of the VM's hierarchies, v2's included (the
/// runtimes put the process in every hierarchy, as they do there).
fn hybrid_file(path: &str) -> String {
    [
        "9:name=systemd",
        "8:pids",
        "7:blkio",
        "6:freezer",
        "5:devices",
        "4:memory",
        "3:cpuset",
        "2:cpuacct",
        "1:cpu",
        "0:",
    ]
    .iter()
    .map(|h| format!("{h}:{path}\n"))
    .collect()
}

fn container(text: &str) -> (Option<String>, Option<String>, Option<Runtime>) {
    let path = cgroup_of_proc(text).expect("a cgroup");
    assert_eq!(parse_slurm_path(&path), None, "{path} read as a Slurm job");
    let p = parse_cgroup_path(&path).unwrap_or_else(|| panic!("{path} names no container"));
    (p.pod_uid, p.container_id, p.runtime)
}

#[test]
fn podman_4_3_cgroupfs_libpod_parent() {
    let id = "ee84c3599229e3ff447241551d618461e401f77793deabf3d97b8fa916f506ca";
    let text = hybrid_file(&format!("/libpod_parent/libpod-{id}"));
    assert_eq!(
        container(&text),
        (None, Some(id.into()), Some(Runtime::Podman))
    );
}

#[test]
fn docker_26_cgroupfs() {
    let id = "2e5f352a1c360b298af76b4338a05741500eb351ccdde24620ea9fc47f3a3735";
    let text = hybrid_file(&format!("/docker/{id}"));
    assert_eq!(
        container(&text),
        (None, Some(id.into()), Some(Runtime::Docker))
    );
}

#[test]
fn containerd_1_7_cri_kubepods_cgroupfs() {
    // A pod made through CRI with cgroup_parent /kubepods/besteffort/pod<uid>,
    // as the kubelet's cgroupfs driver asks.
    let uid = "3f1c2a6e-6a0e-4f7b-9d3e-2b7c1a0e5d11";
    let id = "789166d258ef42177e8e19ed9e3b2e03bc909637d690036817a2d6e824f4cc43";
    let text = hybrid_file(&format!("/kubepods/besteffort/pod{uid}/{id}"));
    let path = cgroup_of_proc(&text).unwrap();
    let p = parse_cgroup_path(&path).unwrap();
    assert_eq!(p.pod_uid.as_deref(), Some(uid));
    assert_eq!(p.qos, Some("besteffort"));
    assert_eq!(p.container_id.as_deref(), Some(id));
    assert_eq!(p.runtime, Some(Runtime::Unknown)); // cgroupfs: containerd's ids are bare
}

#[test]
fn kubepods_systemd_driver_cgroup_v2() {
    // An EKS node (containerd, the kubelet's systemd driver, cgroup v2): the
    // pod's uid with underscores in the slice's name.
    let text = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poddde1244b_5bb5_4297_b544_85f3bc0d80bf.slice/cri-containerd-40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9.scope\n";
    let path = cgroup_of_proc(text).unwrap();
    let p = parse_cgroup_path(&path).unwrap();
    assert_eq!(
        p.pod_uid.as_deref(),
        Some("dde1244b-5bb5-4297-b544-85f3bc0d80bf")
    );
    assert_eq!(p.qos, Some("burstable"));
    assert_eq!(
        p.container_id.as_deref(),
        Some("40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9")
    );
    assert_eq!(p.runtime, Some(Runtime::Containerd));
}

#[test]
fn slurm_22_05_cgroup_v1_job_step() {
    // `srun --uid=nobody --gres=gpu:1`, job 3 step 0: only freezer names the
    // job; memory holds the VM's own cgroup, a 32-hex run that is no
    // container.
    let text =
        "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/slurm_vm/uid_65534/job_3/step_0\n\
                5:devices:/\n4:memory:/process_api/405971a2524bee1b736248bb2bc89540\n3:cpuset:/\n\
                2:cpuacct:/\n1:cpu:/\n0::/\n";
    let path = cgroup_of_proc(text).unwrap();
    assert_eq!(path, "/slurm_vm/uid_65534/job_3/step_0");
    assert_eq!(
        parse_slurm_path(&path),
        Some(SlurmStep {
            job: 3,
            step: Some("0".into()),
            uid: Some(65534)
        })
    );
    assert_eq!(parse_cgroup_path(&path), None);
    assert_eq!(
        parse_cgroup_path("/process_api/405971a2524bee1b736248bb2bc89540"),
        None
    );
}

#[test]
fn slurm_cgroup_v2_job_steps() {
    // What a Slurm site's docs show `cat /proc/$$/cgroup` print in an srun
    // shell, and a batch step's task: cgroup v2 only, no uid in the path.
    for (text, job, step) in [
        (
            "0::/system.slice/slurmstepd.scope/job_840392/step_0/user/task_0\n",
            840392,
            "0",
        ),
        (
            "0::/system.slice/slurmstepd.scope/job_1076414/step_batch/user/task_0\n",
            1076414,
            "batch",
        ),
    ] {
        let path = cgroup_of_proc(text).unwrap();
        assert_eq!(
            parse_slurm_path(&path),
            Some(SlurmStep {
                job,
                step: Some(step.into()),
                uid: None
            }),
            "{text}"
        );
        assert_eq!(parse_cgroup_path(&path), None, "{text}");
    }
}
