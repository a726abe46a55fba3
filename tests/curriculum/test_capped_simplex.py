"""The capped-simplex projection against an independent bisection."""

import numpy as np
import pytest

from rlpt.curriculum import project_capped_simplex


def np_bisect(w, lo, hi, iters=200):
  """Reference: bisection on the scale c of x = clip(c w, lo, hi), zeros at the floor."""
  pos = w > 0

  def total(c):
    return np.clip(c * w[pos], lo, hi).sum() + (~pos).sum() * lo

  a, b = 0.0, 1.0
  while total(b) < 1:
    b *= 2
  for _ in range(iters):
    mid = 0.5 * (a + b)
    a, b = (mid, b) if total(mid) < 1 else (a, mid)
  x = np.full(len(w), lo)
  x[pos] = np.clip(0.5 * (a + b) * w[pos], lo, hi)
  return x


@pytest.mark.parametrize("seed", range(6))
def test_projection_matches_bisection_and_keeps_ratios(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(2, 300))
  w = rng.lognormal(0, 2, n)
  w[rng.random(n) < 0.1] = 0.0
  lo = rng.uniform(0, 1 / n)
  hi = rng.uniform(1 / n, min(1.0, 20 / n))
  x = project_capped_simplex(w, lo, hi)
  assert abs(x.sum() - 1) < 1e-12
  assert (x >= lo - 1e-15).all() and (x <= hi + 1e-15).all()
  if (w > 0).sum() * hi + (w == 0).sum() * lo > 1:
    np.testing.assert_allclose(x, np_bisect(w, lo, hi), rtol=1e-9, atol=1e-12)
  # Domains strictly inside the bounds keep the ratios of their weights.
  inside = (x > lo + 1e-12) & (x < hi - 1e-12) & (w > 0)
  if inside.sum() > 1:
    ratio = x[inside] / w[inside]
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_projection_edge_cases():
  # Hand-solved: c [1, 2, 7] with floor 0.15 and cap 0.6 -> c = 0.125.
  np.testing.assert_allclose(project_capped_simplex([1, 2, 7], 0.15, 0.6), [0.15, 0.25, 0.6])
  # The only positive domain is capped: zero-weight domains share what is left.
  np.testing.assert_allclose(project_capped_simplex([1, 0, 0], 0.0, 0.5), [0.5, 0.25, 0.25])
  np.testing.assert_allclose(project_capped_simplex([0, 0, 0, 0], 0.0, 1.0), [0.25] * 4)
  np.testing.assert_allclose(project_capped_simplex([5, 1, 1], 1 / 3, 1.0), [1 / 3] * 3)
  np.testing.assert_allclose(project_capped_simplex([3, 1], 0.0, 1.0), [0.75, 0.25])


def test_infeasible_bounds_name_the_numbers():
  with pytest.raises(ValueError, match=r"min_share=0.3 x 4 domains = 1.2 > 1.*min_share <= 0.25"):
    project_capped_simplex(np.ones(4), 0.3, 1.0)
  with pytest.raises(ValueError, match=r"max_share=0.2 x 4 domains = 0.8 < 1.*max_share >= 0.25"):
    project_capped_simplex(np.ones(4), 0.0, 0.2)
  with pytest.raises(ValueError, match=r"finite and >= 0.*-1.0"):
    project_capped_simplex([1.0, -1.0], 0.0, 1.0)
