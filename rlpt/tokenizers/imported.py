"""The tokenizer an imported base brings with it."""

from __future__ import annotations

from rlpt.tokenizers.gguf import GGUFTokenizer
from rlpt.tokenizers.hf import load_tokenizer


def imported_tokenizer(base_cfg, hf_checkpoint: str = ""):
  """A Hugging Face base's own tokenizer (tokenizer.json or tokenizer.model;
  ``hf_checkpoint`` overrides the config's), or a GGUF file's (its metadata)."""
  hf_checkpoint = hf_checkpoint or base_cfg.hf_checkpoint
  if hf_checkpoint:
    return load_tokenizer(hf_checkpoint)
  if base_cfg.model:
    return GGUFTokenizer(base_cfg.model)
  raise ValueError("the base names no imported model: set base.hf_checkpoint or base.model.")
