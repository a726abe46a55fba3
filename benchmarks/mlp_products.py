"""Gate and up of a SwiGLU MLP: two products, or one over a stacked weight.

    python benchmarks/mlp_products.py [--positions=1344] [--d_model=576] [--mlp_dim=1536] [--rounds=2]

rlpt.models.transformer.MLP multiplies by its gate and up weights separately.
The alternative, one product over the two stacked into [D, 2, F] (or
concatenated into [D, 2F]), copies both weights on every call. This times
the three forms' forward and input gradient (jitted, median of 15 calls,
after a warm-up), alternating them ``--rounds`` times, and checks that they
agree. Defaults: SmolLM2-135M's widths at one RL step's packed positions.
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def forms(f: int):
  def stacked(x, wg, wu):
    gu = jnp.einsum("td,dcf->tcf", x, jnp.stack([wg, wu], axis=1))
    return jax.nn.silu(gu[:, 0]) * gu[:, 1]

  def concatenated(x, wg, wu):
    gu = x @ jnp.concatenate([wg, wu], axis=1)
    return jax.nn.silu(gu[:, :f]) * gu[:, f:]

  def separate(x, wg, wu):
    return jax.nn.silu(x @ wg) * (x @ wu)

  return {"two products": separate, "stacked [D,2,F]": stacked, "concatenated [D,2F]": concatenated}


def median_ms(fn, *args, calls: int = 15) -> float:
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(calls):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t)
  return 1e3 * statistics.median(times)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--positions", type=int, default=1344)
  parser.add_argument("--d_model", type=int, default=576)
  parser.add_argument("--mlp_dim", type=int, default=1536)
  parser.add_argument("--rounds", type=int, default=2)
  args = parser.parse_args()
  k = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(k[0], (args.positions, args.d_model))
  wg, wu = (jax.random.normal(key, (args.d_model, args.mlp_dim)) * args.d_model ** -0.5 for key in k[1:])
  fns = forms(args.mlp_dim)
  want = np.asarray(fns["two products"](x, wg, wu))
  for name, fn in fns.items():
    np.testing.assert_allclose(np.asarray(fn(x, wg, wu)), want, rtol=1e-4, atol=1e-4, err_msg=name)
  print(f"{args.positions} positions, d_model {args.d_model}, mlp_dim {args.mlp_dim}; median ms of 15 calls")
  for r in range(args.rounds):
    for name, fn in fns.items():
      fwd = jax.jit(fn)
      dx = jax.jit(jax.grad(lambda x, a, b, fn=fn: fn(x, a, b).sum()))
      print(f"round {r}: {name:20s} forward {median_ms(fwd, x, wg, wu):7.2f}  "
            f"input gradient {median_ms(dx, x, wg, wu):7.2f}", flush=True)


if __name__ == "__main__":
  main()
