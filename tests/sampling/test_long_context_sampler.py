"""Long-context sampling: no [T, S] mask; kernels mask by position.

The sampler with attention_impl blockwise / sparse / ring must draw exactly
the dense sampler's tokens (same rng stream) with log-probs within 2e-5
(summation order only). The ring case runs on 8 emulated devices with the
prompt and the KV cache sharded on the `sequence` axis: prefill by ring
attention, every decode step over the sharded cache merged by log-sum-exp.
"""

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.device import ProgramPool, jit_sampler
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import SAMPLE_RULES, make_mesh, state_shardings

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48, attention_block_size=8)
PAD, BOS, EOS = 37, 38, 39
P, N = 48, 12


def _prompts(b=8, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(3, P + 1, size=b).astype(np.int32)
  ids = np.full((b, P), PAD, np.int32)
  for i, n in enumerate(lengths):
    ids[i, 0] = BOS
    ids[i, 1:n] = rng.integers(0, 30, size=n - 1)
  return ids, lengths


@pytest.fixture(scope="module")
def model():
  return nnx.split(Transformer(CFG, nnx.Rngs(0)))


def _graphdef(cfg):
  # The attention config is part of the module graph; the weights are not affected by it.
  return nnx.split(Transformer(cfg, nnx.Rngs(0)))[0]


def _sample(cfg, graphdef, params, sampling, generate=None):
  ids, lengths = _prompts()
  graphdef = _graphdef(cfg)
  sampler = Sampler(graphdef, cfg, P, N, PAD, (EOS,))
  if generate is None:
    out = sampler.generate(params, ids, lengths, jax.random.key(3), sampling)
  else:
    out = generate(sampler, params, ids, lengths)
  return [np.asarray(x) for x in out]


@pytest.mark.parametrize("impl,window", [("blockwise", 0), ("sparse", 12)])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_kernel_sampler_draws_the_dense_samplers_tokens(model, impl, window, temperature):
  graphdef, params = model
  sampling = SamplingParams(temperature)
  dense_cfg = dataclasses.replace(CFG, attention_window=window)
  kernel_cfg = dataclasses.replace(CFG, attention_impl=impl, attention_window=window)
  assert Sampler(graphdef, kernel_cfg, P, N, PAD, ()).long_context
  want = _sample(dense_cfg, graphdef, params, sampling)
  got = _sample(kernel_cfg, graphdef, params, sampling)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[2], want[2])
  np.testing.assert_allclose(got[1], want[1], atol=2e-5, rtol=0)


def test_ring_sampler_over_a_sequence_sharded_cache(model):
  graphdef, params = model
  sampling = SamplingParams(1.0)
  mesh = make_mesh({"data": 2, "sequence": 4})
  rules = tuple((name, "sequence") if name == "seq" else (name, target)
                for name, target in SAMPLE_RULES)
  ring_cfg = dataclasses.replace(CFG, attention_impl="ring")

  def generate(sampler, params, ids, lengths):
    sh = state_shardings(params, mesh, rules)
    fn = jit_sampler(ProgramPool(), sampler, sampling, sh, mesh, rules)
    placed = jax.device_put(params, sh)
    return fn(placed, ids, lengths, jax.random.key_data(jax.random.key(3)))

  want = _sample(CFG, graphdef, params, sampling)
  got = _sample(ring_cfg, graphdef, params, sampling, generate)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_allclose(got[1], want[1], atol=2e-5, rtol=0)

  # The compiled program passes key/value blocks around the ring in the
  # prefill (collective-permute) and merges per-shard decode partials
  # (all-reduce); the dense sampler on the same mesh does neither.
  ids, lengths = _prompts()
  sh = state_shardings(params, mesh, rules)
  args = (jax.device_put(params, sh), ids, lengths, jax.random.key_data(jax.random.key(3)))

  def hlo(cfg):
    sampler = Sampler(_graphdef(cfg), cfg, P, N, PAD, (EOS,))
    return jit_sampler(ProgramPool(), sampler, sampling, sh, mesh, rules).lower(*args).compile().as_text()

  ring_hlo, dense_hlo = hlo(ring_cfg), hlo(CFG)
  assert "collective-permute" in ring_hlo and "all-reduce" in ring_hlo
  assert "collective-permute" not in dense_hlo
