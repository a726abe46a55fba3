"""The limits benchmarks compare against: the machine's matmul rate and memory
bandwidth, measured in the same run, a datasheet table of accelerators, and the
model FLOPs and bytes of the work (analytic)."""

import time

import jax
import jax.numpy as jnp
import numpy as np


# TinyLlama's shape (a Llama-shaped 1.1B model): the device benchmarks' policy.
LLAMA_1B = dict(vocab_size=32000, d_model=2048, num_layers=22, num_heads=32, num_kv_heads=4,
                head_dim=64, mlp_dim=5632)


def matmul_roofline() -> float:
  """fp32 GFLOP/s of large matmuls on this machine, one 1024^3 per device at
  once (every device busy, as in the workload; best of 5)."""
  return matmul_rate() / 1e9


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




def generation_flops(cfg, rows: int, prompt: int, new: int, group: int = 1) -> float:
  """Prefill of ``prompt`` tokens (once per ``group`` rows) plus ``new`` decoded
  tokens, for ``rows`` rows."""
  prefill = sum(token_flops(cfg, c) for c in range(prompt - 1))
  return rows // group * prefill + decode_flops(cfg, rows, prompt, new)


def decode_flops(cfg, rows: int, prompt: int, new: int) -> float:
  """The ``new`` decoded tokens of ``rows`` rows after a ``prompt``-token
  prompt (the first from the prompt's last position)."""
  return rows * sum(token_flops(cfg, c) for c in range(prompt - 1, prompt + new - 1))


def kv_bytes_per_token(cfg, int8: bool = False) -> float:
  """Bytes of one token's keys and values over all layers: the cache's dtype
  (the model's), or int8 with one fp32 scale per (token, kv head) for k and v."""
  k, h = cfg.num_kv_heads, cfg.head_dim
  per_layer = 2 * k * (h + 4) if int8 else 2 * k * h * np.dtype(cfg.jnp_dtype).itemsize
  return cfg.num_layers * per_layer


def decode_bytes(weight_bytes: float, kv_token_bytes: float, rows: int, prompt: int, new: int,
                 group: int = 1) -> float:
  """Bytes a decode of ``new`` tokens for ``rows`` rows must read at least: every
  weight once per step, and each row's cached context (a ``group``'s shared
  prompt once per step) as it grows."""
  total = 0.0
  for t in range(new):
    context = rows // group * prompt + rows * t
    total += weight_bytes + context * kv_token_bytes
  return total


def update_bytes(num_params: int, replicas: int = 1) -> float:
  """Bytes an fp32 AdamW training step must move at least per replica of the
  weights: read them for the forward and the backward, write and read the
  gradients, read and write the weights and both moments (40 bytes a
  parameter). Activations are left out: what a step keeps for its backward
  may stay in cache, so this is a lower bound."""
  return 40.0 * num_params * replicas


def bound_seconds(flops: float, bytes_moved: float, peak_flops: float,
                  bandwidth: float) -> tuple[float, str]:
  """The roofline's lower bound on a part's time, and what binds it."""
  compute, memory = flops / peak_flops, bytes_moved / bandwidth
  return (compute, "compute") if compute >= memory else (memory, "memory")


def memory_bandwidth(devices=None, mib: int = 256, reps: int = 5) -> float:
  """Bytes/s of a streaming kernel (y = 2x + 1 over ``mib`` MiB of fp32 per
  device: every byte read once and written once) on ``devices`` (default all,
  each busy at once, as in a data-parallel workload), best of ``reps``."""
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  devices = list(devices or jax.devices())
  n = mib * 2**20 // 4
  mesh = Mesh(np.array(devices), ("data",))
  x = jax.device_put(jnp.ones((n * len(devices),), jnp.float32),
                     NamedSharding(mesh, PartitionSpec("data")))
  f = jax.jit(lambda a: a * 2.0 + 1.0)
  jax.block_until_ready(f(x))
  best = min(timed(lambda: jax.block_until_ready(f(x))) for _ in range(reps))
  return 2 * x.size * 4 / best


def matmul_rate(devices=None, dtype=jnp.float32, n: int = 1024, reps: int = 5) -> float:
  """FLOP/s of n^3 matmuls in ``dtype``, one per device of ``devices`` (default
  all) at once, best of ``reps``."""
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  devices = list(devices or jax.devices())
  mesh = Mesh(np.array(devices), ("data",))
  a = jax.device_put(jax.random.normal(jax.random.key(0), (n * len(devices), n), dtype),
                     NamedSharding(mesh, PartitionSpec("data", None)))
  b = jax.device_put(jax.random.normal(jax.random.key(1), (n, n), dtype),
                     NamedSharding(mesh, PartitionSpec()))
  f = jax.jit(lambda x, y: x @ y)
  jax.block_until_ready(f(a, b))
  best = min(timed(lambda: jax.block_until_ready(f(a, b))) for _ in range(reps))
  return 2 * len(devices) * n ** 3 / best


# Peak dense bf16 FLOP/s and HBM bandwidth by jax Device.device_kind (first
# matching substring wins, so the specific names come first). Vendor figures:
DEVICE_LIMITS = (
    # NVIDIA H200 SXM datasheet: BF16 Tensor Core 1,979 TFLOPS "with sparsity" (989 dense),
    # 141 GB HBM3e at 4.8 TB/s.
    ("H200", 989e12, 4.8e12, "NVIDIA H200 datasheet: 989 TFLOPS dense bf16, 4.8 TB/s HBM3e"),
    # NVIDIA H100 datasheet, PCIe: BF16 1,513 TFLOPS with sparsity (756 dense), 2.0 TB/s HBM2e.
    ("H100 PCIe", 756e12, 2.0e12, "NVIDIA H100 datasheet (PCIe): 756 TFLOPS dense bf16, 2.0 TB/s"),
    # NVIDIA H100 datasheet, SXM: BF16 1,979 TFLOPS with sparsity (989 dense), 3.35 TB/s HBM3.
    ("H100", 989e12, 3.35e12, "NVIDIA H100 datasheet (SXM): 989 TFLOPS dense bf16, 3.35 TB/s"),
    # NVIDIA A100 datasheet: BF16 312 TFLOPS dense; 80 GB SXM 2,039 GB/s, 40 GB 1,555 GB/s.
    ("A100-SXM4-80GB", 312e12, 2.039e12, "NVIDIA A100 datasheet (80GB SXM): 312 TFLOPS, 2,039 GB/s"),
    ("A100", 312e12, 1.555e12, "NVIDIA A100 datasheet (40GB): 312 TFLOPS bf16, 1,555 GB/s"),
    # NVIDIA L4 datasheet: BF16 242 TFLOPS with sparsity (121 dense), 300 GB/s GDDR6.
    ("L4", 121e12, 300e9, "NVIDIA L4 datasheet: 121 TFLOPS dense bf16, 300 GB/s"),
    # Google Cloud TPU docs (system architecture pages), per chip:
    ("TPU v6 lite", 918e12, 1.64e12, "Cloud TPU v6e docs: 918 TFLOPS bf16, 1,640 GB/s HBM"),
    ("TPU v5 lite", 197e12, 819e9, "Cloud TPU v5e docs: 197 TFLOPS bf16, 819 GB/s HBM"),
    ("TPU v5", 459e12, 2.765e12, "Cloud TPU v5p docs: 459 TFLOPS bf16, 2,765 GB/s HBM"),
    ("TPU v4", 275e12, 1.228e12, "Cloud TPU v4 docs: 275 TFLOPS bf16, 1,228 GB/s HBM"),
)


def device_limits(device_kind: str) -> tuple[float, float, str] | None:
  """(peak bf16 FLOP/s, HBM bytes/s, source) of a device kind, or None if unknown."""
  for key, flops, bandwidth, source in DEVICE_LIMITS:
    if key.lower() in device_kind.lower():
      return flops, bandwidth, source
  return None
