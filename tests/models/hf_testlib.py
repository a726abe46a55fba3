"""Tiny random Hugging Face models of each family, built with transformers' own
config classes (no downloads). Shared by the tests in tests/models."""

from __future__ import annotations

import logging
import os

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
logging.getLogger("transformers").setLevel(logging.ERROR)

import numpy as np

torch = None


def _torch():
  global torch
  if torch is None:
    import torch as t
    torch = t
  return torch


COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=256, max_position_embeddings=256)


def hf_config(family: str):
  import transformers as tf
  if family == "llama":
    # Llama 3 rope scaling with a short original context, so scaling is exercised.
    return tf.LlamaConfig(**COMMON, tie_word_embeddings=False, rms_norm_eps=1e-5,
                          rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                           "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64})
  if family == "qwen2":
    return tf.Qwen2Config(**COMMON, tie_word_embeddings=True)
  if family == "qwen3":
    return tf.Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=False)
  if family == "gemma2":
    return tf.Gemma2Config(**COMMON, head_dim=16, sliding_window=4, query_pre_attn_scalar=24,
                           attn_logit_softcapping=5.0, final_logit_softcapping=10.0)
  if family == "gemma3":
    return tf.Gemma3TextConfig(
        **COMMON, head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 4.0,
                                            "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
  raise ValueError(family)


def randomize_(model, seed: int = 0):
  """Weights of a realistic scale (HF's 0.02 init gives near-uniform logits)."""
  t = _torch()
  g = t.Generator().manual_seed(seed)
  gemma = model.config.model_type.startswith("gemma")
  with t.no_grad():
    for name, p in model.named_parameters():
      noise = t.randn(p.shape, generator=g)
      if name.endswith("norm.weight"):
        p.copy_(0.1 * noise + (0.0 if gemma else 1.0))
      elif name.endswith("bias"):
        p.copy_(0.1 * noise)
      elif "embed_tokens" in name:
        p.copy_(noise * (0.3 if gemma else 1.0))
      else:
        p.copy_(noise * p.shape[-1] ** -0.5)
  return model


def make_hf_model(family: str, directory: str, seed: int = 0):
  """Builds, randomizes and saves a tiny model; returns the (eval) torch model."""
  from transformers import AutoModelForCausalLM
  t = _torch()
  t.manual_seed(seed)
  model = AutoModelForCausalLM.from_config(hf_config(family), attn_implementation="eager")
  model = randomize_(model.float().eval(), seed)
  model.generation_config.eos_token_id = None
  model.generation_config.pad_token_id = 0
  model.save_pretrained(directory)
  return model


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
  t = _torch()
  with t.no_grad():
    return model(t.as_tensor(tokens, dtype=t.long)).logits.float().numpy()
