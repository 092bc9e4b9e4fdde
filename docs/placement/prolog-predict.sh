#!/bin/sh
# tandem: a Slurm Prolog example (docs/placement.md). On the node, before the
# job starts, it asks `tandemctl predict` what the job and the jobs already on
# its GPU would see together, and records the verdict in the job's comment
# (`scontrol show job` shows it to the user and the operator). The job names
# its trace in its comment: `sbatch --comment=tandem-trace=/shared/b4.json ...`.
# Every figure is a prediction of tandem's GPU-sharing model, not a
# measurement.
#
# It never fails (exit 0 always): a Prolog that fails drains the node.
# slurm.conf: Prolog=/etc/slurm/tandem-prolog-predict.sh (beside tandem's own
# Prolog, docs/slurm.md, through a wrapper that runs both).

TANDEMCTL=/usr/local/bin/tandemctl
SOCKET=/run/tandem/tandemd.sock
SCONTROL=scontrol
PATH=/usr/local/bin:/usr/bin:/bin

log() { logger -t tandem-prolog-predict "job $SLURM_JOB_ID: $*" 2>/dev/null || true; }

comment=$($SCONTROL show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/.*Comment=\([^ ]*\).*/\1/p')
trace=$(printf '%s\n' "$comment" | sed -n 's/.*tandem-trace=\([^,]*\).*/\1/p')
[ -n "$trace" ] || exit 0
[ -r "$trace" ] || { log "trace $trace is not readable"; exit 0; }

# SLURM_JOB_GPUS holds CUDA ordinals; tandemctl takes a UUID (its --gpu N is
# the index in `tandemctl status`, not the ordinal).
gpu=$(printf '%s' "${SLURM_JOB_GPUS:-}" | cut -d, -f1)
[ -n "$gpu" ] || exit 0
uuid=$(nvidia-smi -i "$gpu" --query-gpu=uuid --format=csv,noheader 2>/dev/null)
[ -n "$uuid" ] || { log "no UUID for GPU $gpu"; exit 0; }

answer=$(timeout 90 "$TANDEMCTL" --socket "$SOCKET" predict --gpu "$uuid" --add "$trace" --json 2>&1)
verdict=$(printf '%s' "$answer" | sed -n 's/.*"verdict": "\([^"]*\)".*/\1/p' | head -n 1)
model=$(printf '%s' "$answer" | sed -n 's/.*"model_version": "\([^"]*\)".*/\1/p' | head -n 1)
if [ -n "$verdict" ]; then
    note="tandem prediction ($model): $verdict"
else
    note="tandem prediction failed: $(printf '%s' "$answer" | tail -n 1)"
fi
log "$note"
$SCONTROL update job="$SLURM_JOB_ID" comment="$comment; $note" >/dev/null 2>&1 || true
exit 0
