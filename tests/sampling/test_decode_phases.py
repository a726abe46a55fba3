"""Decode phases (a cache grown in stages) sample exactly what one full-size cache samples.

Same rng stream, so the same tokens are drawn; log-probs agree to 2e-5
(fp32: the softmax runs over fewer masked slots, which only changes the
summation's shape; masked slots contribute exactly 0 either way).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import KVCache, ModelConfig, Transformer, init_cache
from rlpt.rollout import build_sequences
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sampling.fast import FastSampler, FlatLayout
from rlpt.sampling.prefix import PrefixLayout
from rlpt.sampling.quant import init_int8_cache
from rlpt.sampling.sampler import decode_bounds, grow_slots
from rlpt.steps import sequence_logprobs
from sampling_testlib import right_padded_prompts

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
PAD, BOS, EOS = 37, 38, 39
ATOL = 2e-5
SAMPLING = SamplingParams(1.0)


@pytest.fixture(scope="module")
def model():
  return nnx.split(Transformer(CFG, nnx.Rngs(0)))


def _prompts(b=4, p=10, seed=0):
  return right_padded_prompts(b, p, seed, PAD, BOS)


def _assert_same(out, ref):
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
  np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(ref.lengths))
  np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=ATOL,
                             rtol=0)


def test_phases_chosen_from_the_shape():
  from rlpt.sampling.sampler import auto_decode_phases
  assert [auto_decode_phases(n) for n in (8, 24, 32, 64, 128, 1024)] == [1, 1, 2, 4, 8, 8]


def test_a_run_resolves_auto_phases_by_its_model(tmp_path):
  """rollout.decode_phases=0 (the default): the shape's phases for dense
  attention, 1 for a blockwise model and with speculative decoding."""
  from rlpt.config import RolloutConfig, TrainConfig
  from rlpt.device import RunContext
  from rlpt.rollout.generation import RolloutSampling
  from rlpt.rollout.sections import SampledModel, SourceConfig
  from rlpt.sharding import DEFAULT_RULES, make_mesh, state_shardings
  from rlpt.tokenizers import ByteTokenizer
  mesh = make_mesh({"data": -1})
  ro = RolloutConfig(batch_size=4, group_size=2, max_prompt_len=16, max_new_tokens=64)
  assert ro.decode_phases == 0
  got = {}
  for name, cfg in (("dense", CFG), ("blockwise", dataclasses.replace(CFG, attention_impl="blockwise"))):
    graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
    ctx = RunContext(mesh, DEFAULT_RULES, DEFAULT_RULES, seed=0, tokenizer=ByteTokenizer())
    rs = RolloutSampling(SourceConfig.from_train(TrainConfig(rollout=ro, steps=1)), ctx,
                         SampledModel(cfg, graphdef, state_shardings(params, mesh, DEFAULT_RULES)))
    got[name] = (rs.decode_phases, rs.sampler.decode_phases)
  assert got == {"dense": (4, 4), "blockwise": (1, 1)}


def test_bounds():
  assert decode_bounds(128, 1) == (128,)
  assert decode_bounds(128, 4) == (32, 64, 96, 128)
  assert decode_bounds(20, 3) == (8, 16, 20)        # rounded up to 8, last = max_new_tokens
  assert decode_bounds(5, 4) == (5,)                # rounding merges phases
  assert decode_bounds(64, 8, multiple=1) == tuple(range(8, 65, 8))


def test_grow_slots_pads_the_slot_axis():
  cache = init_cache(CFG, 3, 5)
  cache = KVCache(tuple(c + 1 for c in cache.k), tuple(c + 2 for c in cache.v))
  grown = grow_slots(cache, 4)
  assert grown.k[0].shape == (3, 2, 8, 9) and grown.v[0].shape == (3, 2, 9, 8)
  np.testing.assert_array_equal(grown.k[1][..., :5], cache.k[1])
  np.testing.assert_array_equal(grown.v[1][:, :, :5], cache.v[1])
  assert not np.any(grown.k[0][..., 5:]) and not np.any(grown.v[0][:, :, 5:])
  q = grow_slots(init_int8_cache(CFG, 3, 5), 2)
  assert q.k[0].shape == (3, 2, 8, 7) and q.v[0].shape == (3, 2, 7, 8)
  assert q.k_scale[0].shape == q.v_scale[0].shape == (3, 2, 7)


@pytest.mark.parametrize("phases", [2, 3, 12])
def test_plain_sampler_phases_equal_one_cache(model, phases):
  graphdef, params = model
  ids, lengths = _prompts()
  ref = Sampler(graphdef, CFG, 10, 12, PAD, (EOS,)).generate(params, ids, lengths,
                                                             jax.random.key(3), SAMPLING)
  out = Sampler(graphdef, CFG, 10, 12, PAD, (EOS,), decode_phases=phases).generate(
      params, ids, lengths, jax.random.key(3), SAMPLING)
  _assert_same(out, ref)
  # ...and the trainer scores the phased samples with the same log-probs.
  tokens, logp, n = map(np.asarray, out)
  seq = build_sequences(ids, lengths, tokens, n, logp, PAD)
  mask = seq.loss_mask > 0
  trainer = sequence_logprobs(graphdef, params, jnp.asarray(seq.tokens), SAMPLING)
  np.testing.assert_allclose(np.asarray(trainer)[mask], seq.logp[mask], atol=ATOL, rtol=0)


def test_plain_sampler_stops_inside_an_early_phase(model):
  # Every row stops at the first token it draws after the stop id becomes likely:
  # with stop ids covering most of the vocabulary, all rows finish in phase 1 and
  # the later phases' loops run no step.
  graphdef, params = model
  ids, lengths = _prompts()
  stops = tuple(range(0, 36))
  ref = Sampler(graphdef, CFG, 10, 16, PAD, stops).generate(params, ids, lengths,
                                                            jax.random.key(0), SAMPLING)
  out = Sampler(graphdef, CFG, 10, 16, PAD, stops, decode_phases=4).generate(
      params, ids, lengths, jax.random.key(0), SAMPLING)
  _assert_same(out, ref)
  assert np.asarray(out.lengths).max() < 8


@pytest.mark.parametrize("layout", [FlatLayout(), FlatLayout(kv_int8=True), PrefixLayout(3),
                                    PrefixLayout(3, kv_int8=True)],
                         ids=["flat", "flat-int8", "prefix", "prefix-int8"])
def test_fast_sampler_phases_equal_one_cache(model, layout):
  graphdef, params = model
  ids, lengths = _prompts()
  one = FastSampler(graphdef, CFG, 10, 12, PAD, (EOS,), layout)
  staged = FastSampler(graphdef, CFG, 10, 12, PAD, (EOS,), layout, decode_phases=3)
  _assert_same(staged.generate(params, ids, lengths, jax.random.key(4), SAMPLING),
               one.generate(params, ids, lengths, jax.random.key(4), SAMPLING))


def test_phase_errors(model):
  graphdef, _ = model
  with pytest.raises(ValueError, match="decode_phases must be in \\[1, max_new_tokens=6\\], got 7"):
    Sampler(graphdef, CFG, 10, 6, PAD, (), decode_phases=7)
  with pytest.raises(ValueError, match="got 0"):
    FastSampler(graphdef, CFG, 10, 6, PAD, (), decode_phases=0)
  blockwise = dataclasses.replace(CFG, attention_impl="blockwise")
  with pytest.raises(ValueError, match="needs dense attention"):
    Sampler(nnx.split(Transformer(blockwise, nnx.Rngs(0)))[0], blockwise, 10, 6, PAD, (),
            decode_phases=2)
