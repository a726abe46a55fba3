"""Shared inputs and comparisons for the attention tests (fp32 throughout)."""

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.attention import reference_attention

# fp32 tolerances: outputs differ from the dense oracle only by summation
# order (~1e-6 observed); gradients accumulate over blocks and ring steps.
FWD_ATOL = 1e-5
GRAD_ATOL = 1e-4


def qkv(b=2, t=64, n=4, kh=2, h=8, seed=0):
  # NumPy draws: no per-shape compile of jax.random (tests stay fast on 2 cores).
  rng = np.random.default_rng(seed)
  return tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32)
               for shape in ((b, t, n, h), (b, t, kh, h), (b, t, kh, h)))


def arange_positions(b, t):
  return jnp.asarray(np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)))


def _out_and_grads(fn, w, mask_kw):
  """One compiled program: the output and the vjp of a fixed cotangent w."""

  @jax.jit
  def run(q, k, v):
    out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, **mask_kw), q, k, v)
    return out, vjp(w)

  return run


def check_against_reference(fn, q, k, v, **mask_kw):
  """Asserts fn(q, k, v, **mask_kw) and its q/k/v gradients match the dense oracle."""
  # A fixed random cotangent: every output element matters, none cancels.
  w = jnp.asarray(np.random.default_rng(99).standard_normal(q.shape), jnp.float32)
  out, grads = _out_and_grads(fn, w, mask_kw)(q, k, v)
  ref, ref_grads = _out_and_grads(reference_attention, w, mask_kw)(q, k, v)
  np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=FWD_ATOL, rtol=0)
  for name, g, r in zip("qkv", grads, ref_grads):
    assert np.all(np.isfinite(np.asarray(g))), f"d{name} not finite"
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), atol=GRAD_ATOL, rtol=0,
                               err_msg=f"d{name}")
