#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/tandem-prolog.sh), run as root
# on each allocated node before the job starts. Checks that the node's tandemd
# answers on its socket and logs it when it does not; it never starts or
# restarts tandemd (an operator may have stopped it on purpose, and a start
# would hold up the job) and never fails the job: without tandemd the shim
# runs the job exactly as without tandem (fail-open), and a job started while
# tandemd is down registers when it comes back.
#
# It asks tandemd itself (`tandemctl status`, which waits at most 3 s), so it
# works with or without systemd.
SOCKET=${TANDEM_SOCKET:-/run/tandem/tandemd.sock}
TANDEMCTL=${TANDEMCTL:-/usr/local/bin/tandemctl}
[ -x "$TANDEMCTL" ] || TANDEMCTL=$(command -v tandemctl 2>/dev/null) || TANDEMCTL=

say() {
    logger -t tandem-prolog "$*" 2>/dev/null || echo "tandem-prolog: $*" >&2
}

if [ -z "$TANDEMCTL" ]; then
    say "tandemctl not found (set TANDEMCTL); cannot tell whether tandemd runs on $(hostname); job ${SLURM_JOB_ID:-?} runs as usual"
elif ! "$TANDEMCTL" --socket "$SOCKET" status >/dev/null 2>&1; then
    say "tandemd does not answer on $SOCKET on $(hostname); job ${SLURM_JOB_ID:-?} runs without tandem"
fi
exit 0
