"""GRPO with LoRA adapters (rank 8 on every attention and MLP projection).

The base is frozen and is also the reference policy, so the KL term costs no
extra weights; the optimizer state covers the adapters only. The same domains,
base and batch as grpo_default; adapters take a larger learning rate.

    python -m launch.train --config=experiments/grpo_lora.py --workdir=runs/grpo_lora
    python -m launch.train --config=experiments/grpo_lora.py:smoke --workdir=/tmp/lora

At the end ``WORKDIR/export`` holds the merged policy and ``export/adapters``
the adapters alone in PEFT's layout.
"""

import ml_collections

from experiments import grpo_default

RUNNER = "train"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = grpo_default.get_config(arg)
  c.lora.update(rank=8, alpha=16.0)
  c.optim.update(learning_rate=1e-3, warmup_steps=5)
  return c
