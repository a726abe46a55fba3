"""Decoder-only transformer policy and value models (Flax NNX)."""

from rlpt.models.cache import KVCache, causal_mask, init_cache, write_kv
from rlpt.config.model import ModelConfig
from rlpt.models.transformer import Decoder, Transformer, ValueModel
from rlpt.models.gguf import GGUF_MODELS, load_gguf_checkpoint, resolve_gguf

__all__ = [
    "ModelConfig",
    "KVCache",
    "Decoder",
    "Transformer",
    "ValueModel",
    "causal_mask",
    "init_cache",
    "write_kv",
    "GGUF_MODELS",
    "load_gguf_checkpoint",
    "resolve_gguf",
]
