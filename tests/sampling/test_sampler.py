"""The sampler computes exactly what the trainer computes.

Tolerances: fp32 throughout; the cached decode path and the full forward pass
differ only by summation order, so 2e-5 absolute on log-probs and logits.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer, causal_mask, init_cache
from rlpt.rollout import build_sequences
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sampling.logits import processed_logprobs
from rlpt.sampling.sampler import _prefill
from rlpt.steps import forward_logits, sequence_logprobs

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
PAD, BOS, EOS = 37, 38, 39
ATOL = 2e-5


@pytest.fixture(scope="module")
def model():
  m = Transformer(CFG, nnx.Rngs(0))
  return nnx.split(m)


def _prompts(b=6, p=10, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(2, p + 1, size=b).astype(np.int32)
  ids = np.full((b, p), PAD, np.int32)
  for i, n in enumerate(lengths):
    ids[i, 0] = BOS
    ids[i, 1:n] = rng.integers(0, 30, size=n - 1)
  return ids, lengths


def test_prefill_logits_equal_forward_logits(model):
  graphdef, params = model
  ids, lengths = _prompts()
  s = Sampler(graphdef, CFG, 10, 5, PAD, (EOS,))
  last, _ = _prefill(s, params, jnp.asarray(ids), jnp.asarray(lengths),
                     init_cache(CFG, ids.shape[0], 10 + 5))
  full = forward_logits(graphdef, params, jnp.asarray(ids))
  want = np.stack([np.asarray(full)[i, n - 1] for i, n in enumerate(lengths)])
  np.testing.assert_allclose(np.asarray(last), want, atol=ATOL, rtol=0)


def test_prefill_computes_no_prompt_wide_logits(model):
  """Only each row's last prompt position goes through the head: the compiled
  prefill holds no [B, P, V] logits (at Gemma 3's 262,144-entry vocabulary,
  64 prompts of 192 tokens would be 12.9 GB of them)."""
  graphdef, params = model
  ids, lengths = _prompts()
  s = Sampler(graphdef, CFG, 10, 5, PAD, (EOS,))
  hlo = _prefill.lower(s, params, jnp.asarray(ids), jnp.asarray(lengths),
                       init_cache(CFG, ids.shape[0], 10 + 5)).compile().as_text()
  b, p = ids.shape
  assert f"f32[{b},{CFG.vocab_size}]" in hlo  # the logits it returns, as the check would see them
  assert f"f32[{b},{p},{CFG.vocab_size}]" not in hlo


def test_cached_decode_logits_equal_forward_logits(model):
  graphdef, params = model
  m = nnx.merge(graphdef, params)
  tokens = jax.random.randint(jax.random.key(3), (3, 9), 0, 30)
  full = forward_logits(graphdef, params, tokens)
  cache = init_cache(CFG, 3, 9)
  key_pos = jnp.broadcast_to(jnp.arange(9), (3, 9))
  for t in range(9):
    pos = jnp.full((3, 1), t, jnp.int32)
    logits, cache = m(tokens[:, t:t + 1], pos, causal_mask(pos, key_pos), cache,
                      jnp.full((3,), t, jnp.int32))
    np.testing.assert_allclose(np.asarray(logits[:, 0]), np.asarray(full[:, t]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("sampling", [
    SamplingParams(1.0),
    SamplingParams(0.7, top_p=0.9),
    SamplingParams(1.3, top_k=7),
    SamplingParams(0.8, top_k=10, top_p=0.8),
    SamplingParams(0.0),
])
def test_sampler_logprobs_equal_trainer_logprobs(model, sampling):
  graphdef, params = model
  ids, lengths = _prompts(b=8, seed=1)
  s = Sampler(graphdef, CFG, 10, 12, PAD, (EOS,))
  out = s.generate(params, ids, lengths, jax.random.key(7), sampling)
  tokens, logp, n = map(np.asarray, out)
  seq = build_sequences(ids, lengths, tokens, n, logp, PAD)
  trainer_logp = sequence_logprobs(graphdef, params, jnp.asarray(seq.tokens), sampling)
  mask = seq.loss_mask > 0
  assert mask.sum() == n.sum() > 0
  np.testing.assert_allclose(np.asarray(trainer_logp)[mask], seq.logp[mask], atol=ATOL, rtol=0)
  if sampling.top_p < 1.0 or sampling.top_k:
    # Filtered sampling never draws outside the support, so no -inf log-probs.
    assert np.all(np.isfinite(seq.logp[mask]))


def test_greedy_sampling_equals_argmax_of_full_forward(model):
  graphdef, params = model
  ids, lengths = _prompts(b=4, seed=2)
  s = Sampler(graphdef, CFG, 10, 6, PAD, ())
  out = s.generate(params, ids, lengths, jax.random.key(0), SamplingParams(0.0))
  for i in range(4):
    seq = list(ids[i, :lengths[i]])
    for j in range(6):
      logits = forward_logits(graphdef, params, jnp.asarray([seq]))
      nxt = int(jnp.argmax(logits[0, -1]))
      assert int(out.tokens[i, j]) == nxt
      seq.append(nxt)


def test_stop_tokens_end_rows_and_pad_after(model):
  graphdef, params = model
  ids, lengths = _prompts(b=6, seed=3)
  free = Sampler(graphdef, CFG, 10, 8, PAD, ())
  ref = np.asarray(free.generate(params, ids, lengths, jax.random.key(0), SamplingParams(0.0)).tokens)
  stop = int(ref[0, 2])  # row 0 emits this token at step 2 at the latest
  s = Sampler(graphdef, CFG, 10, 8, PAD, (stop,))
  out = s.generate(params, ids, lengths, jax.random.key(0), SamplingParams(0.0))
  toks, logp, n = map(np.asarray, out)
  for i in range(6):
    row = list(ref[i])
    k = row.index(stop) + 1 if stop in row else 8
    assert n[i] == k
    np.testing.assert_array_equal(toks[i, :k], ref[i, :k])
    assert np.all(toks[i, k:] == PAD) and np.all(logp[i, k:] == 0.0)
  assert n[0] <= 3


def test_top_p_support_is_the_smallest_prefix_reaching_p():
  logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
  lp = processed_logprobs(logits, SamplingParams(1.0, top_p=0.75))
  probs = np.exp(np.asarray(lp))[0]
  np.testing.assert_allclose(probs, [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0], atol=1e-6)
  lp = processed_logprobs(logits, SamplingParams(1.0, top_k=1))
  np.testing.assert_allclose(np.exp(np.asarray(lp))[0], [1, 0, 0, 0], atol=1e-6)


def test_too_wide_prompt_buffer_is_rejected(model):
  graphdef, params = model
  ids, lengths = _prompts(p=12)
  s = Sampler(graphdef, CFG, 10, 4, PAD, (EOS,))
  with pytest.raises(ValueError, match="at most 10"):
    s.generate(params, ids, lengths, jax.random.key(0), SamplingParams())
