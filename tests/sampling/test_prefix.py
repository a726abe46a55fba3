"""A prefix-shared group cache computes what an unshared (repeated-prompt) cache computes.

Tolerance: fp32, the two paths differ by the log-sum-exp merge's rounding:
2e-5 absolute on logits and log-probs (as the sampler's parity tests).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.rollout import build_sequences
from rlpt.sampling import SamplingParams
from rlpt.sampling.fast import FastSampler, FlatLayout, cached_forward
from rlpt.sampling.prefix import PrefixLayout
from rlpt.sampling.quant import quantize_params, tree_bytes
from rlpt.sampling.speculative import SpeculativeSampler
from rlpt.steps import sequence_logprobs
from sampling_testlib import right_padded_prompts

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
DRAFT = ModelConfig(vocab_size=40, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                    head_dim=8, mlp_dim=32)
PAD, BOS, EOS = 37, 38, 39
G = 4
ATOL = 2e-5


@pytest.fixture(scope="module")
def model():
  return nnx.split(Transformer(CFG, nnx.Rngs(0)))


def _prompts(b=3, p=10, seed=0):
  return right_padded_prompts(b, p, seed, PAD, BOS)


@pytest.mark.parametrize("kv_int8", [False, True])
def test_decode_logits_equal_unshared(model, kv_int8):
  graphdef, params = model
  ids, lengths = _prompts()
  flat, shared = FlatLayout(kv_int8), PrefixLayout(G, kv_int8)
  rep_ids, rep_len = np.repeat(ids, G, 0), np.repeat(lengths, G)
  # Three decode tokens per row at each row's own position (pending + 2).
  toks = jax.random.randint(jax.random.key(1), (len(rep_ids), 3), 0, 30)
  pos = jnp.asarray(rep_len - 1)[:, None] + jnp.arange(3)

  @jax.jit
  def run(params):
    c_flat = flat.prefill(graphdef, CFG, params, jnp.asarray(rep_ids), jnp.asarray(rep_len), 8)
    c_shared = shared.prefill(graphdef, CFG, params, jnp.asarray(ids), jnp.asarray(lengths), 8)
    a, c_shared = cached_forward(graphdef, params, toks, pos, c_shared, shared)
    b, _ = cached_forward(graphdef, params, toks, pos, c_flat, flat)
    return a, b, c_shared, c_flat

  a, b, c_shared, c_flat = run(params)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=ATOL, rtol=0)
  assert tree_bytes(c_shared) < tree_bytes(c_flat)


@pytest.mark.parametrize("sampling", [SamplingParams(1.0, top_p=0.9), SamplingParams(0.0)])
def test_group_sampler_equals_repeated_prompts(model, sampling):
  # Same rng stream and row order (row p * G + g), so the same tokens are drawn.
  graphdef, params = model
  ids, lengths = _prompts()
  flat = FastSampler(graphdef, CFG, 10, 12, PAD, (EOS,))
  shared = FastSampler(graphdef, CFG, 10, 12, PAD, (EOS,), PrefixLayout(G))
  ref = flat.generate(params, np.repeat(ids, G, 0), np.repeat(lengths, G), jax.random.key(5),
                      sampling)
  out = shared.generate(params, ids, lengths, jax.random.key(5), sampling)
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
  np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(ref.lengths))
  np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=ATOL)
  tokens, logp, n = map(np.asarray, out)
  seq = build_sequences(np.repeat(ids, G, 0), np.repeat(lengths, G), tokens, n, logp, PAD)
  mask = seq.loss_mask > 0
  trainer = sequence_logprobs(graphdef, params, jnp.asarray(seq.tokens), sampling)
  np.testing.assert_allclose(np.asarray(trainer)[mask], seq.logp[mask], atol=ATOL, rtol=0)


def test_all_switches_combined_greedy_equals_plain_loop(model):
  # Speculative + prefix-shared + int8 KV + int8 weights (target and draft)
  # emits exactly the greedy tokens of the plain loop on the same int8 model.
  graphdef, params = model
  dgraph, dparams = nnx.split(Transformer(DRAFT, nnx.Rngs(1)))
  ids, lengths = _prompts(seed=2)
  layout = PrefixLayout(G, kv_int8=True)
  qparams = quantize_params(params)
  plain = FastSampler(graphdef, CFG, 10, 9, PAD, (EOS,), layout)
  ref = plain.generate(qparams, ids, lengths, jax.random.key(0), SamplingParams(0.0))
  spec = SpeculativeSampler(graphdef, CFG, dgraph, DRAFT, 10, 9, PAD, (EOS,), 3, layout)
  out, stats = spec.generate(qparams, quantize_params(dparams), ids, lengths, jax.random.key(0),
                             SamplingParams(0.0))
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
  np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=ATOL)
  assert int(stats.proposed) > 0
