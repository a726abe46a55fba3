"""Per-domain metrics against direct computation."""

import numpy as np
import pytest

from rlpt.curriculum import domain_metrics, make_domain_sampler


def test_domain_metrics_are_per_domain_means_shares_and_weights():
  rng = np.random.default_rng(0)
  doms = ["math", "code", "docs"]
  records = [dict(domain=str(rng.choice(doms[:2])), reward=float(rng.normal()),
                  success=bool(rng.random() < 0.5), n_tokens=int(rng.integers(1, 100)))
             for _ in range(40)]
  sampler = make_domain_sampler("fixed", doms, weights={"math": 1, "code": 3, "docs": 0})
  got = domain_metrics(records, sampler)
  for d in ["math", "code"]:
    rows = [r for r in records if r["domain"] == d]
    assert got[f"share/{d}"] == pytest.approx(len(rows) / 40)
    assert got[f"reward/{d}"] == pytest.approx(np.mean([r["reward"] for r in rows]))
    assert got[f"success/{d}"] == pytest.approx(np.mean([r["success"] for r in rows]))
    assert got[f"tokens/{d}"] == pytest.approx(np.mean([r["n_tokens"] for r in rows]))
  # docs was configured but not sampled: a zero share, its weight, no means.
  assert got["share/docs"] == 0.0 and "reward/docs" not in got
  assert got["weight/math"] == pytest.approx(0.25) and got["weight/docs"] == 0.0
  # Family aggregates: each of these ids is its own family.
  for d in ["math", "code"]:
    assert got[f"family_share/{d}"] == got[f"share/{d}"]
    assert got[f"family_success/{d}"] == got[f"success/{d}"]
  assert set(got) == {f"{k}/{d}" for k in ("share", "weight") for d in doms} | {
      f"{k}/{d}" for k in ("reward", "success", "tokens", "family_share", "family_success")
      for d in ["math", "code"]}


def test_family_aggregates_pool_the_family_samples():
  records = ([dict(domain="rlpt/rg-ab-easy-v0", reward=1.0, success=1.0, n_tokens=1)] * 3
             + [dict(domain="rlpt/rg-aiw-hard-v0", reward=0.0, success=0.0, n_tokens=1)]
             + [dict(domain="rlpt/math-mul-easy-v0", reward=0.0, success=0.0, n_tokens=1)] * 4)
  got = domain_metrics(records)
  assert got["family_share/rg"] == 0.5 and got["family_success/rg"] == 0.75
  assert got["family_share/math"] == 0.5 and got["family_success/math"] == 0.0


def test_domain_metrics_without_sampler_and_custom_token_key():
  got = domain_metrics([dict(domain="a", reward=1.0, success=1.0, length=7)],
                       domains=["a", "b"], tokens_key="length")
  assert got == {"share/a": 1.0, "reward/a": 1.0, "success/a": 1.0, "tokens/a": 7.0,
                 "share/b": 0.0, "family_share/a": 1.0, "family_success/a": 1.0}
