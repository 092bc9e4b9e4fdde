"""deploy/slurm/task-prolog.sh: what it exports for GPU and non-GPU tasks;
deploy/slurm/prolog.sh: how it finds out whether tandemd runs (by asking its
socket, never systemctl) and that it never fails a job or starts tandemd."""

import os
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "task-prolog.sh")
PROLOG = os.path.join(HERE, "prolog.sh")


def run(env):
    with tempfile.NamedTemporaryFile(suffix=".so") as lib:
        base = {"PATH": "/usr/bin:/bin", "TANDEM_LIB": lib.name}
        base.update({k: v.replace("LIB", lib.name) for k, v in env.items()})
        out = subprocess.run(["sh", SCRIPT], env=base, text=True, capture_output=True, check=True).stdout
        return out.replace(lib.name, "LIB").splitlines()


class TaskProlog(unittest.TestCase):
    def test_gpu_task_gets_the_shim_and_the_socket(self):
        self.assertEqual(run({"CUDA_VISIBLE_DEVICES": "0"}),
                         ["export LD_PRELOAD=LIB", "export TANDEM_SOCKET=/run/tandem/tandemd.sock"])

    def test_an_existing_preload_is_kept_and_not_doubled(self):
        self.assertEqual(run({"SLURM_JOB_GPUS": "1", "LD_PRELOAD": "/opt/x.so"})[0],
                         "export LD_PRELOAD=LIB:/opt/x.so")
        # Already preloaded (e.g. set by the job): no second copy.
        self.assertEqual(run({"SLURM_JOB_GPUS": "1", "LD_PRELOAD": "/opt/x.so:LIB"}),
                         ["export TANDEM_SOCKET=/run/tandem/tandemd.sock"])

    def test_cpu_tasks_and_opted_out_jobs_get_nothing(self):
        self.assertEqual(run({}), [])
        self.assertEqual(run({"CUDA_VISIBLE_DEVICES": "0", "TANDEM_CLASS": "off"}), [])


def fake(bindir, name, body):
    path = os.path.join(bindir, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def prolog(tandemctl_rc=None, socket="/run/tandem/tandemd.sock"):
    """Runs prolog.sh with stand-ins for tandemctl (exit code `tandemctl_rc`,
    None: not installed), logger and systemctl; returns (exit code, what
    tandemctl was asked, what was logged, whether systemctl ran)."""
    with tempfile.TemporaryDirectory() as d:
        calls = os.path.join(d, "calls")
        fake(d, "logger", f'echo "logger $*" >> {calls}')
        fake(d, "systemctl", f'echo "systemctl $*" >> {calls}')
        env = {"PATH": f"{d}:/usr/bin:/bin", "SLURM_JOB_ID": "6", "TANDEM_SOCKET": socket,
               "TANDEMCTL": os.path.join(d, "absent")}
        if tandemctl_rc is not None:
            env["TANDEMCTL"] = fake(d, "tandemctl", f'echo "tandemctl $*" >> {calls}; exit {tandemctl_rc}')
        r = subprocess.run(["sh", PROLOG], env=env, text=True, capture_output=True)
        lines = open(calls).read().splitlines() if os.path.exists(calls) else []
        asked = [l for l in lines if l.startswith("tandemctl ")]
        logged = [l for l in lines if l.startswith("logger ")]
        systemctl = any(l.startswith("systemctl ") for l in lines)
        return r.returncode, asked, logged, systemctl


class Prolog(unittest.TestCase):
    def test_a_running_tandemd_is_asked_on_its_socket_and_nothing_is_logged(self):
        rc, asked, logged, systemctl = prolog(tandemctl_rc=0, socket="/srv/t.sock")
        self.assertEqual(rc, 0)
        self.assertEqual(asked, ["tandemctl --socket /srv/t.sock status"])
        self.assertEqual(logged, [])
        self.assertFalse(systemctl)

    def test_a_silent_tandemd_is_logged_never_started_and_the_job_runs(self):
        rc, asked, logged, systemctl = prolog(tandemctl_rc=1)
        self.assertEqual(rc, 0)
        self.assertEqual(len(asked), 1)
        self.assertEqual(len(logged), 1)
        self.assertIn("does not answer on /run/tandem/tandemd.sock", logged[0])
        self.assertIn("job 6 runs without tandem", logged[0])
        self.assertFalse(systemctl, "the prolog must not start tandemd")

    def test_without_tandemctl_it_says_so_and_the_job_runs(self):
        rc, asked, logged, systemctl = prolog(tandemctl_rc=None)
        self.assertEqual((rc, asked, systemctl), (0, [], False))
        self.assertIn("tandemctl not found", logged[0])


class Docs(unittest.TestCase):
    """docs/slurm.md names the files that slurm.conf names."""

    def test_install_names_match_slurm_conf(self):
        doc = open(os.path.join(HERE, "..", "..", "docs", "slurm.md")).read()
        for key, name in [("Prolog", "tandem-prolog.sh"), ("TaskProlog", "tandem-task-prolog.sh")]:
            self.assertIn(f"{key}=/etc/slurm/{name}", doc)
            self.assertIn(f"/etc/slurm/{name}", doc.split("Install", 1)[1], f"install step for {name}")
        for script in ["prolog.sh", "task-prolog.sh"]:
            head = open(os.path.join(HERE, script)).read().splitlines()[1]
            self.assertIn("/etc/slurm/tandem-", head)


if __name__ == "__main__":
    unittest.main()
