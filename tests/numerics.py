"""Tolerances for two float32 computations of one quantity, set from its scale.

Two programs that compute the same quantity in another order (another mesh,
another attention kernel, another XLA CPU target: AVX2 and AVX-512 split and
vectorise reductions differently, and the thread count changes how a matmul
is blocked) agree only up to rounding. Rounding is proportional to the size
of the terms that are summed, not to the result: an element of a gradient
that is small only because its terms cancel carries the rounding of the
large terms, and a KL of a policy to itself, zero up to rounding, carries the
rounding of the log-probabilities it sums. Hence:

* a tensor is compared against its own scale (`assert_close_to_scale`:
  |a - b| <= rtol * max|b| elementwise), not with a fixed absolute 1e-6;
* a quantity that is exactly zero in exact arithmetic gets an absolute
  tolerance from the magnitude of its terms (`sum_rounding_atol`);
* a quantity that amplifies rounding element by element (Adam's first step
  divides each gradient element by its own magnitude) is compared normwise.

Each test that uses these also shows that a real error (a wrong shard, a
dropped term) still fails the same comparison.
"""

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7


def assert_close_to_scale(actual, desired, *, rtol: float, scale: float | None = None,
                          err_msg: str = "") -> None:
  """|actual - desired| <= rtol * scale elementwise; scale defaults to max|desired|."""
  actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
  if scale is None:
    scale = float(np.abs(desired).max()) if desired.size else 0.0
  np.testing.assert_allclose(actual, desired, rtol=0, atol=rtol * scale,
                             err_msg=f"{err_msg} (atol = {rtol:g} x scale {scale:.3g})")


def assert_close_normwise(actual, desired, *, rtol: float, err_msg: str = "") -> None:
  """||actual - desired||_2 <= rtol * ||desired||_2."""
  actual, desired = np.asarray(actual, np.float64), np.asarray(desired, np.float64)
  err, norm = np.linalg.norm(actual - desired), np.linalg.norm(desired)
  assert err <= rtol * norm, (f"{err_msg}: normwise relative error {err / max(norm, 1e-300):.3g} "
                              f"exceeds {rtol:g} (||a - b|| = {err:.3g}, ||b|| = {norm:.3g})")


def sum_rounding_atol(abs_terms_sum: float, *, ulps: float = 16.0) -> float:
  """Absolute tolerance for a sum of float32 terms whose magnitudes add to
  `abs_terms_sum`: `ulps` float32 epsilons of it. Each term is itself the
  result of reductions (logits over d_model, a log-sum-exp over the
  vocabulary, attention over the context), so the budget is tens of ulps,
  not one."""
  return ulps * EPS32 * float(abs_terms_sum)
