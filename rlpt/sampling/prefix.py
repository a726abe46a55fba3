"""Prefix-shared cache for a GRPO group: G samples of one prompt share its cache.

A group's prompt is prefilled once (P prompts, not P * G rows) and its keys
and values are kept once per group. Each row decodes into its own suffix
cache. A query's attention is split in two partial softmaxes over disjoint
key sets, the group's prompt and the row's own suffix, and merged exactly by
log-sum-exp (``rlpt.models.cache.merge_attention``):

  out = (o_pre * exp(lse_pre - m) + o_suf * exp(lse_suf - m))
        / (exp(lse_pre - m) + exp(lse_suf - m)),   m = max(lse_pre, lse_suf)

The prefix attention needs no gather: the B = P * G queries are viewed as
[P, G * T] and attend to the [P, S_prefix] cache directly.

Layout: the prefix holds a prompt's first len - 1 tokens (slots < prefix_len
are valid); the last prompt token is the first pending token of every row,
so it lives in each row's suffix (slot 0 = position prefix_len). A row's
suffix slot j holds position prefix_len + j.

Lockstep (``aligned``): when every row caches its j-th suffix token at the
same step (the static sampler's loop, where even finished rows keep
stepping), step j writes suffix slot j of all rows at once: one in-place
dynamic-update-slice instead of a scatter of per-row slots. With
group_size 1 this is the static fast sampler's layout: a row's prompt and
what it generates in two parts, each written once, read each step.

Saving (fp32, per layer, per kv head): P * (G * (S_p + N) -> S_p + G * N)
entries for prompt width S_p and N new tokens, and a prefill of P rows
instead of P * G (a 16x smaller prefill for a group of 16).

``StoredPrefixLayout`` is the same split for rows that are not laid out in
groups (the continuous-batching engine's slots, rlpt.engine): each row names
its prefix's row in a shared store, and one layer's prefix rows are gathered
per step (a transient of one layer, not a cache of every layer).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlpt.models import ModelConfig
from rlpt.models.cache import attention_with_lse, merge_attention
from rlpt.models.decode_kernel import check_kernel, shared_mask_attention
from rlpt.sampling.fast import AnyKV, FlatLayout, read_layer, write_layer
from rlpt.sampling.sampler import grow_slots


class PrefixCache(NamedTuple):
  """prefix: a cache of P rows (one per group) and S_p slots; prefix_len_P: valid
  prefix slots; suffix: a cache of P * G rows (one per row) and S_s slots. fp32
  KVCache or Int8KVCache (rlpt.models.KVCache has the per-layer layout)."""

  prefix: AnyKV
  prefix_len_P: jax.Array
  suffix: AnyKV


@dataclasses.dataclass(frozen=True)
class PrefixLayout:
  """Cache layout for ``group_size`` rows per prompt sharing the prompt's cache.

  ``aligned``: rows step in lockstep (see the module docstring); only a loop
  that keeps every row stepping may set it (rlpt.sampling.fast.FastSampler).
  """

  group_size: int
  kv_int8: bool = False
  aligned: bool = False
  decode_kernel: str = "xla"

  def __post_init__(self):
    check_kernel(self.decode_kernel)
    if self.group_size < 1:
      raise ValueError(f"group_size must be >= 1, got {self.group_size}.")

  def prefill(self, graphdef, cfg: ModelConfig, params, prompts_PxL, lengths_P,
              suffix_len: int) -> PrefixCache:
    flat = FlatLayout(self.kv_int8)
    prefix = flat.prefill(graphdef, cfg, params, prompts_PxL, lengths_P, 0)
    suffix = flat.init(cfg, prompts_PxL.shape[0] * self.group_size, suffix_len)
    return PrefixCache(prefix, lengths_P - 1, suffix)

  def grow(self, cache: PrefixCache, extra: int) -> PrefixCache:
    """More suffix slots (the shared prefix is complete after prefill)."""
    return cache._replace(suffix=grow_slots(cache.suffix, extra))

  def attend(self, cache: PrefixCache, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, positions_BxT):
    b, t, n, h = q_BxTxNxH.shape
    p, g = cache.prefix_len_P.shape[0], self.group_size

    def prefix():
      kv = read_layer(cache.prefix, layer)
      mask_PxS = jnp.arange(kv.length)[None, :] < cache.prefix_len_P[:, None]
      out, lse = shared_mask_attention(q_BxTxNxH.reshape(p, g * t, n, h), kv, mask_PxS,
                                       self.decode_kernel)
      return out.reshape(b, t, n, h), lse.reshape(b, t, n)

    prefix_len_B = jnp.repeat(cache.prefix_len_P, g)
    slot = positions_BxT[0, 0] - prefix_len_B[0] if self.aligned else None
    out, suffix = split_attention(cache.suffix, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH,
                                  positions_BxT, prefix_len_B, prefix, slot, self.decode_kernel)
    return out, cache._replace(suffix=suffix)


def split_attention(suffix: AnyKV, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, positions_BxT,
                    prefix_len_B, prefix_attention, slot=None, decode_kernel: str = "xla"):
  """Attention over a row's prefix and its own suffix, merged by log-sum-exp.

  Writes the new keys/values into ``suffix`` (slot = position - prefix length;
  ``slot``: that slot as one scalar, when it is every row's), attends over the
  suffix's positions up to each query's, and merges with
  ``prefix_attention()`` -> (out, lse) over the prefix's keys;
  ``decode_kernel``: how a decode step attends to the suffix. Returns (out,
  suffix)."""
  if slot is None:
    slot = positions_BxT[:, 0] - prefix_len_B
  suffix = write_layer(suffix, layer, k_BxTxKxH, v_BxTxKxH, slot)
  kv = read_layer(suffix, layer)
  key_pos_BxS = prefix_len_B[:, None] + jnp.arange(kv.length)[None, :]
  if q_BxTxNxH.shape[1] == 1:  # decode: one key mask a row
    o_suf, lse_suf = shared_mask_attention(q_BxTxNxH, kv, key_pos_BxS <= positions_BxT,
                                           decode_kernel)
  else:
    o_suf, lse_suf = attention_with_lse(q_BxTxNxH, kv,
                                        key_pos_BxS[:, None, :] <= positions_BxT[:, :, None])
  o_pre, lse_pre = prefix_attention()
  return merge_attention(o_pre, lse_pre, o_suf, lse_suf), suffix


class StoredPrefix(NamedTuple):
  """Rows that read their prefix from a store by index (the engine's shared
  prompts): store: a cache of R prefix rows; row_B: the store row of each
  row's prefix; len_B: its valid positions (0: no prefix); rows: each row's
  own suffix cache (slot j = position len_B + j)."""

  store: AnyKV
  row_B: jax.Array
  len_B: jax.Array
  rows: AnyKV


@dataclasses.dataclass(frozen=True)
class StoredPrefixLayout:
  """Cache layout for rows whose prefixes live in a shared store, any row any
  prefix (``StoredPrefix``): each step gathers one layer's prefix rows at a
  time, so the store holds a prefix once however many rows read it. The
  store's type (fp32 or int8) says how to read it, so the layout has no fields."""

  def attend(self, cache: StoredPrefix, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, positions_BxT):
    b, t = q_BxTxNxH.shape[:2]

    def prefix():
      one = type(cache.store)(*((jnp.take(f[layer], cache.row_B, axis=0, mode="clip"),)
                                for f in cache.store))
      kv = read_layer(one, 0)
      mask_BxTxS = jnp.broadcast_to(
          jnp.arange(kv.length)[None, None, :] < cache.len_B[:, None, None], (b, t, kv.length))
      return attention_with_lse(q_BxTxNxH, kv, mask_BxTxS)

    out, rows = split_attention(cache.rows, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH,
                                positions_BxT, cache.len_B, prefix)
    return out, cache._replace(rows=rows)
