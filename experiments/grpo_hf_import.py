"""GRPO post-training of an imported Hugging Face checkpoint on the default domains.

    python -m launch.train --config=experiments/grpo_hf_import.py:/path/to/checkpoint --workdir=runs/hf
    python -m launch.train --config=experiments/grpo_hf_import.py:smoke --workdir=/tmp/smoke

The argument is a local Hugging Face directory (config.json + *.safetensors +
tokenizer.json or tokenizer.model) of the Llama 3, Qwen2/Qwen3 or Gemma 2/3
families; it is read by rlpt.models.hf into the training layout. ``:smoke``
has no real checkpoint to use, so it writes a tiny random Llama with a
byte-level tokenizer (rlpt.models.hf_fixtures) under .cache/rlpt/hf first and
post-trains that for two steps. The imported model's own tokenizer is
rlpt.pretrain.resolve_tokenizer(base); the byte-level fixture's ids equal the
byte tokenizer's.
"""

import os

import ml_collections

from experiments import domains
from rlpt.config import TrainConfig, default_config_dict

RUNNER = "train"

SMOKE_CHECKPOINT = os.path.join(".cache", "rlpt", "hf", "tiny-llama-smoke")


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  c = default_config_dict(TrainConfig)
  c.seed = 0
  c.steps = 200
  c.domains.ids = list(domains.DEFAULT)
  c.rollout.update(batch_size=128, group_size=8, max_prompt_len=72, max_new_tokens=16,
                   temperature=1.0, env_workers=4)
  c.rl.update(advantage="grpo", policy_loss="ppo_clip", clip_eps=0.2, kl_beta=0.01,
              kl_estimator="k3", aggregation="token-mean")
  c.optim.update(learning_rate=1e-5, warmup_steps=5)
  c.eval.update(every=25, tasks_per_domain=64, temperature=0.0, sampled=True)
  if arg == "smoke":
    from rlpt.models.hf_fixtures import ensure_tiny_llama
    c.base.hf_checkpoint = ensure_tiny_llama(SMOKE_CHECKPOINT)
    c.steps = 2
    c.rollout.update(batch_size=16, group_size=4)
    c.eval.update(every=2, tasks_per_domain=4)
  elif arg:
    if not os.path.exists(os.path.join(arg, "config.json")):
      raise ValueError(f"grpo_hf_import expects 'smoke' or a Hugging Face checkpoint directory "
                       f"holding config.json, got '{arg}'.")
    c.base.hf_checkpoint = arg
  else:
    raise ValueError("grpo_hf_import needs an argument: a checkpoint directory "
                     "(experiments/grpo_hf_import.py:/path/to/model) or 'smoke'.")
  return c
