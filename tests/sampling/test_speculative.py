"""Speculative sampling draws from the target's distribution, with the target's log-probs.

Statistical bounds: with n draws over k outcomes the empirical total
variation to the true distribution has mean about 0.5 * sum_x
sqrt(2 p(x) / (pi n)); the tests assert below 3x that (a draw from the
draft instead of the target, or a missing residual, exceeds it by far).
Acceptance: a binomial mean over n rows, asserted within 5 standard errors.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.rollout import build_sequences
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sampling.logits import processed_logprobs
from rlpt.sampling.speculative import (AdaptiveGamma, SpeculativeSampler, expected_tokens_per_call,
                                       speculative_accept)
from rlpt.steps import forward_logits, sequence_logprobs

CFG = ModelConfig(vocab_size=40, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=48)
DRAFT = ModelConfig(vocab_size=40, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                    head_dim=8, mlp_dim=32)
PAD, BOS, EOS = 37, 38, 39
ATOL = 2e-5


@pytest.fixture(scope="module")
def models():
  return nnx.split(Transformer(CFG, nnx.Rngs(0))), nnx.split(Transformer(DRAFT, nnx.Rngs(1)))


def _prompts(b=6, p=10, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, p + 1, size=b).astype(np.int32)
  ids = np.full((b, p), PAD, np.int32)
  for i, n in enumerate(lengths):
    ids[i, 0] = BOS
    ids[i, 1:n] = rng.integers(0, 30, size=n - 1)
  return ids, lengths


def _tv(counts, p):
  return 0.5 * np.abs(counts / counts.sum() - p).sum()


def _tv_bound(p, n):
  return 3 * 0.5 * np.sum(np.sqrt(2 * p / (np.pi * n)))


def test_accept_kernel_distribution_and_acceptance_rate():
  # Two draft positions with fixed toy distributions; the target at position 0
  # is top-k filtered, so some drafts fall outside its support.
  n, v = 200_000, 6
  p_logits = jnp.log(jnp.array([[0.05, 0.4, 0.1, 0.3, 0.1, 0.05],
                                [0.3, 0.1, 0.1, 0.2, 0.2, 0.1],
                                [0.1, 0.1, 0.1, 0.1, 0.1, 0.5]]))
  q = jnp.array([[0.3, 0.1, 0.2, 0.1, 0.2, 0.1], [0.1, 0.3, 0.1, 0.1, 0.2, 0.2]])
  logp = processed_logprobs(p_logits, SamplingParams(1.0, top_k=3))
  logq = jnp.log(q)
  kd, ka = jax.random.split(jax.random.key(0))
  drafts = jax.random.categorical(kd, logq, shape=(n, 2)).astype(jnp.int32)

  @jax.jit
  def run(key):
    return speculative_accept(key, drafts, jnp.broadcast_to(logq, (n, 2, v)),
                              jnp.broadcast_to(logp, (n, 3, v)), greedy=False)

  acc, nxt = map(np.asarray, run(ka))
  p = np.exp(np.asarray(logp))
  first = np.where(acc >= 1, np.asarray(drafts)[:, 0], nxt)
  assert _tv(np.bincount(first, minlength=v), p[0]) < _tv_bound(p[0], n)
  second_rows = acc >= 1
  second = np.where(acc[second_rows] >= 2, np.asarray(drafts)[second_rows, 1], nxt[second_rows])
  assert _tv(np.bincount(second, minlength=v), p[1]) < _tv_bound(p[1], second_rows.sum())
  bonus = nxt[acc == 2]
  assert _tv(np.bincount(bonus, minlength=v), p[2]) < _tv_bound(p[2], bonus.size)
  want = np.minimum(p[0], np.asarray(q[0])).sum()
  assert abs((acc >= 1).mean() - want) < 5 * np.sqrt(want * (1 - want) / n)
  want2 = np.minimum(p[1], np.asarray(q[1])).sum()
  got2 = (acc[second_rows] == 2).mean()
  assert abs(got2 - want2) < 5 * np.sqrt(want2 * (1 - want2) / second_rows.sum())
  # A draft outside the target's top-k support is never accepted.
  outside = ~np.isin(np.asarray(drafts)[:, 0], np.flatnonzero(p[0] > 0))
  assert outside.any() and np.all(acc[outside] == 0)


def test_end_to_end_distribution_equals_targets(models):
  # Vocabulary 40 but the first two generated tokens' joint law is compared
  # exactly: P(t1, t2) = p(t1 | prompt) p(t2 | prompt, t1) from full passes.
  (graphdef, params), (dgraph, dparams) = models
  sampling = SamplingParams(0.5, top_k=4)  # 4 x 4 outcomes, peaked so p and q differ
  n = 6000
  prompt = np.array([[BOS, 3, 5, 7]], np.int32)
  s = SpeculativeSampler(graphdef, CFG, dgraph, DRAFT, 4, 2, PAD, (), gamma=2)
  out, stats = s.generate(params, dparams, np.repeat(prompt, n, 0), np.full((n,), 4, np.int32),
                          jax.random.key(1), sampling)
  toks = np.asarray(out.tokens)
  assert np.all(np.asarray(out.lengths) == 2)
  p1 = np.exp(np.asarray(processed_logprobs(forward_logits(graphdef, params, prompt)[0, -1],
                                            sampling)))
  firsts = np.flatnonzero(p1 > 0)
  seqs = np.concatenate([np.repeat(prompt, len(firsts), 0), firsts[:, None]], 1)
  p2 = np.exp(np.asarray(processed_logprobs(forward_logits(graphdef, params, seqs)[:, -1],
                                            sampling)))
  joint = np.zeros((40, 40))
  joint[firsts] = p1[firsts, None] * p2
  counts = np.zeros((40, 40))
  np.add.at(counts, (toks[:, 0], toks[:, 1]), 1)
  assert _tv(counts.ravel(), joint.ravel()) < _tv_bound(joint.ravel(), n)
  # The draft is a different random model: speculation did reject (the residual was used).
  assert 0 < int(stats.accepted) < int(stats.proposed)


@pytest.mark.parametrize("sampling", [
    SamplingParams(1.0),
    SamplingParams(0.7, top_p=0.9),
    SamplingParams(1.3, top_k=7),
])
def test_logprobs_equal_trainer_logprobs(models, sampling):
  (graphdef, params), (dgraph, dparams) = models
  ids, lengths = _prompts(b=8, seed=1)
  s = SpeculativeSampler(graphdef, CFG, dgraph, DRAFT, 10, 12, PAD, (EOS, 5), gamma=3)
  out, _ = s.generate(params, dparams, ids, lengths, jax.random.key(7), sampling)
  tokens, logp, n = map(np.asarray, out)
  for i in range(len(n)):
    assert np.all(tokens[i, n[i]:] == PAD) and np.all(logp[i, n[i]:] == 0.0)
    body = list(tokens[i, :n[i]])
    assert n[i] == 12 or body[-1] in (EOS, 5)
    assert not set(body[:-1]) & {EOS, 5}
  seq = build_sequences(ids, lengths, tokens, n, logp, PAD)
  trainer_logp = sequence_logprobs(graphdef, params, jnp.asarray(seq.tokens), sampling)
  mask = seq.loss_mask > 0
  assert mask.sum() == n.sum() > 0
  np.testing.assert_allclose(np.asarray(trainer_logp)[mask], seq.logp[mask], atol=ATOL, rtol=0)
  assert np.all(np.isfinite(seq.logp[mask]))


@pytest.mark.parametrize("gamma,self_draft", [(1, False), (4, False), (3, True)])
def test_greedy_equals_plain_sampler_greedy(models, gamma, self_draft):
  (graphdef, params), (dgraph, dparams) = models
  if self_draft:  # every draft accepted: exercises the bonus token and full windows
    dgraph, dparams, dcfg = graphdef, params, CFG
  else:
    dcfg = DRAFT
  ids, lengths = _prompts(b=6, seed=2)
  ref = Sampler(graphdef, CFG, 10, 9, PAD, (EOS,)).generate(params, ids, lengths,
                                                            jax.random.key(0), SamplingParams(0.0))
  s = SpeculativeSampler(graphdef, CFG, dgraph, dcfg, 10, 9, PAD, (EOS,), gamma=gamma)
  out, stats = s.generate(params, dparams, ids, lengths, jax.random.key(0), SamplingParams(0.0))
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
  np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(ref.lengths))
  np.testing.assert_allclose(np.asarray(out.logprobs), np.asarray(ref.logprobs), atol=ATOL)
  if self_draft:
    assert int(stats.accepted) == int(stats.proposed) > 0


def test_adaptive_gamma_follows_acceptance():
  assert expected_tokens_per_call(0.0, 4) == 1.0
  assert expected_tokens_per_call(1.0, 4) == 5.0
  high = AdaptiveGamma(draft_cost=0.05, max_gamma=8)
  assert high.update(0.95) >= 6 and high.expected_speedup > 2
  low = AdaptiveGamma(draft_cost=0.3)
  assert low.update(0.2) == 1 and low.expected_speedup < 1


def test_bad_arguments_are_rejected(models):
  (graphdef, _), (dgraph, _) = models
  with pytest.raises(ValueError, match="gamma"):
    SpeculativeSampler(graphdef, CFG, dgraph, DRAFT, 10, 4, PAD, (), gamma=0)
  other = ModelConfig(vocab_size=41, d_model=16, num_layers=1, num_heads=2, num_kv_heads=1,
                      head_dim=8, mlp_dim=32)
  with pytest.raises(ValueError, match="vocab_size"):
    SpeculativeSampler(graphdef, CFG, dgraph, other, 10, 4, PAD, ())
