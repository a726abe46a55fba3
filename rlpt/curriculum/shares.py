"""Turning preference weights into sampling shares with per-domain floors and caps."""

from __future__ import annotations

import numpy as np

# Slack for n * min_share <= 1 <= n * max_share checks on values typed in configs
# (e.g. 0.005 * 200 is 1.0000000000000002 in floating point).
_FEASIBILITY_SLACK = 1e-9


def check_share_bounds(num_domains: int, min_share: float, max_share: float) -> None:
  """Raises ValueError unless shares in [min_share, max_share] can sum to 1."""
  if not 0.0 <= min_share <= max_share <= 1.0:
    raise ValueError(f"need 0 <= min_share <= max_share <= 1, got min_share={min_share}, "
                     f"max_share={max_share}.")
  if min_share * num_domains > 1.0 + _FEASIBILITY_SLACK:
    raise ValueError(f"min_share={min_share} x {num_domains} domains = "
                     f"{min_share * num_domains:g} > 1: the floors alone exceed the whole batch; "
                     f"use min_share <= {1.0 / num_domains:g}.")
  if max_share * num_domains < 1.0 - _FEASIBILITY_SLACK:
    raise ValueError(f"max_share={max_share} x {num_domains} domains = "
                     f"{max_share * num_domains:g} < 1: the caps cannot cover the batch; "
                     f"use max_share >= {1.0 / num_domains:g}.")


def project_capped_simplex(weights: np.ndarray, min_share: float, max_share: float) -> np.ndarray:
  """Shares x_i = clip(c * w_i, min_share, max_share) with c chosen so sum(x) = 1.

  A multiplicative water-filling: domains inside the bounds keep the ratios of
  their weights, the rest sit at a floor or a cap. f(c) = sum_i clip(c w_i, lo,
  hi) is piecewise linear and non-decreasing in c with breakpoints lo/w_i and
  hi/w_i, so c is found exactly: a binary search over the sorted breakpoints
  for the segment where f crosses 1, then linear interpolation on it.

  Zero weights sit at the floor. If the positive-weight domains are all capped
  and still leave mass over, the zero-weight domains share it equally (the
  limit of tiny positive weights). All-zero weights give the uniform share.
  """
  w = np.asarray(weights, np.float64)
  n = w.shape[0]
  if w.ndim != 1 or n == 0:
    raise ValueError(f"weights must be a non-empty vector, got shape {w.shape}.")
  if not np.isfinite(w).all() or (w < 0).any():
    raise ValueError(f"weights must be finite and >= 0, got {w.tolist()}.")
  check_share_bounds(n, min_share, max_share)
  lo, hi = float(min_share), float(max_share)
  if not (w > 0).any():
    w = np.ones(n)
  pos = w > 0
  n_zero = int(n - pos.sum())
  capped_total = pos.sum() * hi + n_zero * lo
  if capped_total <= 1.0:
    x = np.where(pos, hi, lo)
    if n_zero:
      x[~pos] += (1.0 - capped_total) / n_zero
    return x

  wp = w[pos]

  def f(c):
    return np.clip(c * wp, lo, hi).sum() + n_zero * lo

  bps = np.unique(np.concatenate([lo / wp, hi / wp]))
  # f(bps[-1]) = capped_total > 1, so a crossing exists; find the first breakpoint with f >= 1.
  left, right = 0, len(bps) - 1
  while left < right:
    mid = (left + right) // 2
    if f(bps[mid]) >= 1.0:
      right = mid
    else:
      left = mid + 1
  c_hi = bps[left]
  c_lo = bps[left - 1] if left > 0 else 0.0
  f_lo, f_hi = f(c_lo), f(c_hi)
  c = c_hi if f_hi == f_lo else c_lo + (1.0 - f_lo) * (c_hi - c_lo) / (f_hi - f_lo)
  x = np.full(n, lo)
  x[pos] = np.clip(c * wp, lo, hi)
  return x
