"""Supervised pre-training of the built-in tiny base model (about 0.8M parameters).

Trains on the demonstrations of the default domains, briefly, and from an
imperfect teacher (30% of demonstrations carry one wrong character, as SFT data
distilled from a weaker model would): the base succeeds only sometimes and has
inherited slips that the verifiers, through RL, can remove. That is the
situation RL post-training is for.
The RL experiments build and cache this base on first use; to build it alone:

    python -m launch.pretrain --config=experiments/pretrain_base.py --workdir=runs/base
    python -m launch.pretrain --config=experiments/pretrain_base.py:smoke --workdir=/tmp/base
    python -m launch.pretrain --config=experiments/pretrain_base.py:mixed --workdir=runs/base_mixed

``:mixed`` is the base of experiments/grpo_mixed.py: the same model, trained
longer on the demonstrations of that job's built-in, dataset-file and
reasoning-gym domains, at its longer context. ``:all`` is the base of
experiments/grpo_all_domains.py: trained on the demonstrations of every domain
that job selects.
"""

import ml_collections

from experiments import domains
from rlpt.config import PretrainConfig, default_config_dict

RUNNER = "pretrain"


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = default_config_dict(PretrainConfig)
  c.seed = 0
  c.model.update(vocab_size=259, d_model=128, num_layers=4, num_heads=4, num_kv_heads=2,
                 head_dim=32, mlp_dim=384, rope_theta=10_000.0, tie_embeddings=True)
  c.domains.ids = list(domains.DEFAULT)
  c.steps = 600
  c.batch_size = 64
  c.max_len = 96
  c.optim.update(learning_rate=3e-3, warmup_steps=50, decay="cosine", b2=0.99, grad_clip=1.0)
  c.log_every = 25
  # The base imitates an imperfect teacher: 30% of its demonstrations carry one
  # wrong character. RL against the verifiers removes the inherited slips.
  c.demo_noise = 0.3
  if arg == "smoke":
    c.model.update(d_model=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, mlp_dim=64)
    c.steps = 20
    c.batch_size = 16
    c.optim.update(warmup_steps=2, decay="constant")
    c.log_every = 5
  elif arg == "mixed":
    c.domains.ids = list(domains.mixed())
    c.steps = 1000
    # BOS + the longest prompt + the longest answer + EOS, rounded up to 16.
    c.max_len = -(-(domains.MIXED_REAL_PROMPT_CHARS + domains.MIXED_ANSWER_CHARS + 2) // 16) * 16
  elif arg.split(",")[0] == "all":
    # "all[,prompt=<chars>,answer=<chars>]": every domain of grpo_all_domains' bounds.
    bounds = {"prompt": domains.ALL_PROMPT_CHARS, "answer": domains.ALL_DEMO_CHARS}
    for item in arg.split(",")[1:]:
      key, _, value = item.partition("=")
      if key not in bounds or not value.isdigit():
        raise ValueError(f"pretrain_base argument {arg!r}: expected all[,prompt=N,answer=N]")
      bounds[key] = int(value)
    ids, _ = domains.every_domain("", bounds["prompt"], bounds["answer"])
    c.domains.ids = list(ids)
    c.steps = 1000
    c.max_len = -(-(bounds["prompt"] + bounds["answer"] + 3) // 16) * 16  # BOS, EOS, rounded up
  elif arg:
    raise ValueError(f"Unknown pretrain_base argument '{arg}'; expected '', 'smoke', 'mixed' "
                     "or 'all'.")
  return c
