"""The engine's two compiled programs, with explicit shardings on the sample mesh.

The slot axis of the KV store and of the slots' state is the ``batch`` rule's
(sharded over the data axis); a prefill call's A rows are replicated (they
gather their slots' cache rows). An engine compiles its store's initialiser,
one prefill program and at most 16 decode programs (four widths,
``row_ladder``, by four position bounds, ``bound_ladder``), whatever the
workload.
"""

from __future__ import annotations

import dataclasses
import functools

from flax import nnx
from jax.sharding import Mesh

from rlpt.config.model import ModelConfig
from rlpt.device import ProgramPool, batch_multiple, batch_sharding, replicated
from rlpt.device.programs import with_rules
from rlpt.models import KVCache
from rlpt.sampling.fast import FlatLayout, check_model_cfg
from rlpt.sampling.logits import SamplingParams
from rlpt.sampling.quant import Int8KVCache
from rlpt.sampling.slots import Emitted, Slots, decode_rows, decode_steps, prefill_rows
from rlpt.sharding import K_CACHE_AXES, KV_CACHE_AXES, Rules, named_sharding


@dataclasses.dataclass(frozen=True)
class EngineShape:
  """What fixes the engine's programs: slots, their cache length, decode steps
  per chunk, prefill rows and tokens per prefill call, and the KV dtype."""

  slots: int
  cache_len: int
  chunk_steps: int
  prefill_rows: int
  prefill_len: int
  kv_int8: bool


def cache_shardings(cfg: ModelConfig, shape: EngineShape, mesh: Mesh, rules: Rules):
  """Shardings of the KV store: slots on the ``batch`` rule, kv heads on theirs."""
  n, s = cfg.num_layers, shape.slots
  k_sh = named_sharding(K_CACHE_AXES, mesh, rules, (s, cfg.num_kv_heads, cfg.head_dim,
                                                    shape.cache_len), "engine keys")
  v_sh = named_sharding(KV_CACHE_AXES, mesh, rules, (s, cfg.num_kv_heads, shape.cache_len,
                                                     cfg.head_dim), "engine values")
  if not shape.kv_int8:
    return KVCache((k_sh,) * n, (v_sh,) * n)
  sc = named_sharding(("batch", "kv_heads", "seq"), mesh, rules,
                      (s, cfg.num_kv_heads, shape.cache_len), "engine kv scales")
  return Int8KVCache((k_sh,) * n, (v_sh,) * n, (sc,) * n, (sc,) * n)


def slots_shardings(mesh: Mesh, rules: Rules) -> Slots:
  b1, b2 = batch_sharding(mesh, rules, 1), batch_sharding(mesh, rules, 2)
  return Slots(b1, b1, b1, b2, b1, b1)


@dataclasses.dataclass(frozen=True, eq=False)
class EnginePrograms:
  """``init()`` -> an empty KV store; ``decode(params, cache, slots)`` -> (cache,
  Emitted) over every slot and position; ``decode_rows[bound](params, cache,
  slots_W, slot_W)`` the same over W slots' first ``bound`` positions (one
  program per W of ``widths`` and bound of ``bounds``); ``prefill(params,
  cache, slot_A, tokens_AxC, start_A)`` -> cache. The cache is donated."""

  init: object
  decode: object
  decode_rows: dict
  prefill: object
  widths: tuple[int, ...]
  bounds: tuple[int, ...]


def build_programs(programs: ProgramPool, graphdef: nnx.GraphDef, cfg: ModelConfig,
                   shape: EngineShape, param_shardings, mesh: Mesh, rules: Rules,
                   sampling: SamplingParams, stop_ids: tuple[int, ...],
                   pad_id: int) -> EnginePrograms:
  check_model_cfg(cfg)
  layout = FlatLayout(shape.kv_int8)
  cache_sh, slots_sh, rep = cache_shardings(cfg, shape, mesh, rules), slots_shardings(mesh, rules), replicated(mesh)
  emitted_sh = Emitted(batch_sharding(mesh, rules, 2), batch_sharding(mesh, rules, 2), slots_sh)
  init = programs.jit(lambda: layout.init(cfg, shape.slots, shape.cache_len),
                      out_shardings=cache_sh)
  static = dict(sampling=sampling, steps=shape.chunk_steps, stop_ids=stop_ids, pad_id=pad_id)
  decode = functools.partial(decode_steps, graphdef, layout, **static)
  rows = functools.partial(decode_rows, graphdef, layout, **static)
  prefill = functools.partial(prefill_rows, graphdef, layout)
  bounds = bound_ladder(shape.cache_len, shape.chunk_steps)
  return EnginePrograms(
      init=init,
      decode=programs.jit(with_rules(decode, mesh, rules),
                          in_shardings=(param_shardings, cache_sh, slots_sh),
                          out_shardings=(cache_sh, emitted_sh), donate_argnums=1),
      decode_rows={b: programs.jit(with_rules(functools.partial(rows, bound=b), mesh, rules),
                                   in_shardings=(param_shardings, cache_sh, slots_sh,
                                                 batch_sharding(mesh, rules, 1)),
                                   out_shardings=(cache_sh, emitted_sh), donate_argnums=1)
                   for b in bounds},
      prefill=programs.jit(with_rules(prefill, mesh, rules),
                           in_shardings=(param_shardings, cache_sh, rep, rep, rep),
                           out_shardings=cache_sh, donate_argnums=1),
      widths=row_ladder(shape.slots, batch_multiple(mesh, rules)), bounds=bounds)


def row_ladder(slots: int, multiple: int) -> tuple[int, ...]:
  """Decode widths: ``slots`` halved while the half is a multiple of ``multiple``
  (the batch shards) and at least 1/8 of the slots, so at most four programs."""
  ladder = [slots]
  while len(ladder) < 4 and ladder[-1] % 2 == 0 and (ladder[-1] // 2) % multiple == 0:
    ladder.append(ladder[-1] // 2)
  return tuple(ladder)


def bound_ladder(cache_len: int, chunk_steps: int) -> tuple[int, ...]:
  """Positions a decode chunk reads: the whole row, then halves (rounded up to
  a multiple of 8) while above 2 chunks, at most four."""
  ladder = [cache_len]
  while len(ladder) < 4:
    half = -(-ladder[-1] // 16) * 8
    if half >= ladder[-1] or half <= 2 * chunk_steps:
      break
    ladder.append(half)
  return tuple(ladder)
