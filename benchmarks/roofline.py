"""The limits benchmarks compare against: the machine's matmul rate, measured
in the same run, and the model FLOPs of a token (analytic)."""

import time

import jax
import jax.numpy as jnp
import numpy as np


def matmul_roofline() -> float:
  """fp32 GFLOP/s of large matmuls on this machine, one 1024^3 per device at
  once (every device busy, as in the workload; best of 5)."""
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  n = jax.device_count()
  mesh = Mesh(np.array(jax.devices()), ("data",))
  a = jax.device_put(jax.random.normal(jax.random.key(0), (1024 * n, 1024), jnp.float32),
                     NamedSharding(mesh, PartitionSpec("data", None)))
  b = jax.device_put(jax.random.normal(jax.random.key(1), (1024, 1024), jnp.float32),
                     NamedSharding(mesh, PartitionSpec()))
  f = jax.jit(lambda x, y: x @ y)
  f(a, b).block_until_ready()
  best = min(timed(lambda: f(a, b).block_until_ready()) for _ in range(5))
  return 2 * n * 1024 ** 3 / best / 1e9


def timed(fn) -> float:
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def token_flops(cfg, position: int) -> float:
  """Forward FLOPs of one token at ``position`` (attending position + 1 keys)."""
  d, n, k, h, f = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
  per_layer = d * n * h + 2 * d * k * h + n * h * d + 3 * d * f
  matmul = 2 * (cfg.num_layers * per_layer + d * cfg.vocab_size)
  return matmul + cfg.num_layers * 4 * (position + 1) * n * h


