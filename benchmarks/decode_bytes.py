r"""Bytes one decode step reads, by XLA's own count, against the least it must read.

    python benchmarks/decode_bytes.py                      # 1.1B, batch 64 and 256, 2K context
    python benchmarks/decode_bytes.py --targets=cpu,tpu-v5e,tpu-v6e   # also TPU programs
    python benchmarks/decode_bytes.py --batches=8 --model=tiny --context=256   # seconds

Decode is bound by memory reads: each step must read every weight once and
each row's cached keys and values up to its position. This compiles the decode
step program of each sampling path for the device shapes (abstract arrays: no
weights are made, any machine compiles it) and prints, per case, the bytes
XLA's cost analysis of the optimised program says it accesses, against

  minimum = weights read once (the output head whole, the embedding's B rows)
          + the live keys and values (B rows x context tokens x bytes a token)

so ``ratio`` 1.0 is a step that reads nothing twice and nothing it need not.
Paths: ``plain`` (rlpt.sampling.Sampler: the model's own attention over its
cache); ``split`` (the fast sampler's static layout, PrefixLayout with one row
per prompt in lockstep: a prompt part and a generated part, each step writing
one slot of every row at once); ``flat`` (FlatLayout, slot = position: the
continuous-batching engine's slots and speculative decoding, where rows move
apart and each writes its own slot); KV caches in bf16 and int8; ``-kernel``:
the split layout with its decode attention as the Pallas kernel
(rlpt.models.decode_kernel; TPU targets only). The compiler cannot see inside
a kernel: it counts a kernel call as reading its operands whole, so the
kernel's skipping of the dead blocks past each row's position is not in its
count (here every row's context is live, so there is nothing to skip). Weights
are bf16, as a sampler reads them.

Targets (``--targets``): ``cpu``, this machine's XLA:CPU; ``tpu-v5e``,
``tpu-v6e``, ``tpu-v5p``: the TPU compiler itself, compiling for one chip of
that kind with no TPU present (JAX's deviceless ahead-of-time compilation:
``jax.experimental.topologies``; needs libtpu, which launch/locks/tpu.txt
pins: ``pip install libtpu==0.0.50.1``). Each compiler counts its own plan:
XLA:CPU has no 16-bit float scatter or dynamic-update-slice and widens such a
cache buffer to fp32 and back around each write, and counts any scatter as a
read and a write of its whole buffer, so a bf16 cache's writes cost several
times the cache there; the TPU compiler does neither, and its count is the
chip's. No GPU compiler runs without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import roofline  # noqa: E402

MODELS = {"1b": roofline.LLAMA_1B,
          "tiny": dict(vocab_size=512, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=16, mlp_dim=128)}
PATHS = ("plain", "split-bf16", "split-int8", "flat-bf16", "flat-int8", "split-bf16-kernel",
         "split-int8-kernel")


def model_config(fields: dict, attention_impl: str = "dense"):
  from rlpt.models import ModelConfig
  return ModelConfig(**fields, tie_embeddings=False, scale_tied_head=False, dtype="bfloat16",
                     attention_impl=attention_impl, rope_theta=10_000.0, norm_eps=1e-5)


def abstract_params(cfg):
  """The policy's parameters as ShapeDtypeStructs in the model's dtype (what a
  sampler reads), and the graphdef."""
  from flax import nnx

  from rlpt.models import Transformer
  graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0))))
  cast = lambda x: jax.ShapeDtypeStruct(
      x.shape, cfg.jnp_dtype if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype)
  return graphdef, jax.tree.map(cast, state)


def minimum_bytes(cfg, params, batch: int, context: int, int8_kv: bool) -> float:
  """Weights read once (the embedding table's ``batch`` looked-up rows only)
  and ``context`` cached tokens per row."""
  weights = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  embed = cfg.vocab_size * cfg.d_model * cfg.jnp_dtype.itemsize
  weights += batch * cfg.d_model * cfg.jnp_dtype.itemsize - embed
  return weights + batch * context * roofline.kv_bytes_per_token(cfg, int8_kv)


def step_program(path: str, cfg, graphdef, params, batch: int, context: int, prompt: int,
                 sharding=None, kernel: str = "pallas-tpu", platforms=None):
  """The decode step of ``path`` lowered at abstract shapes: every row caches
  the token at position ``context`` - 1 (so ``context`` tokens are live after
  its write) in a cache of ``context`` + 1 slots (``split``: ``prompt`` prompt
  slots and the rest generated). ``kernel``: the ``-kernel`` paths' decode
  kernel; ``platforms``: lower for these (default: where ``sharding`` is)."""
  from rlpt.sampling import SamplingParams
  sampling = SamplingParams(1.0)
  rng = jax.eval_shape(lambda: jax.random.key(0))
  ints = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)
  new = 16  # the loop's token buffers: their size does not change the step's reads
  if path == "plain":
    from flax import nnx

    from rlpt.models import init_cache
    from rlpt.sampling.sampler import DecodeState, Sampler, decode_step
    sampler = Sampler(graphdef, cfg, context, new, 0, ())
    cache = jax.eval_shape(lambda: init_cache(cfg, batch, context + 1))
    state = DecodeState(ints(), ints(batch, new), jax.ShapeDtypeStruct((batch, new), jnp.float32),
                        jax.ShapeDtypeStruct((batch,), bool), ints(batch), ints(batch),
                        jax.ShapeDtypeStruct((batch, cfg.vocab_size), jnp.float32), cache, rng)
    stops = jnp.zeros((0,), jnp.int32)
    fn = lambda p, s: decode_step(sampler, nnx.merge(graphdef, p), s, sampling, stops)
  else:
    from rlpt.sampling.fast import DecodeLoopState, FastSampler, FlatLayout, decode_step
    from rlpt.sampling.prefix import PrefixCache, PrefixLayout
    int8 = "int8" in path
    flat = FlatLayout(kv_int8=int8)
    if path.startswith("split"):
      layout = PrefixLayout(1, kv_int8=int8, aligned=True,
                            decode_kernel=kernel if path.endswith("-kernel") else "xla")
      cache = jax.eval_shape(lambda: PrefixCache(flat.init(cfg, batch, prompt),
                                                 jnp.zeros((batch,), jnp.int32),
                                                 flat.init(cfg, batch, context + 1 - prompt)))
    else:
      layout = flat
      cache = jax.eval_shape(lambda: flat.init(cfg, batch, context + 1))
    sampler = FastSampler(graphdef, cfg, context, new, 0, (), layout)
    state = DecodeLoopState(ints(), ints(batch, new),
                            jax.ShapeDtypeStruct((batch, new), jnp.float32),
                            jax.ShapeDtypeStruct((batch,), bool), ints(batch), ints(batch),
                            ints(batch), cache, rng)
    fn = lambda p, s: decode_step(sampler, p, s, sampling)
  if sharding is not None:  # every input on the one device of ``sharding``'s mesh
    place = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
    params, state = jax.tree.map(place, (params, state))
  return jax.jit(fn, donate_argnums=1).trace(params, state).lower(lowering_platforms=platforms)


TPU_TOPOLOGIES = {"tpu-v5e": "v5e:1x1", "tpu-v6e": "v6e:1x1", "tpu-v5p": "v5p:1x1x1"}


def target_sharding(target: str):
  """None for this machine's backend (``cpu``), else a sharding on one chip of
  a TPU topology compiled for without the chip."""
  if target == "cpu":
    return None
  if target not in TPU_TOPOLOGIES:
    raise ValueError(f"target {target!r}; expected cpu or one of {sorted(TPU_TOPOLOGIES)}.")
  from jax.experimental import topologies
  from jax.sharding import NamedSharding, PartitionSpec
  try:
    topology = topologies.get_topology_desc(platform="tpu",
                                            topology_name=TPU_TOPOLOGIES[target])
  except Exception as e:  # no libtpu: the message says what is missing
    raise RuntimeError(f"{target} needs libtpu (pip install libtpu==0.0.50.1): {e}") from e
  return NamedSharding(topologies.make_mesh(topology, (1,), ("chip",)), PartitionSpec())


def kernel_reads(cfg, batch: int, context: int, prompt: int, int8_kv: bool) -> float:
  """What the decode kernel reads in one step of the split layout, from its
  block specs (the compiler counts nothing inside a kernel): every layer, row
  and kv head reads the key and value blocks up to the one holding the row's
  last visible slot, of the prompt part (``prompt`` slots) and of the
  generated part (``context`` - ``prompt`` live of ``context`` + 1 -
  ``prompt`` slots; the slots past its last whole block go through XLA and
  are in the compiler's count), int8 codes with their fp32 scales."""
  from rlpt.models.decode_kernel import DEFAULT_BLOCK
  per_slot = 2 * cfg.head_dim * (1 if int8_kv else 2) + (8 if int8_kv else 0)
  slots = 0
  for live, length in ((prompt, prompt), (context - prompt, context + 1 - prompt)):
    blocks = length // DEFAULT_BLOCK
    if blocks:
      slots += min(-(-live // DEFAULT_BLOCK), blocks) * DEFAULT_BLOCK
  return float(cfg.num_layers * batch * cfg.num_kv_heads * slots * per_slot)


def measure(path: str, model: str, batch: int, context: int, prompt: int,
            target: str = "cpu") -> dict:
  cfg = model_config(MODELS[model])
  graphdef, params = abstract_params(cfg)
  compiled = step_program(path, cfg, graphdef, params, batch, context, prompt,
                          target_sharding(target)).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  accessed = float(cost["bytes accessed"])
  kernel = kernel_reads(cfg, batch, context, prompt, "int8" in path) if path.endswith("-kernel") else 0.0
  accessed += kernel
  least = minimum_bytes(cfg, params, batch, context, "int8" in path)
  return {"path": path, "model": model, "batch": batch, "context": context,
          "bytes_accessed": accessed, "kernel_bytes": kernel, "minimum_bytes": least, "ratio": accessed / least,
          "flops": float(cost.get("flops", np.nan)), "target": target, "jax": jax.__version__}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="1b", choices=sorted(MODELS))
  parser.add_argument("--batches", default="64,256")
  parser.add_argument("--context", type=int, default=2048)
  parser.add_argument("--prompt", type=int, default=512, help="Prompt slots of the split layout.")
  parser.add_argument("--paths", default=",".join(PATHS))
  parser.add_argument("--targets", default="cpu", help="cpu and/or " + ", ".join(TPU_TOPOLOGIES))
  parser.add_argument("--json", default=None, help="Also write the rows to this file.")
  args = parser.parse_args(argv)
  paths = args.paths.split(",")
  unknown = sorted(set(paths) - set(PATHS))
  if unknown:
    parser.error(f"--paths has {unknown}; expected some of {list(PATHS)}.")
  rows = []
  print(f"{'target':8} {'path':17} {'batch':>5} {'context':>7} {'accessed GB':>11} "
        f"{'minimum GB':>10} {'ratio':>6}", flush=True)
  for target in args.targets.split(","):
    for path in paths:
      if path.endswith("-kernel") and target == "cpu":
        print(f"{target:8} {path:17} skipped: a Mosaic kernel compiles for TPU targets only")
        continue
      for batch in (int(b) for b in args.batches.split(",")):
        row = measure(path, args.model, batch, args.context, args.prompt, target)
        rows.append(row)
        print(f"{target:8} {path:17} {batch:5d} {args.context:7d} "
              f"{row['bytes_accessed'] / 1e9:11.3f} {row['minimum_bytes'] / 1e9:10.3f} "
              f"{row['ratio']:6.2f}", flush=True)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(rows, f, indent=1)
  return rows


if __name__ == "__main__":
  main()
