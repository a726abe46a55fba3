"""Peak memory of the RL update with full and with chunked token scoring, compile only.

    python benchmarks/scoring_memory.py                    # ~3 min on 2 CPU cores
    python benchmarks/scoring_memory.py --lengths=32768 --vocabs=32000,128256

Part 1: one sequence of T tokens (32K, 128K, 1M) through a reduced trunk
(d_model 64, one layer, blockwise attention) and a real vocabulary's output
head, the whole policy update (``rlpt.steps.rl_train_step``: forward,
backward, Adam). XLA's memory analysis of the compiled program gives its
peak (arguments + outputs + temporaries - aliased); nothing is allocated, so a
1M-token update whose full logits alone are 0.5 TB compiles on a laptop. With
``rl.logprob_chunk`` positions scored at a time the peak less the trunk's
must stay within a few chunk x vocab fp32 blocks, whatever T is.

Part 2: the memory plan (``rlpt.device.memory``, what ``launch.plan`` prints)
against XLA's analysis of the same update for a reduced model at the
long-context cases' tokens-to-vocabulary ratio (8K tokens, vocabulary 8,016 =
128,256 / 16; 128K tokens against 128,256 in the plans): the plan's policy
step (parameters, Adam state, gradients, activations, scoring) over XLA's.
"trunk" in part 1 is the same chunked update with a 256-entry vocabulary.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from rlpt.device.memory import abstract_mesh, activation_bytes, model_bytes, scoring_bytes  # noqa: E402
from rlpt.models import ModelConfig, Transformer  # noqa: E402
from rlpt.rl import LossConfig, LossCounts  # noqa: E402
from rlpt.sampling import SamplingParams  # noqa: E402
from rlpt.sharding import DEFAULT_RULES  # noqa: E402
from rlpt.steps import RLBatch, init_train_state, rl_train_step  # noqa: E402

GIB = 2 ** 30
TRUNK = ModelConfig(vocab_size=128256, d_model=64, num_layers=1, num_heads=4, num_kv_heads=2,
                    head_dim=16, mlp_dim=128, attention_impl="blockwise",
                    attention_block_size=512)


def update_peak(cfg: ModelConfig, length: int, chunk: int, rows: int = 1) -> int:
  """Peak bytes XLA plans for one compiled update of ``rows`` x ``length`` tokens."""
  graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(0))))
  optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-4))
  state = jax.eval_shape(lambda p: init_train_state(p, optimizer), abstract)
  f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
  batch = RLBatch(jax.ShapeDtypeStruct((rows, length + 1), jnp.int32), f32(rows, length),
                  f32(rows, length), f32(rows, length), f32(rows, length))
  counts = LossCounts(f32(), f32())
  step = jax.jit(functools.partial(rl_train_step, graphdef=graphdef, optimizer=optimizer,
                                   loss_cfg=LossConfig(), sampling=SamplingParams(1.0),
                                   chunk=chunk), donate_argnums=0)
  m = step.lower(state, batch, counts, f32()).compile().memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
          - m.alias_size_in_bytes)


def part1(lengths, vocabs, chunk):
  print(f"## Update peak, one sequence, trunk d_model {TRUNK.d_model} x {TRUNK.num_layers} layer, "
        f"chunk {chunk} positions (XLA CPU memory analysis, GiB)\n")
  print("| tokens | vocab | full logits block | full scoring | chunked | chunk x vocab fp32 "
        "| chunked less trunk / chunk block |")
  print("|---:|---:|---:|---:|---:|---:|---:|")
  for length in lengths:
    trunk = update_peak(dataclasses.replace(TRUNK, vocab_size=256), length, chunk)
    for vocab in vocabs:
      cfg = dataclasses.replace(TRUNK, vocab_size=vocab)
      full, chunked = update_peak(cfg, length, 0), update_peak(cfg, length, chunk)
      block = 4 * chunk * vocab
      print(f"| {length:,} | {vocab:,} | {4 * length * vocab / GIB:.2f} | {full / GIB:.2f} "
            f"| {chunked / GIB:.3f} | {block / GIB:.3f} | {(chunked - trunk) / block:.2f} |",
            flush=True)


def part2(chunk):
  cfg = ModelConfig(vocab_size=128256 // 16, d_model=256, num_layers=2, num_heads=8,
                    num_kv_heads=4, head_dim=32, mlp_dim=768, attention_impl="blockwise",
                    attention_block_size=512)
  length = 131072 // 16
  mesh = abstract_mesh({}, 1)
  print(f"\n## Plan against XLA: {cfg.num_layers} layers, d_model {cfg.d_model}, vocab "
        f"{cfg.vocab_size:,}, {length:,} tokens, fp32, one device (GiB)\n")
  print("| scoring | plan: params + Adam + grads | activations | scoring | plan total "
        "| XLA | plan / XLA |")
  print("|---|---:|---:|---:|---:|---:|---:|")
  for c in (0, chunk):
    m = model_bytes(Transformer, cfg, mesh, DEFAULT_RULES)
    resident = m["params"] + m["optimizer"] + m["gradients"]
    act = activation_bytes(cfg, 1, length, mesh, DEFAULT_RULES)
    score = scoring_bytes(cfg, 1, length, c, mesh, DEFAULT_RULES)
    xla = update_peak(cfg, length, c)
    plan = resident + act + score
    print(f"| {'full' if c == 0 else f'chunk {c}'} | {resident / GIB:.3f} | {act / GIB:.3f} "
          f"| {score / GIB:.3f} | {plan / GIB:.3f} | {xla / GIB:.3f} | {plan / xla:.2f} |",
          flush=True)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--lengths", default="32768,131072,1048576")
  p.add_argument("--vocabs", default="32000,128256")
  p.add_argument("--chunk", type=int, default=1024)
  p.add_argument("--skip_plan", action="store_true")
  a = p.parse_args()
  part1([int(x) for x in a.lengths.split(",")], [int(x) for x in a.vocabs.split(",")], a.chunk)
  if not a.skip_plan:
    part2(a.chunk)


if __name__ == "__main__":
  main()
