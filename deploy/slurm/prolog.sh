#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/tandem-prolog.sh), run as root
# on each allocated node before the job starts. Makes sure the node's tandemd
# is up; it never fails the job: without tandemd the shim runs the job
# exactly as without tandem (fail-open).
if command -v systemctl >/dev/null 2>&1 && ! systemctl is-active --quiet tandemd; then
    systemctl start tandemd >/dev/null 2>&1 || \
        logger -t tandem-prolog "tandemd is not running on $(hostname); job $SLURM_JOB_ID runs without tandem"
fi
exit 0
