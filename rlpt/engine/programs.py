"""The engine's compiled programs, with explicit shardings on the sample mesh.

The slot axis of the KV store and of the slots' state is the ``batch`` rule's
(sharded over the data axis); a prefill call's A rows are replicated (they
gather their slots' cache rows). An engine compiles its store's initialiser,
a prefill and a row-copy program per position bound (at most four each) and, per sampling mode it
decodes with, at most 16 decode programs (four widths, ``row_ladder``, by four position bounds,
``bound_ladder``), whatever the workload.
"""

from __future__ import annotations

import functools

from flax import nnx
from jax.sharding import Mesh

from rlpt.config.engine import EngineConfig
from rlpt.config.model import ModelConfig
from rlpt.device import ProgramPool, batch_multiple, batch_sharding, host_to_global, replicated
from rlpt.device.programs import with_rules
from rlpt.models import KVCache
from rlpt.sampling.fast import FlatLayout, check_model_cfg
from rlpt.sampling.logits import SamplingParams
from rlpt.sampling.quant import Int8KVCache
from rlpt.sampling.slots import (Emitted, Slots, copy_rows, decode_rows, decode_steps,
                                 prefill_rows)
from rlpt.sharding import K_CACHE_AXES, KV_CACHE_AXES, Rules, named_sharding


def cache_shardings(model_cfg: ModelConfig, cfg: EngineConfig, mesh: Mesh, rules: Rules):
  """Shardings of the KV store: slots on the ``batch`` rule, kv heads on theirs."""
  n, s, k, h, length = (model_cfg.num_layers, cfg.slots, model_cfg.num_kv_heads,
                        model_cfg.head_dim, cfg.cache_len)
  k_sh = named_sharding(K_CACHE_AXES, mesh, rules, (s, k, h, length), "engine keys")
  v_sh = named_sharding(KV_CACHE_AXES, mesh, rules, (s, k, length, h), "engine values")
  if not cfg.kv_int8:
    return KVCache((k_sh,) * n, (v_sh,) * n)
  sc = named_sharding(("batch", "kv_heads", "seq"), mesh, rules, (s, k, length), "engine kv scales")
  return Int8KVCache((k_sh,) * n, (v_sh,) * n, (sc,) * n, (sc,) * n)


def row_ladder(slots: int, multiple: int) -> tuple[int, ...]:
  """Decode widths: ``slots`` halved while the half is a multiple of ``multiple``
  (the batch shards), at most four widths."""
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


class EnginePrograms:
  """``init()`` -> an empty KV store; ``prefill[bound](params, cache, slot_A,
  tokens_AxC, start_A)`` -> cache, over the rows' first ``bound`` positions;
  ``copy[bound](cache, src_A, dst_A)`` -> cache, rows copied; ``decoders(sampling)`` -> (``decode(params,
  cache, slots)`` over every slot and position, ``{bound: decode_rows(params,
  cache, slots_W, slot_W)}`` over W slots' first ``bound`` positions), each ->
  (cache, Emitted). The cache is donated."""

  def __init__(self, programs: ProgramPool, graphdef: nnx.GraphDef, model_cfg: ModelConfig,
               cfg: EngineConfig, param_shardings, place: tuple[Mesh, Rules]):
    check_model_cfg(model_cfg)
    if cfg.max_len < 1:
      raise ValueError("engine.max_len is 0: a run fills it in from the rollout; "
                       "an engine built directly needs max_len >= 1.")
    mesh, rules = place
    self.programs, self.graphdef, self.cfg, self.place = programs, graphdef, cfg, place
    self.layout = FlatLayout(cfg.kv_int8)
    self.param_sh = param_shardings
    self.cache_sh = cache_shardings(model_cfg, cfg, mesh, rules)
    self.widths = row_ladder(cfg.slots, batch_multiple(mesh, rules))
    self.bounds = bound_ladder(cfg.cache_len, cfg.chunk_steps)
    # A fixed set of programs: the initialiser, a prefill and a copy per bound
    # here, the decoders per sampling mode when built (``decoders``).
    programs.reserve(1 + 2 * len(self.bounds))
    self.init = programs.jit(lambda: self.layout.init(model_cfg, cfg.slots, cfg.cache_len),
                             out_shardings=self.cache_sh)
    rep = self.rep = replicated(mesh)
    b1 = batch_sharding(mesh, rules, 1)
    self.slots_sh = Slots(b1, b1, b1, batch_sharding(mesh, rules, 2), b1, b1)
    self.rows_sh = b1
    self.prefill = {
        b: programs.jit(
            with_rules(functools.partial(prefill_rows, graphdef, self.layout, bound=b), mesh, rules),
            in_shardings=(param_shardings, self.cache_sh, rep, rep, rep),
            out_shardings=self.cache_sh, donate_argnums=1)
        for b in self.bounds}
    self.copy = {b: programs.jit(functools.partial(copy_rows, bound=b),
                                 in_shardings=(self.cache_sh, rep, rep),
                                 out_shardings=self.cache_sh, donate_argnums=0)
                 for b in self.bounds}
    self._decoders: dict = {}

  def slots_in(self, slots: Slots) -> Slots:
    """Host slot state as global arrays (each process holds it identically)."""
    return host_to_global(slots, self.slots_sh)

  def rows_in(self, index):
    return host_to_global(index, self.rows_sh)

  def replicated_in(self, *arrays):
    return tuple(host_to_global(a, self.rep) for a in arrays)

  def decoders(self, sampling: SamplingParams, stop_ids: tuple[int, ...], pad_id: int):
    key = (sampling, stop_ids, pad_id)
    if key not in self._decoders:
      self.programs.reserve(1 + len(self.widths) * len(self.bounds))
      self._decoders[key] = self._build_decoders(sampling, stop_ids, pad_id)
    return self._decoders[key]

  def _build_decoders(self, sampling, stop_ids, pad_id):
    mesh, rules = self.place
    b1, b2, slots_sh = self.rows_sh, batch_sharding(mesh, rules, 2), self.slots_sh
    out_sh = (self.cache_sh, Emitted(b2, b2, slots_sh))
    static = dict(sampling=sampling, steps=self.cfg.chunk_steps, stop_ids=stop_ids, pad_id=pad_id)
    jit = lambda fn, ins: self.programs.jit(with_rules(fn, mesh, rules), in_shardings=ins,
                                            out_shardings=out_sh, donate_argnums=1)
    full = jit(functools.partial(decode_steps, self.graphdef, self.layout, **static),
               (self.param_sh, self.cache_sh, slots_sh))
    rows = {b: jit(functools.partial(decode_rows, self.graphdef, self.layout, bound=b, **static),
                   (self.param_sh, self.cache_sh, slots_sh, b1))
            for b in self.bounds}
    return full, rows
