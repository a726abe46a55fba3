"""Packed prefill against one row per sequence, and the host's packing.

Reference: ``rlpt.sampling.slots.prefill_rows`` (each sequence in a row of
its own, attending over its store row), itself tested against the trainer's
forward. Tolerance: fp32 keys and values within 2e-5 absolute (summation
order only); int8 codes equal but for rounding ties (at most 1 code apart)
and scales within 1e-6. Rows and positions nothing was packed into stay
exactly as they were.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.engine.prefill import pack
from rlpt.models import ModelConfig, Transformer
from rlpt.sampling.fast import FlatLayout
from rlpt.sampling.packed import prefill_packed
from rlpt.sampling.slots import prefill_rows

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
SLOTS, LENGTH, C = 6, 24, 8


@pytest.fixture(scope="module")
def model():
  return nnx.split(Transformer(CFG, nnx.Rngs(0)))


def _chunks(seed):
  rng = np.random.default_rng(seed)
  lengths = [3, 5, 1, 8, 2]                  # slots 0, 2, 3, 4, 5; slot 1 untouched
  return [(s, rng.integers(0, 38, size=n).tolist()) for s, n in zip([0, 2, 3, 4, 5], lengths)]


@pytest.mark.parametrize("kv_int8", [False, True])
def test_packed_prefill_caches_what_one_row_per_sequence_does(model, kv_int8):
  graphdef, params = model
  layout = FlatLayout(kv_int8)
  store = layout.init(CFG, SLOTS, LENGTH)
  # Something already in every row, so that untouched rows can be checked.
  store = jax.tree.map(lambda x: x + jnp.asarray(3, x.dtype), store)
  chunks = _chunks(0)
  arrays, placed = pack(chunks, rows=3, c=C, nowhere=SLOTS)
  assert placed == [0, 1, 2, 3, 4]
  got = jax.jit(prefill_packed, static_argnums=0)(graphdef, params, store, *arrays)
  want = store
  for slot, toks in chunks:       # one call per sequence, its own row
    tokens = np.zeros((1, C), np.int32)
    tokens[0, :len(toks)] = toks
    one = jax.jit(prefill_rows, static_argnums=(0, 1))(
        graphdef, layout, params, want, jnp.array([slot]), jnp.asarray(tokens),
        jnp.zeros(1, jnp.int32), jnp.zeros(1, jnp.int32), jnp.zeros(1, jnp.int32))
    # prefill_rows also writes the chunk's padding positions; keep only the real ones.
    keep = lambda new, old, axis, n=len(toks), s=slot: _only(new, old, s, n, axis)
    want = type(want)(*(tuple(keep(a, b, _axis(name)) for a, b in zip(fa, fb))
                        for name, fa, fb in zip(want._fields, one, want)))
  for name, fg, fw in zip(got._fields, got, want):
    for layer, (g, w) in enumerate(zip(fg, fw)):
      g, w = np.asarray(g), np.asarray(w)
      if g.dtype == np.int8:
        assert np.abs(g.astype(int) - w.astype(int)).max() <= 1, name
      else:
        np.testing.assert_allclose(g, w, atol=2e-5 if not kv_int8 else 1e-6, rtol=0,
                                   err_msg=name)
      np.testing.assert_array_equal(g[1], np.asarray(getattr(store, name)[layer])[1])


def _axis(name):
  return 3 if name == "k" else 2


def _only(new, old, slot, n, axis):
  """``old`` with slot ``slot``'s first ``n`` positions taken from ``new``."""
  index = [slot] + [slice(None)] * (new.ndim - 1)
  index[axis] = slice(0, n)
  return old.at[tuple(index)].set(new[tuple(index)])


def test_pack_fits_chunks_first_fit_in_order():
  chunks = [(0, [1] * 5), (1, [2] * 4), (2, [3] * 3), (3, [4] * 8), (4, [5] * 2)]
  (rows, tokens, positions), placed = pack(chunks, rows=2, c=8, nowhere=9)
  # 5 -> row 0, 4 -> row 1, 3 -> row 0 (5 + 3), 8 fits nowhere, 2 -> row 1 (4 + 2).
  assert placed == [0, 1, 2, 4]
  np.testing.assert_array_equal(rows, [[0] * 5 + [2] * 3, [1] * 4 + [4] * 2 + [9] * 2])
  np.testing.assert_array_equal(positions, [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 0, 1, 0, 0]])
  np.testing.assert_array_equal(tokens[1], [2, 2, 2, 2, 5, 5, 0, 0])
  with pytest.raises(ValueError, match="a packed chunk has 1 to 8 tokens, got 9"):
    pack([(0, [1] * 9)], rows=2, c=8, nowhere=9)
