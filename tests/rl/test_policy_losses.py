"""Policy losses, aggregations, entropy and the full objective against NumPy (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.rl import (AGGREGATIONS, POLICY_LOSSES, LossConfig, aggregate, entropy_from_logits,
                     loss_counts, policy_objective)
from rlpt.sampling.logits import SamplingParams, processed_logprobs

TOL = dict(rtol=1e-5, atol=1e-6)


def np_policy_loss(name, logp, old, adv, mask, eps=0.2, eps_high=0.28, c=3.0):
  """Per-token losses, written from the papers' formulas."""
  logp, old, adv = (np.asarray(x, np.float64) for x in (logp, old, adv))
  if name == "gspo":
    n = np.maximum(mask.sum(1), 1)
    s = np.exp(((logp - old) * mask).sum(1) / n)
    ratio = np.repeat(s[:, None], logp.shape[1], 1)
    lo, hi = eps, eps_high
  else:
    ratio = np.exp(logp - old)
    lo, hi = (eps, eps_high) if name == "asym_clip" else (eps, eps)
  loss = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - lo, 1 + hi))
  if name == "dual_clip":
    loss = np.where(adv < 0, np.minimum(loss, -c * adv), loss)
  return loss


def np_aggregate(name, x, mask, max_len=None):
  seqs = [i for i in range(len(mask)) if mask[i].sum() > 0]
  if name == "token-mean":
    return (x * mask).sum() / mask.sum()
  if name == "seq-mean-token-mean":
    return np.mean([(x[i] * mask[i]).sum() / mask[i].sum() for i in seqs])
  if name == "seq-mean-token-sum":
    return np.mean([(x[i] * mask[i]).sum() for i in seqs])
  if name == "seq-mean-token-sum-norm":
    return np.mean([(x[i] * mask[i]).sum() / (max_len or x.shape[1]) for i in seqs])
  raise KeyError(name)


def case(seed=0, b=8, t=10, spread=0.4):
  rng = np.random.default_rng(seed)
  logp = rng.normal(-2, 0.5, (b, t)).astype(np.float32)
  old = (logp + rng.normal(0, spread, (b, t))).astype(np.float32)
  ref = (logp + rng.normal(0, 0.3, (b, t))).astype(np.float32)
  adv = rng.normal(size=(b, t)).astype(np.float32)
  mask = (rng.random((b, t)) > 0.3).astype(np.float32)
  mask[1] = 0  # an empty row
  return logp, old, ref, adv, mask


@pytest.mark.parametrize("name", ["ppo_clip", "dual_clip", "asym_clip", "gspo"])
def test_policy_losses_match_numpy(name):
  # A large old/new spread so clipping and the dual clip are both active.
  logp, old, _, adv, mask = case(spread=1.0)
  cfg = LossConfig(policy_loss=name, clip_eps=0.2, clip_eps_high=0.28, dual_clip_c=3.0)
  loss, aux = POLICY_LOSSES[name](*map(jnp.asarray, (logp, old, adv)), cfg, jnp.asarray(mask))
  want = np_policy_loss(name, logp, old, adv, mask)
  np.testing.assert_allclose(np.asarray(loss) * mask, want * mask, **TOL)
  if name == "dual_clip":
    assert 0 < float((np.asarray(aux["dual_clip_frac"]) * mask).sum())


def test_dual_clip_bounds_negative_advantage_loss():
  # Ratio 50 with A=-1: PPO gives 50, capped at c|A| = 3. Ratio 1 with A=-2: 2 (< 6).
  # Ratio 0.1 with A=1: the pessimistic min keeps the unclipped -0.1.
  big_ratio = jnp.log(jnp.array([[50.0, 1.0, 0.1]]))
  adv = jnp.array([[-1.0, -2.0, 1.0]])
  loss, _ = POLICY_LOSSES["dual_clip"](big_ratio, jnp.zeros((1, 3)), adv, LossConfig())
  np.testing.assert_allclose(np.asarray(loss), [[3.0, 2.0, -0.1]], rtol=1e-6)


def test_gspo_gradient_is_length_normalised_sequence_gradient():
  # Small spread: no sequence is clipped, so d loss / d logp_{i,t} = -A_i s_i m_t / (n_i S).
  logp, old, ref, _, mask = case(1, spread=0.01)
  adv_B = np.random.default_rng(1).normal(size=8).astype(np.float32)
  cfg = LossConfig(policy_loss="gspo", kl_beta=0.0, aggregation="seq-mean-token-mean")
  g = jax.grad(lambda lp: policy_objective(lp, *map(jnp.asarray, (old, ref, adv_B, mask)),
                                           cfg)[0])(jnp.asarray(logp))
  n = np.maximum(mask.sum(1), 1)
  s = np.exp(((logp - old).astype(np.float64) * mask).sum(1) / n)
  num_seqs = (mask.sum(1) > 0).sum()
  want = -(adv_B * s / n)[:, None] * mask / num_seqs
  np.testing.assert_allclose(np.asarray(g), want, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("name", sorted(AGGREGATIONS))
def test_aggregations_match_numpy(name):
  rng = np.random.default_rng(2)
  x = rng.normal(size=(8, 10)).astype(np.float32)
  mask = (rng.random((8, 10)) > 0.4).astype(np.float32)
  mask[3] = 0
  for max_len in (None, 16):
    got = aggregate(name, jnp.asarray(x), jnp.asarray(mask), max_len=max_len)
    np.testing.assert_allclose(float(got), np_aggregate(name, x, mask, max_len), **TOL)
  # Global counts computed on the whole batch give the same value.
  counts = loss_counts(jnp.asarray(mask))
  assert float(counts.num_tokens) == mask.sum() and float(counts.num_seqs) == 7
  got = aggregate(name, jnp.asarray(x), jnp.asarray(mask), *counts)
  np.testing.assert_allclose(float(got), np_aggregate(name, x, mask), **TOL)


def np_processed_probs(logits, temperature, top_k, top_p):
  z = logits.astype(np.float64) / temperature
  p = np.exp(z - z.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  out = np.zeros_like(p)
  for idx in np.ndindex(p.shape[:-1]):
    order = np.argsort(-z[idx], kind="stable")
    keep = order[:top_k] if top_k else order
    q = p[idx][keep] / p[idx][keep].sum()
    before = np.cumsum(q) - q
    keep = keep[before < top_p]
    out[idx][keep] = p[idx][keep] / p[idx][keep].sum()
  return out


@pytest.mark.parametrize("params", [None, SamplingParams(1.3, 5, 1.0), SamplingParams(0.9, 6, 0.7)])
def test_entropy_from_logits_matches_numpy(params):
  logits = np.random.default_rng(3).normal(0, 2, (3, 4, 11)).astype(np.float32)
  fn = jax.jit(lambda z: entropy_from_logits(z, params))
  got = fn(jnp.asarray(logits))
  p = np_processed_probs(logits, *((1.0, 0, 1.0) if params is None else
                                   (params.temperature, params.top_k, params.top_p)))
  with np.errstate(divide="ignore", invalid="ignore"):
    want = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  g = jax.jit(jax.grad(lambda z: fn(z).sum()))(jnp.asarray(logits))
  assert np.isfinite(np.asarray(g)).all()


def np_full_objective(logp, old, ref, adv, mask, ent, name, agg, beta, ent_coef):
  pg = np_policy_loss(name, logp, old, adv, mask)
  d = np.clip(ref - logp, -10, 10)
  kl = np.exp(d) - d - 1
  return (np_aggregate(agg, pg, mask) + beta * np_aggregate(agg, kl, mask) -
          ent_coef * np_aggregate(agg, ent, mask))


@pytest.mark.parametrize("name,agg", [("ppo_clip", "seq-mean-token-mean"),
                                      ("dual_clip", "token-mean"),
                                      ("asym_clip", "seq-mean-token-sum"),
                                      ("gspo", "seq-mean-token-sum-norm")])
def test_policy_objective_with_token_advantages_entropy_and_traced_kl_coef(name, agg):
  logp, old, ref, adv, mask = case(4, spread=0.5)
  ent = np.random.default_rng(4).random((8, 10)).astype(np.float32)
  cfg = LossConfig(policy_loss=name, aggregation=agg, entropy_coef=0.01, kl_beta=0.5)
  args = tuple(map(jnp.asarray, (logp, old, ref, adv, mask)))
  fn = jax.jit(lambda beta: policy_objective(*args, cfg, kl_coef=beta,
                                             entropy_BxT=jnp.asarray(ent)))
  loss, m = fn(jnp.float32(0.07))
  want = np_full_objective(logp, old, ref, adv, mask, ent, name, agg, 0.07, 0.01)
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)
  np.testing.assert_allclose(float(m["entropy"]), np_aggregate(agg, ent, mask), rtol=1e-5)
  assert {"loss", "pg_loss", "kl", "clip_frac", "ratio_mean"} <= set(m)


def test_sequence_advantages_broadcast_like_token_advantages():
  logp, old, ref, _, mask = case(5)
  adv_B = np.random.default_rng(5).normal(size=8).astype(np.float32)
  cfg = LossConfig()
  a = policy_objective(*map(jnp.asarray, (logp, old, ref, adv_B, mask)), cfg)[0]
  b = policy_objective(*map(jnp.asarray, (logp, old, ref, np.repeat(adv_B[:, None], 10, 1),
                                          mask)), cfg)[0]
  np.testing.assert_allclose(float(a), float(b), rtol=1e-6)


def test_bad_loss_config_values_are_named():
  with pytest.raises(ValueError, match="dual_clip_c must be > 1.*0.5"):
    LossConfig(dual_clip_c=0.5)
  with pytest.raises(ValueError, match="Unknown loss aggregation 'seq-mean'"):
    LossConfig(aggregation="seq-mean")
  with pytest.raises(ValueError, match="entropy_coef=0.1 > 0 needs entropy_BxT"):
    logp, old, ref, adv, mask = map(jnp.asarray, case())
    policy_objective(logp, old, ref, adv, mask, LossConfig(entropy_coef=0.1))


@pytest.mark.parametrize("scale", [1.0, 6.0])   # a wide nucleus (> 64 tokens) and a narrow one
@pytest.mark.parametrize("params", [SamplingParams(1.0, top_p=0.9), SamplingParams(1.0, top_k=7),
                                    SamplingParams(0.7, top_k=300, top_p=0.8),
                                    SamplingParams(1.0, top_p=0.3)])
def test_partial_selection_keeps_what_a_full_sort_keeps(params, scale):
  """top-k / top-p rank tokens by partial selection (and sort the vocabulary
  only for a nucleus longer than the candidates): the same support and
  probabilities as NumPy's stable sort, fp32 against float64."""
  logits = np.random.default_rng(4).normal(0, scale, (5, 1000)).astype(np.float32)
  got = np.exp(np.asarray(jax.jit(lambda z: processed_logprobs(z, params))(jnp.asarray(logits))))
  want = np_processed_probs(logits, params.temperature, params.top_k, params.top_p)
  np.testing.assert_array_equal(got > 0, want > 0)
  np.testing.assert_allclose(got, want, atol=2e-6, rtol=0)
