"""deploy/slurm/task-prolog.sh: what it exports for GPU and non-GPU tasks."""

import os
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "task-prolog.sh")


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


if __name__ == "__main__":
    unittest.main()
