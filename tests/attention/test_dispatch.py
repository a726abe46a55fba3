"""The `attention` entry point: implementation choice, equivalence, and argument errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.attention import attention, attention_mask, reference_attention, resolve_impl
from rlpt.attention.dispatch import nn_dot_product_attention
from rlpt.sharding import make_mesh
from tests.attention._util import FWD_ATOL, arange_positions, qkv


def _resolve(t, **kw):
  q, k, _ = qkv(b=1, t=t)
  args = dict(window=None, num_sinks=0, block_size=16, mesh=None, trivial_positions=True)
  args.update(kw)
  return resolve_impl("auto", q, k, **args)


def test_auto_on_cpu_picks_pure_jax():
  assert jax.default_backend() == "cpu"
  assert _resolve(16) == "dense"
  assert _resolve(64) == "blockwise"
  assert _resolve(16, window=4) == "sparse"
  assert _resolve(64, mesh=make_mesh({"sequence": 8})) == "ring"
  assert _resolve(64, mesh=make_mesh({"data": 8})) == "blockwise"


@pytest.mark.parametrize("impl", ["dense", "blockwise", "sparse", "ring", "auto"])
def test_every_impl_equals_reference(impl):
  q, k, v = qkv(t=48)
  pos = arange_positions(2, 48)
  kw = dict(q_positions=pos, kv_positions=pos, kv_valid=pos < jnp.array([[48], [30]]),
            window=20, num_sinks=1)
  ref = reference_attention(q, k, v, **kw)
  if impl == "ring":
    # No mesh argument: the ring takes the mesh from jax.set_mesh.
    with jax.set_mesh(make_mesh({"sequence": 8})):
      out = attention(q, k, v, impl=impl, block_size=8, **kw)
  else:
    out = attention(q, k, v, impl=impl, block_size=8, **kw)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=FWD_ATOL, rtol=0)


def test_jax_nn_path_matches_our_semantics():
  """The argument mapping used for cuDNN, checked through jax's XLA implementation."""
  q, k, v = qkv(t=40)
  pos = arange_positions(2, 40)
  valid = pos < jnp.array([[40], [25]])
  for window in (None, 7):
    out = nn_dot_product_attention(q, k, v, kv_valid=valid, window=window,
                                   implementation="xla")
    ref = reference_attention(q, k, v, q_positions=pos, kv_positions=pos, kv_valid=valid,
                              window=window)
    # Rows that see no key (beyond a short row's end + window) are zeros for us
    # and an arbitrary average for jax; only rows with a visible key compare.
    seen = np.asarray(attention_mask(pos, pos, valid, window).any(-1))
    np.testing.assert_allclose(np.asarray(out)[seen], np.asarray(ref)[seen], atol=FWD_ATOL,
                               rtol=0)


@pytest.mark.parametrize("kw,match", [
    (dict(impl="flash"), "impl must be one of"),
    (dict(impl="sparse"), "needs a window"),
    (dict(window=0), "window must be None or a positive int"),
    (dict(num_sinks=-1), "num_sinks must be a non-negative int"),
    (dict(block_size=0), "block_size must be a positive int"),
    (dict(impl="ring"), "needs a mesh with a 'sequence' axis"),
    (dict(impl="cudnn"), "needs trivial_positions=True"),
])
def test_bad_arguments_raise(kw, match):
  q, k, v = qkv(t=8)
  pos = arange_positions(2, 8)
  with pytest.raises(ValueError, match=match):
    attention(q, k, v, q_positions=pos, kv_positions=pos, **kw)


def test_bad_shapes_raise():
  q, k, v = qkv(t=8)
  pos = arange_positions(2, 8)
  with pytest.raises(ValueError, match="K must divide N"):
    attention(q[:, :, :3], k, v, q_positions=pos, kv_positions=pos)
  with pytest.raises(ValueError, match="q_positions"):
    attention(q, k, v, q_positions=pos[:, :4], kv_positions=pos)
