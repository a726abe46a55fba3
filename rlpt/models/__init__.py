"""Decoder-only transformer policy and value models (Flax NNX)."""

from rlpt.models.config import ModelConfig
from rlpt.models.transformer import (
    KVCache,
    Decoder,
    Transformer,
    ValueModel,
    causal_mask,
    init_cache,
    write_kv,
)

__all__ = [
    "ModelConfig",
    "KVCache",
    "Decoder",
    "Transformer",
    "ValueModel",
    "causal_mask",
    "init_cache",
    "write_kv",
]
