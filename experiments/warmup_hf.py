"""Supervised warm-up of an imported chat model on instruct demonstrations, before RL.

The model sees each domain's task in words (env prompt_style "instruct") in its
own chat template and learns the demonstrated reply and its end-of-turn token:
the ids an RL run with ``env.prompt_style="instruct"`` will show it and sample.
The result, ``WORKDIR/model``, is a Hugging Face checkpoint (the base's
tokenizer and template included) that RL starts from with
``--config.base.hf_checkpoint=WORKDIR/model``.

    python -m launch.warmup --config=experiments/warmup_hf.py:smollm2-135m-instruct --workdir=runs/warmup_smollm2
    python -m launch.warmup --config=experiments/warmup_hf.py:smollm2-135m-instruct,lora --workdir=runs/warmup_lora
    python -m launch.warmup --config=experiments/warmup_hf.py:gemma3-270m --workdir=runs/warmup_gemma
    python -m launch.warmup --config=experiments/warmup_hf.py:smoke --workdir=/tmp/warmup

An RL config starts from a warm-up with ``base.experiment=experiments/warmup_hf.py``
and ``base.arg=<this file's argument>`` (experiments/grpo_smollm2.py): the run
warms the model up on first use and caches it under .cache/rlpt/bases, keyed
by this config's fingerprint, as the tiny base's pre-training is cached.

``smoke``: the tiny Hugging Face fixture (rlpt.models.hf_fixtures, written
where grpo_hf_import.py:smoke writes it on first use, no download), 4 steps. ``,lora``: rank-8
adapters, merged into the saved weights.

Measured (2-core AMD EPYC, one run): SmolLM2's 80 steps
over the 24 domains took 902 s; demonstration loss 1.57 -> 0.2-0.5, token
accuracy 0.64 -> 0.83-0.94; mean held-out sampled success on grpo_smollm2's
seven domains 0.7% -> 35.9% (docs/real_models.md).
"""

import ml_collections

from experiments.domains import WARMUP_MAX_LEN, real_warmup
from experiments.grpo_hf_import import SMOKE_CHECKPOINT
from rlpt.config import WarmupConfig, default_config_dict

RUNNER = "warmup"

# The smoke run's short-answer domains (their demonstrations fit 384 of the
# byte-level fixture's ids); real models warm up on experiments.domains.real_warmup().
SMOKE_DOMAINS = ("rlpt/math-mul-easy-v0", "rlpt/math-add-easy-v0")
MODELS = ("smoke", "smollm2-135m-instruct", "gemma3-270m")


def get_config(arg: str = "smollm2-135m-instruct") -> ml_collections.ConfigDict:
  model, *flags = arg.split(",")
  if model not in MODELS or any(f != "lora" for f in flags):
    raise ValueError(f"warmup_hf argument {arg!r}: expected one of {list(MODELS)}, "
                     "optionally followed by ',lora'.")
  c = default_config_dict(WarmupConfig)
  c.seed = 0
  c.domains.ids = list(SMOKE_DOMAINS if model == "smoke" else real_warmup())
  c.prompt_style = "instruct"
  c.max_len = WARMUP_MAX_LEN
  if model == "smoke":
    from rlpt.models.hf_fixtures import ensure_tiny_llama
    c.base.hf_checkpoint = ensure_tiny_llama(SMOKE_CHECKPOINT)
    c.steps = 4
    c.batch_size = 8  # a multiple of the 8 emulated devices of the tests
    c.max_len = 384  # the byte-level fixture spends one id per character
    c.optim.update(learning_rate=3e-3, warmup_steps=0, decay="constant")
    c.log_every = 1
  else:
    c.base.model = model
    c.steps = 80
    c.batch_size = 8
    c.optim.update(learning_rate=2e-5, warmup_steps=5, decay="cosine")
    c.log_every = 5
  if flags:
    c.lora.update(rank=8, alpha=16.0)
    c.optim.learning_rate *= 10  # adapters take a larger rate
  return c
