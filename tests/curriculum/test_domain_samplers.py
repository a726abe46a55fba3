"""Domain samplers: shares over many draws, adaptive behaviour in a bandit, errors, state."""

import json

import numpy as np
import pytest

from rlpt.curriculum import DOMAIN_SAMPLERS, make_domain_sampler

DOMS = ["math", "code", "strings", "docs"]


def chi2_quantile(dof, z=3.09):
  """Wilson-Hilferty approximation of the chi-square quantile (z=3.09: 0.999)."""
  return dof * (1 - 2 / (9 * dof) + z * np.sqrt(2 / (9 * dof))) ** 3


def assert_draws_match(sampler, target, n=10_000, seed=0):
  """Chi-square goodness of fit at the 0.999 level, and each share within 5 sigma."""
  draws = sampler.sample(n, np.random.default_rng(seed))
  counts = np.array([draws.count(d) for d in sampler.domains], np.float64)
  p = np.array([target[d] for d in sampler.domains])
  np.testing.assert_allclose([sampler.weights()[d] for d in sampler.domains], p, rtol=1e-9,
                             atol=1e-12)
  live = p > 0
  chi2 = (((counts - n * p) ** 2)[live] / (n * p[live])).sum()
  assert chi2 < chi2_quantile(live.sum() - 1), (chi2, counts, p)
  assert (np.abs(counts / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12).all()


@pytest.mark.parametrize("strategy,params,target", [
    ("uniform", {}, [0.25] * 4),
    ("uniform", {"priorities": {"math": 2.0}}, [0.4, 0.2, 0.2, 0.2]),
    ("uniform", {"priorities": {"math": 0.0}, "min_share": 0.1}, [0.1, 0.3, 0.3, 0.3]),
    ("fixed", {"weights": {"math": 1, "code": 2, "strings": 7, "docs": 0}},
     [0.1, 0.2, 0.7, 0.0]),
    # Hand-solved: docs (weight 0) sits at the floor 0.05, strings at the cap 0.6,
    # and math : code = 1 : 2 share the remaining 0.35.
    ("fixed", {"weights": {"math": 1, "code": 2, "strings": 7, "docs": 0}, "min_share": 0.05,
               "max_share": 0.6}, [0.35 / 3, 0.7 / 3, 0.6, 0.05]),
    ("temperature", {"sizes": {"math": 1e2, "code": 1e4, "strings": 1e6, "docs": 1e4},
                     "temperature": 2.0}, np.array([10, 100, 1000, 100]) / 1210),
    ("temperature", {"sizes": {"math": 1, "code": 3, "strings": 4, "docs": 2}},
     [0.1, 0.3, 0.4, 0.2]),
])
def test_static_strategies_draw_their_targets(strategy, params, target):
  sampler = make_domain_sampler(strategy, DOMS, **params)
  assert_draws_match(sampler, dict(zip(DOMS, target)))


def test_fixed_weights_with_bounds_leave_room_for_a_zero_weight_domain():
  # The only positive domain is capped at 0.4; the zero-weight ones share the rest.
  s = make_domain_sampler("fixed", DOMS, weights={"math": 0, "code": 0, "strings": 1, "docs": 0},
                          max_share=0.4)
  np.testing.assert_allclose(list(s.weights().values()), [0.2, 0.2, 0.4, 0.2])


def np_bias_corrected_ema(xs, a):
  k = len(xs)
  w = a * (1 - a) ** np.arange(k - 1, -1, -1)
  return (w * np.asarray(xs)).sum() / (1 - (1 - a) ** k)


def test_adaptive_estimates_are_bias_corrected_per_sample_emas():
  s = make_domain_sampler("learning_progress", DOMS, alpha_fast=0.3, alpha_slow=0.05)
  xs = [0, 1, 1, 0, 1, 1, 1, 1, 1, 1]
  s.update({"math": xs[:4]})
  s.update({"math": xs[4:], "code": [1.0]})
  np.testing.assert_allclose(s.estimate("alpha_fast")[0], np_bias_corrected_ema(xs, 0.3))
  np.testing.assert_allclose(s.estimate("alpha_slow")[0], np_bias_corrected_ema(xs, 0.05))
  np.testing.assert_allclose(s.learning_progress()[0], abs(
      np_bias_corrected_ema(xs, 0.3) - np_bias_corrected_ema(xs, 0.05)))
  # One sample: both estimates equal it, so no progress is claimed.
  assert s.estimate("alpha_fast")[1] == pytest.approx(1.0, abs=1e-12)
  assert s.estimate("alpha_slow")[1] == pytest.approx(1.0, abs=1e-12)


def run_bandit(strategy, steps=150, batch=128, seed=0, **params):
  """200 domains: 50 never learnable, 50 already solved, 100 whose success rises
  with the number of samples k they received: p = b + (1 - b)(1 - exp(-r k))."""
  rng = np.random.default_rng(seed)
  n = 200
  kind = np.array(["hopeless"] * 50 + ["solved"] * 50 + ["learnable"] * 100)
  base = np.where(kind == "solved", 1.0, np.where(kind == "hopeless", 0.0,
                                                  rng.uniform(0.1, 0.4, n)))
  rate = np.where(kind == "learnable", rng.uniform(0.005, 0.05, n), 0.0)
  doms = [f"d{i:03d}" for i in range(n)]
  min_share = 0.1 / n
  sampler = make_domain_sampler(strategy, doms, min_share=min_share, max_share=0.05, **params)
  counts = np.zeros(n, np.int64)
  lowest = 1.0
  for _ in range(steps):
    results = {}
    for d in sampler.sample(batch, rng):
      i = doms.index(d)
      p = base[i] + (1 - base[i]) * (1 - np.exp(-rate[i] * counts[i]))
      counts[i] += 1
      results.setdefault(d, []).append(float(rng.random() < p))
    sampler.update(results)
    lowest = min(lowest, min(sampler.weights().values()))
  return sampler, kind, counts, lowest, min_share


@pytest.mark.parametrize("strategy", ["learning_progress", "success_band"])
def test_adaptive_strategies_favour_learnable_domains_in_a_bandit(strategy):
  sampler, kind, counts, lowest, min_share = run_bandit(strategy)
  learnable = counts[kind == "learnable"].sum() / counts.sum()
  # Uniform sampling would give the learnable half 0.50 of the samples
  # (measured: learning_progress 0.91, success_band 0.74).
  assert learnable > 0.65, learnable
  # No domain ever dropped below its floor, and every one was sampled.
  assert lowest >= min_share * (1 - 1e-9)
  assert counts.min() >= sampler.min_samples
  w = np.array(list(sampler.weights().values()))
  static = (kind == "solved") | (kind == "hopeless")
  assert w[static].max() < w[kind == "learnable"].max()
  if strategy == "learning_progress":
    # Constant success means zero progress: solved and hopeless sit exactly at the floor.
    np.testing.assert_allclose(w[static], min_share, rtol=1e-9)


def test_state_dict_round_trips_through_json_and_continues_identically():
  a = make_domain_sampler("success_band", DOMS, min_share=0.05, min_samples=2)
  a.update({"math": [1, 1, 1], "code": [0, 1, 0, 1], "docs": [0]})
  b = make_domain_sampler("success_band", DOMS, min_share=0.05, min_samples=2)
  b.load_state_dict(json.loads(json.dumps(a.state_dict())))
  assert a.weights() == b.weights()
  a.update({"strings": [1, 0], "math": [0]})
  b.update({"strings": [1, 0], "math": [0]})
  assert a.weights() == b.weights()
  assert a.sample(50, np.random.default_rng(1)) == b.sample(50, np.random.default_rng(1))
  with pytest.raises(ValueError,
                     match=r"not in the checkpoint \['web'\]; not configured \['docs'\]"):
    make_domain_sampler("success_band", ["math", "code", "strings", "web"]).load_state_dict(
        a.state_dict())
  with pytest.raises(ValueError, match="strategy 'success_band', this sampler is 'uniform'"):
    make_domain_sampler("uniform", DOMS).load_state_dict(a.state_dict())


def test_bad_inputs_raise_with_the_offending_values():
  with pytest.raises(ValueError, match=r"Unknown domain sampling strategy 'learning-progress'.*"
                                       r"known: \['fixed', 'learning_progress'"):
    make_domain_sampler("learning-progress", DOMS)
  with pytest.raises(ValueError, match=r"weights must cover exactly.*missing \['docs'\]; "
                                       r"extra \['web'\]"):
    make_domain_sampler("fixed", DOMS, weights={"math": 1, "code": 1, "strings": 1, "web": 1})
  with pytest.raises(ValueError, match=r"sizes must cover exactly.*missing \['code', 'docs'"):
    make_domain_sampler("temperature", DOMS, sizes={"math": 1, "strings": 1})
  with pytest.raises(ValueError, match=r"priorities must be finite and >= 0, got \{'code': -1"):
    make_domain_sampler("uniform", DOMS, priorities={"code": -1.0})
  with pytest.raises(ValueError, match=r"priorities must only name.*extra \['web'\]"):
    make_domain_sampler("uniform", DOMS, priorities={"web": 2.0})
  with pytest.raises(ValueError, match=r"min_share=0.3 x 4 domains = 1.2 > 1"):
    make_domain_sampler("uniform", DOMS, min_share=0.3)
  with pytest.raises(ValueError, match=r"max_share=0.2 x 4 domains = 0.8 < 1"):
    make_domain_sampler("uniform", DOMS, max_share=0.2)
  with pytest.raises(ValueError, match=r"'uniform' does not take \['weights'\]"):
    make_domain_sampler("uniform", DOMS, weights={d: 1 for d in DOMS})
  with pytest.raises(ValueError, match=r"'fixed' needs \['weights'\]"):
    make_domain_sampler("fixed", DOMS)
  with pytest.raises(ValueError, match=r"update got results for unknown domains \['web'\]"):
    make_domain_sampler("uniform", DOMS).update({"web": [1.0]})
  with pytest.raises(ValueError, match=r"temperature must be > 0, got 0"):
    make_domain_sampler("temperature", DOMS, sizes=dict.fromkeys(DOMS, 1), temperature=0)
  assert sorted(DOMAIN_SAMPLERS) == ["fixed", "learning_progress", "success_band", "temperature",
                                     "uniform"]
