"""Ring attention over the `sequence` axis (8 emulated devices) against the dense oracle."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from rlpt.attention import (
    from_zigzag,
    ring_attention,
    ring_attention_sharded,
    ring_work_per_device,
    to_zigzag,
    zigzag_indices,
)
from rlpt.sharding import make_mesh
from tests.attention._util import arange_positions, check_against_reference, qkv

N_DEV = 8


@pytest.fixture(scope="module")
def mesh():
  return make_mesh({"sequence": N_DEV})


CASES = {
    # name: (layout, qkv kwargs, block_size, mask kwargs)
    "contiguous_causal": ("contiguous", dict(t=64), 4, dict()),
    "zigzag_causal_gqa": ("zigzag", dict(t=64, n=6, kh=2), 4, dict()),
    # T=60 is padded to 64 inside; ragged rows, window and sinks together.
    "zigzag_window_sinks_ragged": ("zigzag", dict(t=60), 4, dict(window=9, num_sinks=2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_grads_match_dense(mesh, name):
  layout, shape_kw, block, mask_kw = CASES[name]
  q, k, v = qkv(**shape_kw)
  b, t = q.shape[:2]
  pos = arange_positions(b, t)
  kw = dict(q_positions=pos, kv_positions=pos, **mask_kw)
  if "ragged" in name:
    kw["kv_valid"] = pos < jnp.array([[t], [23]])
  fn = functools.partial(ring_attention, mesh=mesh, layout=layout, block_size=block)
  check_against_reference(fn, q, k, v, **kw)


def test_zigzag_round_trip_and_chunks():
  idx = zigzag_indices(32, 4)
  # Device 0 holds chunks 0 and 7, device 3 chunks 3 and 4 (4 tokens a chunk).
  np.testing.assert_array_equal(idx[:8], [0, 1, 2, 3, 28, 29, 30, 31])
  np.testing.assert_array_equal(idx[24:], [12, 13, 14, 15, 16, 17, 18, 19])
  x = jnp.arange(2 * 32 * 3).reshape(2, 32, 3)
  np.testing.assert_array_equal(np.asarray(from_zigzag(to_zigzag(x, 4), 4)), np.asarray(x))
  with pytest.raises(ValueError, match="divisible by 2 \\* num_shards"):
    zigzag_indices(30, 4)


def test_zigzag_balances_causal_work_and_contiguous_does_not():
  t = 1024
  pos = np.arange(t)
  chunk = t // (2 * N_DEV)
  for block in (chunk, chunk // 4):
    contiguous = ring_work_per_device(pos, N_DEV, block)
    zigzag = ring_work_per_device(pos[zigzag_indices(t, N_DEV)], N_DEV, block)
    assert len(set(zigzag.tolist())) == 1, zigzag
    assert contiguous.max() > 2 * contiguous.min(), contiguous
    # Same total: zigzag only redistributes the causal triangle.
    assert zigzag.sum() == contiguous.sum()


def test_ring_training_memory_per_device_is_bounded(mesh):
  """Compiled per-device temp memory of the ring backward stays ~O(T / n)."""

  def temp_bytes(t):
    shard = NamedSharding(mesh, P(None, "sequence"))
    sds = lambda shape, dt=jnp.float32: jax.ShapeDtypeStruct(shape, dt, sharding=shard)

    def loss(q, k, v, pos):
      return jnp.sum(ring_attention_sharded(q, k, v, q_positions=pos, kv_positions=pos,
                                            mesh=mesh, block_size=64) ** 2)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(
        sds((1, t, 2, 32)), sds((1, t, 1, 32)), sds((1, t, 1, 32)), sds((1, t), jnp.int32)).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  small, big = temp_bytes(8192), temp_bytes(65536)
  # 8x the tokens: a dense backward would need 64x (its T x T scores alone are
  # 2 * 65536^2 * 4 B = 32 GiB); the ring's per-device working set grows <= 8x.
  assert big < 8 * small, (small, big)
  assert big < 2**30, big
