"""GRPO at long context: key-value retrieval over 16K-64K-token documents, sequence-sharded.

    python -m launch.train --config=experiments/grpo_longctx.py --workdir=runs/longctx
    python -m launch.train --config=experiments/grpo_longctx.py:32k --workdir=runs/longctx32k
    python -m launch.train --config=experiments/grpo_longctx.py:smoke --workdir=/tmp/longctx

The whole pipeline runs with the sequence split over the `sequence` mesh axis
(all devices by default; on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=8):
training, reference and scoring passes use ring attention (zigzag layout),
the sampler prefills by ring attention and decodes over a KV cache sharded on
the sequence axis, each device attending to its shard, partials merged by
log-sum-exp. Argument: "16k" (default), "32k", "64k" (the domain's context
in characters = byte tokens), or "smoke" (1K context, seconds).

The built-in tiny base was pre-trained on short tasks and does not retrieve
at these lengths; this experiment exercises and measures long-context RL
(step time, memory). Learning it needs a base trained for long contexts
(base.hf_checkpoint) and an accelerator.
"""

import ml_collections

from rlpt.config import TrainConfig, default_config_dict
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, sequence_sharded

RUNNER = "train"

# (domain, rollout.max_prompt_len): the domain's longest prompt plus BOS, rounded up to 16.
_CONTEXTS = {"16k": ("rlpt/longctx-kv-16k-hard-v0", 16_656),
             "32k": ("rlpt/longctx-kv-32k-hard-v0", 33_040),
             "64k": ("rlpt/longctx-kv-64k-hard-v0", 65_808),
             "smoke": ("rlpt/longctx-kv-1k-easy-v0", 1_296)}


def get_config(arg: str = "16k") -> ml_collections.ConfigDict:
  arg = arg or "16k"
  if arg not in _CONTEXTS:
    raise ValueError(f"Unknown grpo_longctx argument '{arg}'; expected one of {sorted(_CONTEXTS)}.")
  domain, prompt_len = _CONTEXTS[arg]
  c = default_config_dict(TrainConfig)
  c.seed = 0
  c.steps = 20
  c.base.update(experiment="experiments/pretrain_base.py", arg="", attention_impl="ring",
                attention_block_size=512)
  c.domains.ids = [domain]
  c.mesh.update(data=1, sequence=-1)
  c.sharding.train_rules = [list(r) for r in sequence_sharded(DEFAULT_RULES)]
  c.sharding.sample_rules = [list(r) for r in sequence_sharded(SAMPLE_RULES)]
  c.rollout.update(batch_size=4, group_size=4, max_prompt_len=prompt_len, max_new_tokens=16,
                   temperature=1.0)
  c.rl.update(advantage="grpo", kl_beta=0.01)
  c.optim.update(learning_rate=1e-4, warmup_steps=2)
  c.eval.update(every=10, tasks_per_domain=4, sampled=False)
  c.checkpoint.every = 0
  if arg == "smoke":
    c.steps = 2
    c.base.update(arg="smoke", attention_block_size=128)
    c.eval.update(every=2, tasks_per_domain=2)
  return c
