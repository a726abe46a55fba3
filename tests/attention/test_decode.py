"""Decode over a KV cache sharded on `sequence` equals dense decode."""

import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.attention import reference_attention, sharded_decode_attention
from rlpt.sharding import make_mesh
from tests.attention._util import FWD_ATOL


@pytest.mark.parametrize("t,window,num_sinks", [(1, None, 0), (3, 16, 2)])
def test_sharded_cache_decode_equals_dense(t, window, num_sinks):
  mesh = make_mesh({"sequence": 8})
  b, s, n, kh, h = 3, 128, 4, 2, 8
  rng = np.random.default_rng(5)
  q, k_cache, v_cache = (jnp.asarray(rng.standard_normal(shape), jnp.float32)
                         for shape in ((b, t, n, h), (b, s, kh, h), (b, s, kh, h)))
  # Rows at different decode steps: the new tokens sit at positions
  # [length - t, length); slots at or beyond `length` are unwritten (and hold
  # garbage, which must not leak in). Row 2's cache lives on device 0 only.
  lengths = jnp.array([128, 77, 9])
  q_pos = lengths[:, None] - t + jnp.arange(t)[None]
  kv_pos = jnp.broadcast_to(jnp.arange(s), (b, s))
  valid = kv_pos < lengths[:, None]
  k_cache = jnp.where(valid[..., None, None], k_cache, 1e3)
  kw = dict(q_positions=q_pos, kv_positions=kv_pos, kv_valid=valid, window=window,
            num_sinks=num_sinks)
  out = sharded_decode_attention(q, k_cache, v_cache, mesh=mesh, block_size=8, **kw)
  ref = reference_attention(q, k_cache, v_cache, **kw)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=FWD_ATOL, rtol=0)
