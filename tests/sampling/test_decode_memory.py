"""What a decode step reads and writes: caches read as stored, writes in place.

References: NumPy in float64 (attention over a bf16 / int8 cache) and the
per-row write path (one slot for every row). Tolerances: bf16 operands with
fp32 accumulation, 2e-2 relative on the attention output (bf16 has 8
mantissa bits; the output is a convex combination of bf16 values, so its
error is that of a rounded query and probabilities); int8, the same sum as
dequantizing first up to fp32 reassociation, 2e-5; anything exact is compared
bit for bit.
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer, write_kv
from rlpt.models.transformer import project
from rlpt.sampling import SamplingParams
from rlpt.models.cache import LayerKV, attention_with_lse
from rlpt.sampling.fast import FastSampler
from rlpt.sampling.prefix import PrefixLayout
from rlpt.sampling.quant import quantize_kv
from rlpt.sampling.speculative import SpeculativeSampler
from sampling_testlib import right_padded_prompts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
PAD, BOS, EOS = 37, 38, 39


def _reference(q_BxNxH, k_BxKxHxS, v_BxKxSxH, valid_BxS):
  """float64 softmax attention of one query per row, grouped heads."""
  q, k, v = (np.asarray(x, np.float64) for x in (q_BxNxH, k_BxKxHxS, v_BxKxSxH))
  b, n, h = q.shape
  kh = k.shape[1]
  q = q.reshape(b, kh, n // kh, h) * h ** -0.5
  s = np.einsum("bkgh,bkhs->bkgs", q, k)
  s = np.where(valid_BxS[:, None, None], s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  return np.einsum("bkgs,bksh->bkgh", p, v).reshape(b, n, h)


def _case(seed=0, b=3, k=2, g=4, h=16, s=24):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(b, 1, k * g, h)).astype(np.float32)
  kk = rng.normal(size=(b, k, h, s)).astype(np.float32)
  v = rng.normal(size=(b, k, s, h)).astype(np.float32)
  valid = np.arange(s)[None, :] < np.array([5, s, 13])[:, None]
  return q, kk, v, valid


def test_a_bf16_cache_is_read_as_bf16_with_fp32_accumulation():
  q, k, v, valid = _case()
  qb, kb, vb = (jnp.asarray(x, jnp.bfloat16) for x in (q, k, v))
  out, lse = jax.jit(attention_with_lse)(qb, LayerKV(kb, vb), jnp.asarray(valid)[:, None])
  ref = _reference(np.asarray(qb, np.float32)[:, 0], np.asarray(kb, np.float32),
                   np.asarray(vb, np.float32), valid)
  assert out.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(lse)))
  np.testing.assert_allclose(np.asarray(out)[:, 0], ref, rtol=2e-2, atol=2e-2)
  # The program holds no fp32 copy of the cache: no f32 array of the cache's shape.
  hlo = jax.jit(attention_with_lse).lower(qb, LayerKV(kb, vb),
                                           jnp.asarray(valid)[:, None]).as_text()
  assert "f32[3,2,16,24]" not in hlo and "f32[3,2,24,16]" not in hlo


def test_an_int8_cache_is_read_as_codes_and_scaled_like_dequantizing_first():
  q, k, v, valid = _case(seed=1)
  kq, ks = quantize_kv(jnp.moveaxis(jnp.asarray(k), 2, 3))   # per (row, head, slot) scales
  vq, vs = quantize_kv(jnp.asarray(v))
  kq = jnp.moveaxis(kq, 3, 2)
  out, _ = attention_with_lse(jnp.asarray(q), LayerKV(kq, vq, ks, vs),
                              jnp.asarray(valid)[:, None])
  k_deq = np.asarray(kq, np.float64) * np.asarray(ks)[:, :, None, :]
  v_deq = np.asarray(vq, np.float64) * np.asarray(vs)[..., None]
  np.testing.assert_allclose(np.asarray(out)[:, 0], _reference(q[:, 0], k_deq, v_deq, valid),
                             rtol=2e-5, atol=2e-5)


def test_one_slot_for_every_row_writes_what_per_row_slots_write():
  rng = np.random.default_rng(2)
  cache_v = jnp.asarray(rng.normal(size=(3, 2, 9, 4)), jnp.bfloat16)
  cache_k = jnp.asarray(rng.normal(size=(3, 2, 4, 9)), jnp.bfloat16)
  new = jnp.asarray(rng.normal(size=(3, 1, 2, 4)), jnp.bfloat16)
  for cache, keys in ((cache_v, False), (cache_k, True)):
    one = write_kv(cache, new, jnp.int32(6), keys=keys)
    rows = write_kv(cache, new, jnp.full((3,), 6, jnp.int32), keys=keys)
    np.testing.assert_array_equal(np.asarray(one, np.float32), np.asarray(rows, np.float32))
  hlo = jax.jit(lambda c, u: write_kv(c, u, jnp.int32(6))).lower(cache_v, new).as_text()
  assert "dynamic_update_slice" in hlo and "scatter" not in hlo


def test_projections_accumulate_in_fp32_and_round_once():
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(2, 3, 64)), jnp.bfloat16)
  w = jnp.asarray(rng.normal(size=(64, 5)), jnp.float32)
  got = project("btd,df->btf", x, w, jnp.bfloat16)
  want = np.einsum("btd,df->btf", np.asarray(x, np.float64),
                   np.asarray(w.astype(jnp.bfloat16), np.float64))
  assert got.dtype == jnp.bfloat16
  # One rounding of the fp32 sum to bf16: within half a bf16 ulp (2^-9 relative).
  np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=2 ** -8, atol=1e-6)
  x32 = jnp.asarray(rng.normal(size=(2, 3, 64)), jnp.float32)
  np.testing.assert_array_equal(np.asarray(project("btd,df->btf", x32, w, jnp.float32)),
                                np.asarray(jnp.einsum("btd,df->btf", x32, w)))


@pytest.mark.parametrize("kv_int8", [False, True])
def test_the_lockstep_layout_samples_what_the_per_row_layout_samples(kv_int8):
  graphdef, params = nnx.split(Transformer(CFG, nnx.Rngs(0)))
  ids, lengths = right_padded_prompts(4, 9, 1, PAD, BOS)
  outs = []
  for aligned in (False, True):
    sampler = FastSampler(graphdef, CFG, 9, 11, PAD, (EOS,), PrefixLayout(1, kv_int8, aligned),
                          decode_phases=2)
    outs.append(sampler.generate(params, ids, lengths, jax.random.key(3), SamplingParams(1.0)))
  for a, b in zip(*outs):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(ValueError, match="aligned=False"):
    SpeculativeSampler(graphdef, CFG, graphdef, CFG, 9, 11, PAD, (EOS,), 2,
                       PrefixLayout(1, aligned=True))


def test_decode_bytes_counts_the_lockstep_write_as_in_place():
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import decode_bytes
  rows = {r["path"]: r for r in decode_bytes.main(
      ["--model=tiny", "--batches=8", "--context=256", "--prompt=64",
       "--paths=split-bf16,flat-bf16"])}
  for row in rows.values():
    # XLA reads at least the weights and the live cache once.
    assert row["bytes_accessed"] >= 0.95 * row["minimum_bytes"] > 0
  # The per-row scatter is counted as a read and a write of the whole cache;
  # the lockstep dynamic-update-slice as the entries it writes.
  assert rows["split-bf16"]["bytes_accessed"] < rows["flat-bf16"]["bytes_accessed"]
