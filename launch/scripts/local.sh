#!/usr/bin/env bash
# N processes of one program on this machine (CPU: each with its own emulated
# devices), joined over loopback with gloo collectives. Only process 0 writes.
#
#   NPROC=2 DEVICES=4 launch/scripts/local.sh \
#       --config=experiments/grpo_default.py:smoke --workdir=/tmp/mp
#
# MODULE (default launch.train) is the entry point; other arguments pass through.
set -euo pipefail
NPROC=${NPROC:-2}
DEVICES=${DEVICES:-4}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
PY=${PY:-.venv/bin/python}
MODULE=${MODULE:-launch.train}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
for ((i = 0; i < NPROC; i++)); do
  XLA_FLAGS="--xla_force_host_platform_device_count=${DEVICES}" JAX_PLATFORMS=${JAX_PLATFORMS:-cpu} \
    "$PY" -m "$MODULE" "$@" --coordinator_address="127.0.0.1:${PORT}" \
    --num_processes="$NPROC" --process_id="$i" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
trap - EXIT
exit "$status"
