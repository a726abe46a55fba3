"""Attention for long contexts: dense oracle, blockwise, sparse, ring, sharded decode, RoPE scaling.

Everything masks by token positions (causal, optional sliding window with
attention sinks, optional kv_valid), so layouts and caches never change the
result. ``attention`` is the single entry point that picks an implementation.
"""

from rlpt.attention.blockwise import blockwise_attention, needed_block_pairs
from rlpt.attention.decode import sharded_decode_attention
from rlpt.attention.dispatch import IMPLS, attention, resolve_impl
from rlpt.attention.reference import (
    attention_mask,
    reference_attention,
    reference_attention_with_lse,
)
from rlpt.attention.ring import (
    from_zigzag,
    ring_attention,
    ring_attention_sharded,
    ring_work_per_device,
    to_zigzag,
    zigzag_indices,
)
from rlpt.attention.rope import apply_rope_with_frequencies, rope_frequencies
from rlpt.config.model import RopeScaling

__all__ = [
    "IMPLS",
    "RopeScaling",
    "apply_rope_with_frequencies",
    "attention",
    "attention_mask",
    "blockwise_attention",
    "from_zigzag",
    "needed_block_pairs",
    "reference_attention",
    "reference_attention_with_lse",
    "resolve_impl",
    "ring_attention",
    "ring_attention_sharded",
    "ring_work_per_device",
    "rope_frequencies",
    "sharded_decode_attention",
    "to_zigzag",
    "zigzag_indices",
]
