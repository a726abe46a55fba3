"""An imported model (a Hugging Face directory or a GGUF file) as rlpt's base:
the weights in the training layout, with the run's attention overrides."""

from __future__ import annotations

import dataclasses

from flax import nnx

from rlpt.models.gguf import load_gguf_checkpoint, resolve_gguf
from rlpt.models.hf import load_hf_checkpoint
from rlpt.models.transformer import Transformer
from rlpt.sharding import DEFAULT_RULES


def with_attention(base_cfg, model_cfg, graphdef):
  """The base's (config, graphdef) with the run's attention overrides applied.

  The attention implementation and block size change how the same weights
  are applied (long contexts: blockwise, sparse or ring), never the weights.
  """
  over = {}
  if base_cfg.attention_impl:
    over["attention_impl"] = base_cfg.attention_impl
  if base_cfg.attention_block_size:
    over["attention_block_size"] = base_cfg.attention_block_size
  if not over:
    return model_cfg, graphdef
  model_cfg = dataclasses.replace(model_cfg, **over)
  graphdef = nnx.graphdef(nnx.eval_shape(lambda: Transformer(model_cfg, nnx.Rngs(0))))
  return model_cfg, graphdef


def load_imported(base_cfg, mesh=None, rules=DEFAULT_RULES, hf_checkpoint: str = ""):
  """(model config, graphdef, params, path) of a BaseModelConfig's imported
  model: ``hf_checkpoint`` (the argument, else the config's) or ``base.model``
  (a GGUF name or path). With ``mesh`` each device reads its own shards in the
  ``rules`` layout, else the whole model lands on this process's first device."""
  hf_checkpoint = hf_checkpoint or base_cfg.hf_checkpoint
  if hf_checkpoint:
    model_cfg, graphdef, params = load_hf_checkpoint(hf_checkpoint, mesh, rules)
    path = hf_checkpoint
  elif base_cfg.model:
    model_cfg, graphdef, params = load_gguf_checkpoint(base_cfg.model, mesh, rules)
    path = resolve_gguf(base_cfg.model)
  else:
    raise ValueError("the base names no imported model: set base.hf_checkpoint (a Hugging Face "
                     "directory) or base.model (a GGUF file or a name such as smollm2-135m-instruct).")
  return (*with_attention(base_cfg, model_cfg, graphdef), params, path)
