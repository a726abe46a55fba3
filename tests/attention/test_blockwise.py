"""Blockwise and sparse (windowed) attention against the dense fp32 oracle."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.attention import blockwise_attention, needed_block_pairs, reference_attention
from tests.attention._util import FWD_ATOL, arange_positions, check_against_reference, qkv

CASES = {
    # name: (qkv kwargs, block_size, mask kwargs builder)
    "causal": (dict(), 16, dict()),
    "causal_mqa_ragged_len": (dict(t=53, n=4, kh=1), 16, dict()),
    "window": (dict(), 8, dict(window=12)),
    "window_sinks_gqa": (dict(n=6, kh=2), 8, dict(window=10, num_sinks=3)),
    "ragged_kv_valid": (dict(b=3), 16, "ragged"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_grads_match_dense(name):
  shape_kw, block, mask_kw = CASES[name]
  q, k, v = qkv(**shape_kw)
  b, t = q.shape[:2]
  pos = arange_positions(b, t)
  kw = dict(q_positions=pos, kv_positions=pos)
  if mask_kw == "ragged":
    # Full, partial and empty rows; an empty row must give zeros and zero grads.
    kw["kv_valid"] = pos < jnp.array([[t], [t // 3], [0]])
  else:
    kw.update(mask_kw)
  check_against_reference(functools.partial(blockwise_attention, block_size=block), q, k, v, **kw)


def test_any_token_order_gives_the_same_result():
  """Masking is by position, not index: shuffled (packed) layouts need no special case."""
  q, k, v = qkv(b=1, t=48)
  perm = np.random.default_rng(0).permutation(48)
  pos = jnp.asarray(perm, jnp.int32)[None]
  kw = dict(q_positions=pos, kv_positions=pos, window=20, num_sinks=2)
  out = blockwise_attention(q, k, v, block_size=8, **kw)
  np.testing.assert_allclose(np.asarray(out), np.asarray(reference_attention(q, k, v, **kw)),
                             atol=FWD_ATOL, rtol=0)


def test_skipped_blocks_are_never_read():
  """NaN values in blocks the schedule skips must not reach the output: the
  kernel does not touch them, so the saving is real (not masked compute)."""
  t, block = 64, 8
  q, k, v = qkv(b=1, t=t)
  pos = arange_positions(1, t)
  # Causal: the last key block is needed only by the last query block.
  v_nan = v.at[:, t - block:].set(jnp.nan)
  out = blockwise_attention(q, k, v_nan, q_positions=pos, kv_positions=pos, block_size=block)
  assert np.all(np.isfinite(np.asarray(out[:, :t - block])))
  # Window 8 + 2 sinks: block 1 (keys 8..15) is outside every window from query 24 on.
  v_nan = v.at[:, block:2 * block].set(jnp.nan)
  out = blockwise_attention(q, k, v_nan, q_positions=pos, kv_positions=pos, window=8,
                            num_sinks=2, block_size=block)
  assert np.all(np.isfinite(np.asarray(out[:, 3 * block:])))


def test_block_schedule_counts():
  t, block = 1024, 64
  nb = t // block
  pos = arange_positions(1, t)
  causal = needed_block_pairs(pos, pos, None, block, block)
  assert int(causal.sum()) == nb * (nb + 1) // 2
  # A window of 2 blocks touches at most 3 key blocks per query block; sinks add block 0.
  windowed = needed_block_pairs(pos, pos, None, block, block, window=2 * block, num_sinks=4)
  assert int(windowed.sum(axis=1).max()) <= 4
  assert int(windowed.sum()) < nb * 4
