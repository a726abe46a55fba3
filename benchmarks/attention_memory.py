"""Peak memory and time of attention training steps against context length.

    python benchmarks/attention_memory.py                 # default, ~2-3 min on 2 CPU cores
    python benchmarks/attention_memory.py --budget_gib 64 --max_len 67108864 \
        --time_max_len 16384 --sparse_len 4194304         # bigger runs

Part 1, training (forward + backward w.r.t. q, k, v of one attention layer),
for dense (fp32 oracle), blockwise (flash, one device) and ring (zigzag layout
over 8 emulated devices on the ``sequence`` axis, per-device figures):
  * peak bytes from the compiled program's memory analysis (arguments +
    outputs + temporaries - aliased; per device for the ring), found for
    doubling lengths until the budget is exceeded, so nothing is allocated;
  * wall time of one step at the lengths up to --time_max_len (after compile).
Part 2, a sparse (sliding window + sinks) causal prefill of one attention
layer at --sparse_len tokens on one device, timed.

The emulated devices share the host's cores, so ring wall times measure the
algorithm's overhead, not a speed-up. Memory figures are what XLA plans for
the CPU backend; a GPU/TPU build plans similarly but not identically.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rlpt.attention import (  # noqa: E402
    blockwise_attention,
    reference_attention,
    ring_attention_sharded,
)
from rlpt.sharding import make_mesh  # noqa: E402

GIB = 2**30


def _step(attn):
  """Forward + backward of one attention layer: (loss, dq, dk, dv)."""

  def loss(q, k, v, pos):
    return jnp.sum(attn(q, k, v, pos).astype(jnp.float32) ** 2)

  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def _impls(mesh, block):
  shard = NamedSharding(mesh, P(None, "sequence"))
  return {
      "dense": (_step(lambda q, k, v, p: reference_attention(q, k, v, q_positions=p,
                                                              kv_positions=p)), None),
      "blockwise": (_step(lambda q, k, v, p: blockwise_attention(
          q, k, v, q_positions=p, kv_positions=p, block_size=block)), None),
      # Inputs already in zigzag order and sharded on `sequence`, as a model
      # that permutes its tokens once would hold them.
      "ring": (_step(lambda q, k, v, p: ring_attention_sharded(
          q, k, v, q_positions=p, kv_positions=p, mesh=mesh, block_size=block)), shard),
  }


def _shapes(t, args, sharding):
  sds = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=sharding)
  dt = jnp.dtype(args.dtype)
  return (sds((1, t, args.heads, args.head_dim), dt), sds((1, t, args.kv_heads, args.head_dim), dt),
          sds((1, t, args.kv_heads, args.head_dim), dt), sds((1, t), jnp.int32))


def _peak_bytes(step, t, args, sharding) -> int:
  m = step.lower(*_shapes(t, args, sharding)).compile().memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes)


def _time_step(step, t, args, sharding) -> float:
  shapes = _shapes(t, args, sharding)
  rng = np.random.default_rng(0)
  inputs = [jnp.asarray(rng.standard_normal(s.shape), s.dtype) for s in shapes[:3]]
  inputs.append(jnp.arange(t, dtype=jnp.int32)[None])
  if sharding is not None:
    inputs = [jax.device_put(x, sharding) for x in inputs]
  compiled = step.lower(*shapes).compile()
  jax.block_until_ready(compiled(*inputs))  # warm-up
  start = time.perf_counter()
  jax.block_until_ready(compiled(*inputs))
  return time.perf_counter() - start


def training_table(args):
  mesh = make_mesh({"sequence": 8})
  impls = _impls(mesh, args.block_size)
  lengths = []
  t = args.min_len
  while t <= args.max_len:
    lengths.append(t)
    t *= 2
  peaks = {name: {} for name in impls}
  times = {name: {} for name in impls}
  longest = {}
  for name, (step, sharding) in impls.items():
    for t in lengths:
      peak = _peak_bytes(step, t, args, sharding)
      peaks[name][t] = peak
      if peak > args.budget_gib * GIB:
        break
      longest[name] = t
      if t <= args.time_max_len:
        times[name][t] = _time_step(step, t, args, sharding)
      print(f"  {name:9s} T={t:>9d}  peak {peak / GIB:8.3f} GiB"
            + (f"  {times[name][t] * 1e3:9.1f} ms" if t in times[name] else ""), flush=True)

  print(f"\nTraining step (fwd+bwd of one attention layer), B=1, N={args.heads}, "
        f"K={args.kv_heads}, H={args.head_dim}, {args.dtype}, block {args.block_size}; "
        "ring: per device of 8.")
  print("peak GiB (compiled memory analysis) / wall ms (one step, 2-core CPU)")
  header = f"{'T':>9s} | " + " | ".join(f"{n:>22s}" for n in impls)
  print(header)
  print("-" * len(header))
  for t in lengths:
    cells = []
    for name in impls:
      if t not in peaks[name]:
        cells.append(f"{'-':>22s}")
        continue
      over = peaks[name][t] > args.budget_gib * GIB
      ms = f"{times[name][t] * 1e3:9.1f}" if t in times[name] else f"{'':>9s}"
      cells.append(f"{peaks[name][t] / GIB:10.3f}{'!' if over else ' '} {ms}  ")
    print(f"{t:>9d} | " + " | ".join(cells))
  print(f"('!' = over the {args.budget_gib} GiB budget)")
  for name in impls:
    reach = longest.get(name)
    capped = reach == lengths[-1]
    print(f"longest context within {args.budget_gib} GiB: {name:9s} "
          f"{reach if reach else 'none':>9}{' (hit --max_len)' if capped else ''}")


def sparse_prefill(args):
  t, w = args.sparse_len, args.sparse_window
  dt = jnp.dtype(args.dtype)
  rng = np.random.default_rng(0)
  q = jnp.asarray(rng.standard_normal((1, t, args.heads, args.head_dim), np.float32), dt)
  k = jnp.asarray(rng.standard_normal((1, t, args.kv_heads, args.head_dim), np.float32), dt)
  v = jnp.asarray(rng.standard_normal((1, t, args.kv_heads, args.head_dim), np.float32), dt)
  pos = jnp.arange(t, dtype=jnp.int32)[None]
  fn = jax.jit(lambda q, k, v, pos: blockwise_attention(
      q, k, v, q_positions=pos, kv_positions=pos, window=w, num_sinks=args.sparse_sinks,
      block_size=args.sparse_block))
  start = time.perf_counter()
  compiled = fn.lower(q, k, v, pos).compile()
  compile_s = time.perf_counter() - start
  m = compiled.memory_analysis()
  peak = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
  start = time.perf_counter()
  out = jax.block_until_ready(compiled(q, k, v, pos))
  run_s = time.perf_counter() - start
  assert np.isfinite(float(jnp.sum(out[0, -8:].astype(jnp.float32))))
  blocks = -(-t // args.sparse_block)
  dense_gib = t * t * args.heads * 4 / GIB
  print(f"\nSparse prefill (forward, one attention layer): T={t}, window {w}, "
        f"{args.sparse_sinks} sinks, block {args.sparse_block}, N={args.heads}, "
        f"K={args.kv_heads}, H={args.head_dim}, {args.dtype}, one CPU device")
  print(f"  wall {run_s:.1f} s (+{compile_s:.1f} s compile), {t / run_s:,.0f} tokens/s, "
        f"peak {peak / GIB:.2f} GiB; {blocks} query blocks; a dense score matrix alone "
        f"would be {dense_gib:,.0f} GiB")


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--budget_gib", type=float, default=16.0)
  parser.add_argument("--min_len", type=int, default=1024)
  parser.add_argument("--max_len", type=int, default=1 << 25, help="cap of the doubling")
  parser.add_argument("--time_max_len", type=int, default=4096,
                      help="time steps up to this length (compile-only beyond)")
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--kv_heads", type=int, default=2)
  parser.add_argument("--head_dim", type=int, default=64)
  parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  parser.add_argument("--block_size", type=int, default=512)
  parser.add_argument("--sparse_len", type=int, default=1 << 20, help="0 skips part 2")
  parser.add_argument("--sparse_window", type=int, default=1024)
  parser.add_argument("--sparse_sinks", type=int, default=4)
  parser.add_argument("--sparse_block", type=int, default=256)
  parser.add_argument("--skip_training", action="store_true")
  args = parser.parse_args()
  print(f"jax {jax.__version__}, backend {jax.default_backend()}, {len(jax.devices())} devices")
  if not args.skip_training:
    training_table(args)
  if args.sparse_len:
    sparse_prefill(args)


if __name__ == "__main__":
  main()
