"""The Pallas decode-attention kernel (interpreted on CPU) against a float64
NumPy softmax, and a sampler using it against the XLA path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.models.cache import LayerKV, attention_with_lse
from rlpt.models.decode_kernel import decode_attention, shared_mask_attention
from rlpt.sampling.quant import quantize_kv

B, Q, N, K, H = 4, 2, 8, 2, 16


def _numpy_attention(q, k, v, mask):
  """float64 softmax attention: q [B, Q, N, H], k [B, K, H, S], v [B, K, S, H],
  mask [B, S]; (out [B, Q, N, H], lse [B, Q, N]) with 0 / -inf for no keys."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  g = q.shape[2] // k.shape[1]
  kk = np.repeat(k, g, axis=1)                       # [B, N, H, S]
  vv = np.repeat(v, g, axis=1)                       # [B, N, S, H]
  s = np.einsum("bqnh,bnhs->bqns", q, kk) / np.sqrt(q.shape[-1])
  s = np.where(mask[:, None, None, :], s, -np.inf)
  m = s.max(-1, keepdims=True)
  m = np.where(np.isfinite(m), m, 0.0)
  p = np.exp(s - m)
  d = p.sum(-1, keepdims=True)
  out = np.einsum("bqns,bnsh->bqnh", p / np.where(d == 0, 1, d), vv)
  with np.errstate(divide="ignore"):
    lse = (m + np.log(d))[..., 0]
  return out, lse


def _case(s, dtype, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(B, Q, N, H)).astype(np.float32)
  k = rng.normal(size=(B, K, H, s)).astype(np.float32)
  v = rng.normal(size=(B, K, s, H)).astype(np.float32)
  mask = np.zeros((B, s), bool)
  mask[0, :5] = True            # a short row
  mask[1, 3:s - 7] = True       # padding on both sides
  mask[3, :] = True             # a full row; row 2 sees nothing
  cast = lambda x: np.array(jnp.asarray(x, dtype).astype(jnp.float32))
  return cast(q), cast(k), cast(v), mask, dtype


def _kernel(q, k, v, mask, dtype, block, scales=()):
  fn = jax.jit(lambda q, k, v, m, *sc: decode_attention(
      q, LayerKV(k, v, *sc), m, block=block, interpret=True))
  return fn(jnp.asarray(q, dtype), jnp.asarray(k, k.dtype if scales else dtype),
            jnp.asarray(v, v.dtype if scales else dtype), jnp.asarray(mask), *scales)


# The kernel multiplies in the cache's dtype with fp32 accumulation, so bf16
# is held to bf16's rounding of the probabilities (2^-8 relative).
@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
@pytest.mark.parametrize("s,block", [(64, 16), (70, 16), (12, 16)], ids=["blocks", "tail", "short"])
def test_kernel_matches_numpy(dtype, tol, s, block):
  q, k, v, mask, dt = _case(s, dtype)
  out, lse = _kernel(q, k, v, mask, dt, block)
  want_out, want_lse = _numpy_attention(q, k, v, mask)
  np.testing.assert_allclose(np.asarray(out), want_out, atol=tol, rtol=0)
  np.testing.assert_allclose(np.asarray(lse), want_lse, atol=tol, rtol=0)
  assert np.all(np.asarray(out)[2] == 0) and np.all(np.asarray(lse)[2] == -np.inf)


def test_int8_cache_matches_its_dequantized_values():
  q, k, v, mask, _ = _case(64, jnp.float32, seed=1)
  # quantize_kv takes [B, T, K, H]: the cache's layouts are its transposes.
  kq, ks = quantize_kv(jnp.asarray(k).transpose(0, 3, 1, 2))
  vq, vs = quantize_kv(jnp.asarray(v).transpose(0, 2, 1, 3))
  kq, ks = kq.transpose(0, 2, 3, 1), ks.transpose(0, 2, 1)   # [B, K, H, S], [B, K, S]
  vq, vs = vq.transpose(0, 2, 1, 3), vs.transpose(0, 2, 1)   # [B, K, S, H], [B, K, S]
  out, lse = _kernel(q, kq, vq, mask, jnp.float32, 16, (ks, vs))
  k_deq = np.asarray(kq, np.float64) * np.asarray(ks, np.float64)[:, :, None, :]
  v_deq = np.asarray(vq, np.float64) * np.asarray(vs, np.float64)[..., None]
  want_out, want_lse = _numpy_attention(q, k_deq, v_deq, mask)
  np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(lse), want_lse, atol=1e-5, rtol=0)


def test_blocks_past_a_rows_last_visible_key_are_never_read():
  # Every slot in whole blocks past a row's last visible key is NaN: reading
  # them at all would put NaN in the output (0 * NaN), as the XLA path does.
  q, k, v, mask, dt = _case(64, jnp.float32)
  mask[:] = False
  mask[:, :20] = True                     # blocks 0-1 of 4 are live (block 16)
  k[:, :, :, 32:] = np.nan
  v[:, :, 32:, :] = np.nan
  out, lse = _kernel(q, k, v, mask, dt, 16)
  want_out, want_lse = _numpy_attention(q, k[..., :20], v[:, :, :20], mask[:, :20])
  np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5, rtol=0)
  xla_out, _ = jax.jit(attention_with_lse)(
      jnp.asarray(q), LayerKV(jnp.asarray(k), jnp.asarray(v)),
      jnp.broadcast_to(jnp.asarray(mask)[:, None], (B, Q, 64)))
  assert np.isnan(np.asarray(xla_out)).any()


def test_xla_and_kernel_dispatch_agree():
  q, k, v, mask, dt = _case(48, jnp.float32, seed=2)
  args = (jnp.asarray(q), LayerKV(jnp.asarray(k), jnp.asarray(v)), jnp.asarray(mask))
  a = jax.jit(lambda *x: shared_mask_attention(*x, "xla"))(*args)
  b = jax.jit(lambda *x: shared_mask_attention(*x, "pallas-interpret"))(*args)
  for x, y in zip(a, b):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5, rtol=0)
  with pytest.raises(ValueError, match="decode_kernel 'triton'"):
    shared_mask_attention(*args, "triton")


@pytest.mark.parametrize("kv_int8", [False, True])
def test_a_sampler_on_the_kernel_samples_what_the_xla_path_samples(monkeypatch, kv_int8):
  from flax import nnx

  from rlpt.models import ModelConfig, Transformer
  from rlpt.models import decode_kernel
  from rlpt.sampling import SamplingParams
  from rlpt.sampling.fast import FastSampler
  from rlpt.sampling.prefix import PrefixLayout
  monkeypatch.setattr(decode_kernel, "DEFAULT_BLOCK", 8)  # several blocks at these sizes
  cfg = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                    head_dim=8, mlp_dim=48)
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  rng = np.random.default_rng(3)
  lengths = np.array([3, 17, 9])
  ids = np.full((3, 17), 37, np.int32)
  for i, n in enumerate(lengths):
    ids[i, :n] = rng.integers(0, 36, n)
  outs = {}
  for kernel in ("xla", "pallas-interpret"):
    layout = PrefixLayout(2, kv_int8, aligned=True, decode_kernel=kernel)
    sampler = FastSampler(graphdef, cfg, 17, 12, 37, (39,), layout)
    outs[kernel] = sampler.generate(params, ids, lengths, jax.random.key(5),
                                    SamplingParams(1.0, top_p=0.9))
  a, b = outs["xla"], outs["pallas-interpret"]
  np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
  np.testing.assert_allclose(np.asarray(a.logprobs), np.asarray(b.logprobs), atol=2e-5, rtol=0)
