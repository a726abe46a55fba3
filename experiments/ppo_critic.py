"""PPO with a value model (GAE advantages) on the default domains and base.

The same domains, base, batch and budget as grpo_default, so the two are
directly comparable; the advantage comes from a critic instead of the group.

    python -m launch.train --config=experiments/ppo_critic.py --workdir=runs/ppo_critic
    python -m launch.train --config=experiments/ppo_critic.py:smoke --workdir=/tmp/ppo
"""

import ml_collections

from experiments import grpo_default

RUNNER = "train"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = grpo_default.get_config(arg)
  c.rl.update(advantage="gae", gamma=1.0, lam=0.95, whiten_advantages=True, ppo_epochs=2,
              minibatches=2)
  c.value.update(value_clip=0.2, aggregation="token-mean")
  c.value.optim.update(learning_rate=3e-4, warmup_steps=5)
  return c
