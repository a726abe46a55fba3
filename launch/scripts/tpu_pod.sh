#!/usr/bin/env bash
# Runs the same command on every host of a Cloud TPU pod slice; JAX reads the
# pod topology itself (launch/multihost.py). Only process 0 writes, so point
# --workdir at storage process 0 can reach (a GCS-fuse mount or its local disk).
#
#   TPU=my-v5p-256 ZONE=us-east5-a launch/scripts/tpu_pod.sh \
#       --config=experiments/grpo_default.py --workdir=runs/grpo_pod
#
# Assumes the repository is checked out at ~/rlpt with `make setup` done on
# every host (e.g. by a previous tpu_pod.sh run of `make setup`: CMD=setup),
# which finds the TPU chips and installs jax with libtpu (launch/locks/tpu.txt).
set -euo pipefail
: "${TPU:?set TPU to the TPU VM name}"
: "${ZONE:?set ZONE to its zone}"
REPO=${REPO:-\~/rlpt}
args=$(printf ' %q' "$@")
if [[ "${CMD:-train}" == setup ]]; then
  remote="cd ${REPO} && make setup"
else
  remote="cd ${REPO} && .venv/bin/python -m launch.train${args}"
fi
gcloud compute tpus tpu-vm ssh "$TPU" --zone "$ZONE" --worker=all --command="$remote"
