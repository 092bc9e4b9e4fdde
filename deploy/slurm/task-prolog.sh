#!/bin/sh
# Slurm TaskProlog (slurm.conf: TaskProlog=/etc/slurm/tandem-task-prolog.sh),
# run as the job's user before each task; lines "export NAME=VALUE" on its
# standard output go into the task's environment.
#
# Only GPU tasks get the shim; a job opts out with --export=TANDEM_CLASS=off
# (or by setting TANDEM_CLASS=off itself). The class a job claims comes from
# TANDEM_CLASS (e.g. sbatch --export=ALL,TANDEM_CLASS=inference); tandemd's
# [policy.inference] decides what it gets (uids, gids, or the Slurm job's
# user or id: slurm_users, slurm_jobs).
LIB=${TANDEM_LIB:-/usr/local/lib/libtandem.so}
SOCKET=${TANDEM_SOCKET:-/run/tandem/tandemd.sock}

[ "${TANDEM_CLASS:-}" = off ] && exit 0
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] || [ -n "${SLURM_JOB_GPUS:-}" ] || [ -n "${SLURM_STEP_GPUS:-}" ] || exit 0
[ -r "$LIB" ] || exit 0
case " ${LD_PRELOAD:-} " in
    *" $LIB "*|*"$LIB:"*|*":$LIB"*) ;;
    *) echo "export LD_PRELOAD=$LIB${LD_PRELOAD:+:$LD_PRELOAD}" ;;
esac
echo "export TANDEM_SOCKET=$SOCKET"
exit 0
