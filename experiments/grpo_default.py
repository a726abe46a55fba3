"""GRPO post-training of the tiny base on the default domains (the main job).

    make train
    python -m launch.train --config=experiments/grpo_default.py --workdir=runs/grpo_default
    python -m launch.train --config=experiments/grpo_default.py:smoke --workdir=/tmp/smoke
    python -m launch.train --config=experiments/grpo_default.py:async --workdir=runs/grpo_async

The base model is built by experiments/pretrain_base.py on first use and cached
under .cache/rlpt/bases. ``:smoke`` shrinks everything to a seconds-long run.
``:async`` is the same job with asynchronous rollout: staleness 1, and 3 for
the sandbox domains (code, shell), whose environments are the slow ones.
Every field of rlpt.config.TrainConfig is present, so any of them can be
overridden with ``--config.<section>.<field>=...``.
"""

import ml_collections

from experiments import domains
from rlpt.config import TrainConfig, default_config_dict

RUNNER = "train"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = default_config_dict(TrainConfig)
  c.seed = 0
  c.steps = 200
  c.base.update(experiment="experiments/pretrain_base.py", arg="")
  c.domains.ids = list(domains.DEFAULT)
  # share_prefix: each group of 8 samples from its prompt's one prefilled cache.
  c.rollout.update(batch_size=128, group_size=8, max_prompt_len=72, max_new_tokens=24,
                   temperature=1.0, share_prefix=True)
  c.rl.update(advantage="grpo", policy_loss="ppo_clip", clip_eps=0.2, kl_beta=0.01,
              kl_estimator="k3", aggregation="token-mean")
  c.optim.update(learning_rate=1e-4, warmup_steps=5)
  c.eval.update(every=25, tasks_per_domain=64, temperature=0.0, sampled=True)
  if arg == "smoke":
    c.steps = 2
    c.base.arg = "smoke"
    # 8 prompts per step: share_prefix splits prompts over up to 8 batch shards.
    c.rollout.update(batch_size=32, group_size=4)
    c.eval.update(every=2, tasks_per_domain=4)
  elif arg == "async":
    from environments import registry
    c.rollout.staleness = 1
    c.rollout.domain_staleness = {d: 3 for d in c.domains.ids
                                  if "sandbox" in registry.get(d).tags}
  elif arg:
    raise ValueError(f"Unknown grpo_default argument '{arg}'; expected '', 'smoke' or 'async'.")
  return c
