"""GRPO post-training of the tiny base on the default domains (the main job).

    make train
    python -m launch.train --config=experiments/grpo_default.py --workdir=runs/grpo_default
    python -m launch.train --config=experiments/grpo_default.py:smoke --workdir=/tmp/smoke

The base model is built by experiments/pretrain_base.py on first use and cached
under .cache/rlpt/bases. ``:smoke`` shrinks everything to a seconds-long run.
"""

import ml_collections

from experiments import domains

RUNNER = "train"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.steps = 150
  c.base = ml_collections.ConfigDict(dict(
      checkpoint="", experiment="pretrain_base", arg="", cache_dir=".cache/rlpt/bases"))
  c.domains = ml_collections.ConfigDict(dict(ids=list(domains.DEFAULT), weights=[]))
  c.rollout = ml_collections.ConfigDict(dict(
      batch_size=128, group_size=8, max_prompt_len=72, max_new_tokens=16, temperature=1.0,
      top_k=0, top_p=1.0, env_workers=4))
  c.rl = ml_collections.ConfigDict(dict(
      advantage="grpo", policy_loss="ppo_clip", clip_eps=0.2, kl_beta=0.04, kl_estimator="k3",
      aggregation="token-mean", ppo_epochs=1, minibatches=1))
  c.optim = ml_collections.ConfigDict(dict(
      learning_rate=3e-4, warmup_steps=5, decay="constant", weight_decay=0.0, b1=0.9, b2=0.99,
      grad_clip=1.0))
  c.eval = ml_collections.ConfigDict(dict(every=25, tasks_per_domain=64, temperature=0.0))
  c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, sequence=1, tensor=1))
  c.log_every = 1
  c.progress = True
  if arg == "smoke":
    c.steps = 2
    c.base.arg = "smoke"
    c.rollout.update(batch_size=16, group_size=4)
    c.eval.update(every=2, tasks_per_domain=4)
  elif arg:
    raise ValueError(f"Unknown grpo_default argument '{arg}'; expected '' or 'smoke'.")
  return c
