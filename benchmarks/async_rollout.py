r"""Synchronous vs asynchronous rollout with slow environments: step time and idle time.

    python benchmarks/async_rollout.py [--latency=0.2] [--sandbox_workers=8] [--steps=6] \
        [--staleness=0,1,2] [--config=experiments/grpo_default.py]

Every sandbox job (code and shell domains) gets ``--latency`` seconds of
injected delay (``env.latency_s``), as a remote or heavy sandbox would add.
For each staleness k the same config runs 2 warm-up steps and ``--steps``
timed ones; reported: median step time, the accelerator's idle fraction
(share of the step's wall time in which no jitted program ran) and the
speedup over k = 0 (synchronous). Uses the config's cached base model.
"""

import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "grpo_default.py"),
    "Experiment config.", lock_config=True)
_LATENCY = flags.DEFINE_float("latency", 0.2, "Seconds added to every sandbox job.")
_WORKERS = flags.DEFINE_integer("sandbox_workers", 8, "Sandbox-class worker threads.")
_STEPS = flags.DEFINE_integer("steps", 6, "Timed steps per mode.")
_STALENESS = flags.DEFINE_list("staleness", ["0", "1", "2"], "Staleness bounds to compare.")


def main(_):
  from rlpt.config import TrainConfig, from_config_dict
  from rlpt.trainer import Trainer

  rows = []
  for k in (int(x) for x in _STALENESS.value):
    cd = _CONFIG.value
    with cd.unlocked():
      cd.progress = False
      cd.checkpoint.every = 0
      cd.rollout.staleness = k
      cd.env.latency_s = _LATENCY.value
      cd.env.sandbox_workers = _WORKERS.value
    trainer = Trainer(from_config_dict(TrainConfig, cd), tempfile.mkdtemp(prefix="rlpt-async-"))
    try:
      for _ in range(2):
        trainer.train_step()
      ms = [trainer.train_step() for _ in range(_STEPS.value)]
    finally:
      trainer.close()
    med = {key: statistics.median(m[key] for m in ms)
           for key in ("time/step", "accelerator/idle_fraction", "time/generate",
                       "time/environments", "time/update")}
    rows.append((k, med))
    print(f"staleness {k}: step {med['time/step']:.2f} s, idle {med['accelerator/idle_fraction']:.1%} "
          f"(generate {med['time/generate']:.2f}, environments {med['time/environments']:.2f}, "
          f"update {med['time/update']:.2f})", flush=True)

  base = rows[0][1]["time/step"]
  print(f"\nsandbox latency {_LATENCY.value:g} s/job, {_WORKERS.value} sandbox workers, "
        f"median of {_STEPS.value} steps")
  print("| staleness | step (s) | accelerator idle | speedup |")
  print("|---:|---:|---:|---:|")
  for k, med in rows:
    print(f"| {k} | {med['time/step']:.2f} | {med['accelerator/idle_fraction']:.1%} | "
          f"{base / med['time/step']:.2f}x |")


if __name__ == "__main__":
  app.run(main)
