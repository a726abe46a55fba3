"""benchmarks/mlp_products.py times three forms of one computation: they agree."""

import os
import sys

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import mlp_products  # noqa: E402


def test_the_three_gate_and_up_forms_agree_with_numpy_in_value_and_gradient():
  rng = np.random.default_rng(0)
  x, wg, wu = (rng.normal(size=s).astype(np.float32) * 0.3 for s in ((5, 8), (8, 6), (8, 6)))
  g = x @ wg
  want = g / (1 + np.exp(-g)) * (x @ wu)  # SiLU(x Wg) * x Wu
  grads = []
  for name, fn in mlp_products.forms(6).items():
    np.testing.assert_allclose(np.asarray(fn(x, wg, wu)), want, rtol=1e-5, atol=1e-6, err_msg=name)
    grads.append(np.asarray(jax.grad(lambda x, fn=fn: fn(x, wg, wu).sum())(x)))
  for got in grads[1:]:
    np.testing.assert_allclose(got, grads[0], rtol=1e-5, atol=1e-6)
