"""The engine's compiled programs, with explicit shardings on the sample mesh.

The slot axis of the KV store and of the slots' state is the ``batch`` rule's
(sharded over the data axis); a prefill call's A rows are replicated (they
gather their slots' cache rows). An engine compiles its store's initialiser,
a packed prefill of fresh chunks, a prefill and a row-copy program per
position bound (at most four each), a prompt prefill with shared prompts,
and, per sampling mode it decodes with, at most 16 decode programs (four
widths, ``row_ladder``, by four position bounds, ``bound_ladder``),
whatever the workload.
"""

from __future__ import annotations

import functools

import numpy as np

from flax import nnx
from jax.sharding import Mesh

from rlpt.config.engine import EngineConfig
from rlpt.config.model import ModelConfig
from rlpt.device import ProgramPool, batch_multiple, batch_sharding, host_to_global, replicated
from rlpt.device.programs import with_rules
from rlpt.models import KVCache
from rlpt.sampling.fast import FlatLayout, check_model_cfg
from rlpt.sampling.logits import SamplingParams
from rlpt.sampling.prefix import StoredPrefixLayout
from rlpt.sampling.quant import Int8KVCache
from rlpt.sampling.slots import (Emitted, SharedStore, Slots, copy_rows, decode_rows,
                                 decode_steps, prefill_fresh, prefill_prompts, prefill_rows)
from rlpt.sharding import K_CACHE_AXES, KV_CACHE_AXES, Rules, named_sharding


def cache_shardings(model_cfg: ModelConfig, cfg: EngineConfig, mesh: Mesh, rules: Rules):
  """Shardings of the KV store: slots on the ``batch`` rule, kv heads on
  theirs; shared prompt rows are replicated over the batch shards (any slot
  may read any of them)."""
  def part(rows, length, batch, what):
    n, k, h = model_cfg.num_layers, model_cfg.num_kv_heads, model_cfg.head_dim
    k_sh = named_sharding((batch,) + K_CACHE_AXES[1:], mesh, rules, (rows, k, h, length),
                          f"{what} keys")
    v_sh = named_sharding((batch,) + KV_CACHE_AXES[1:], mesh, rules, (rows, k, length, h),
                          f"{what} values")
    if not cfg.kv_int8:
      return KVCache((k_sh,) * n, (v_sh,) * n)
    sc = named_sharding((batch, "kv_heads", "seq"), mesh, rules, (rows, k, length),
                        f"{what} kv scales")
    return Int8KVCache((k_sh,) * n, (v_sh,) * n, (sc,) * n, (sc,) * n)

  rows = part(cfg.slots, cfg.cache_len, "batch", "engine")
  if not cfg.prompts:
    return rows
  return SharedStore(part(cfg.prompts, cfg.prompt_cache_len, None, "engine prompt"), rows)


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
  """``init()`` -> an empty KV store; ``prefill_packed(params, cache, row_AxC,
  tokens_AxC, position_AxC)`` -> cache (rlpt.sampling.slots.prefill_fresh);
  ``prefill[bound](params, cache, slot_A,
  tokens_AxC, start_A, prompt_row_A, prompt_len_A)`` -> cache, over the rows'
  first ``bound`` positions; with shared prompts, ``prefill_prompts(params,
  cache, row_A, tokens_AxC, start_A)`` -> cache;
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
    # What a slot's queries attend over: their row, and their prompt row when shared.
    self.slot_layout = StoredPrefixLayout() if cfg.prompts else self.layout
    self.param_sh = param_shardings
    self.cache_sh = cache_shardings(model_cfg, cfg, mesh, rules)
    self.widths = row_ladder(cfg.slots, batch_multiple(mesh, rules))
    self.bounds = bound_ladder(cfg.cache_len, cfg.chunk_steps)
    # A prefill call writes prefill_len positions: only bounds that hold them.
    self.prefill_bounds = tuple(b for b in self.bounds if b >= cfg.prefill_len)
    # The weights' bytes in cache positions of one row: a decode call's fixed cost.
    kv_bytes = 1 if cfg.kv_int8 else model_cfg.jnp_dtype.itemsize
    self.call_positions = model_cfg.num_params() * 4 / (
        model_cfg.num_layers * 2 * model_cfg.num_kv_heads * model_cfg.head_dim * kv_bytes)
    # A fixed set of programs: the initialiser, the packed prefill, a prefill
    # and a copy per bound here, the decoders per sampling mode when built.
    programs.reserve(2 + 2 * len(self.prefill_bounds) + bool(cfg.prompts))

    def init():
      rows = self.layout.init(model_cfg, cfg.slots, cfg.cache_len)
      if not cfg.prompts:
        return rows
      return SharedStore(self.layout.init(model_cfg, cfg.prompts, cfg.prompt_cache_len), rows)

    self.init = programs.jit(init, out_shardings=self.cache_sh)
    rep = self.rep = replicated(mesh)
    b1 = batch_sharding(mesh, rules, 1)
    self.slots_sh = Slots(b1, b1, b1, batch_sharding(mesh, rules, 2), b1, b1, b1, b1)
    self.rows_sh = b1
    self.prefill = {
        b: programs.jit(
            with_rules(functools.partial(prefill_rows, graphdef, self.slot_layout, bound=b), mesh,
                       rules),
            in_shardings=(param_shardings, self.cache_sh) + (rep,) * 5,
            out_shardings=self.cache_sh, donate_argnums=1)
        for b in self.prefill_bounds}
    self.prefill_prompts = None
    if cfg.prompts:
      self.prefill_prompts = programs.jit(
          with_rules(functools.partial(prefill_prompts, graphdef, self.layout), mesh, rules),
          in_shardings=(param_shardings, self.cache_sh, rep, rep, rep),
          out_shardings=self.cache_sh, donate_argnums=1)
    self.prefill_packed = programs.jit(
        with_rules(functools.partial(prefill_fresh, graphdef), mesh, rules),
        in_shardings=(param_shardings, self.cache_sh) + (rep,) * 3,
        out_shardings=self.cache_sh, donate_argnums=1)
    self.copy = {b: programs.jit(functools.partial(copy_rows, bound=b),
                                 in_shardings=(self.cache_sh, rep, rep),
                                 out_shardings=self.cache_sh, donate_argnums=0)
                 for b in self.prefill_bounds}
    self._decoders: dict = {}

  def plan(self, active: np.ndarray, last: np.ndarray) -> list[tuple[np.ndarray, int, int]]:
    """(slots, width, bound) of each decode call of a chunk over the slots
    ``active``, the last slot positions they may write ``last``: one call over
    the narrowest width and fewest positions that hold them (position
    ``bound - 1`` is a row's scratch), or two when splitting off the few rows
    that need many positions reads less. A call's cost, in cache positions
    read: its weights (``call_positions``: every call reads them once a step)
    plus width x (bound + cache_len / 2), the second term standing for a
    row's work that does not grow with its positions."""
    bounds = sorted(self.bounds)
    level = np.searchsorted(bounds, last + 2)
    width = lambda n: min(w for w in self.widths if w >= n)
    cost = lambda n, b: self.call_positions + width(n) * (b + self.cfg.cache_len / 2)
    top = int(level.max())
    plan = [(active, width(len(active)), bounds[top])]
    best = cost(len(active), bounds[top])
    for cut in range(top):
      low, high = active[level <= cut], active[level > cut]
      split = cost(len(low), bounds[cut]) + cost(len(high), bounds[top]) if len(low) else best
      if split < best:
        plan = [(low, width(len(low)), bounds[cut]), (high, width(len(high)), bounds[top])]
        best = split
    return plan

  def run_each(self, params, cache, idle: Slots, decoders):
    """Runs every program once on ``cache`` (``decoders``: one sampling mode's)
    without changing a sequence (``idle``: inactive slots; padding rows);
    returns the cache. Compilation happens here."""
    cfg, (full, by_bound) = self.cfg, decoders
    cache, _ = full(params, cache, self.slots_in(idle))
    for width in self.widths:
      for bound in self.bounds:
        if width < cfg.slots or bound < cfg.cache_len:
          index = np.full(width, cfg.slots, np.int32)
          sub = Slots(*(x[:width] for x in idle))
          cache, _ = by_bound[bound](params, cache, self.slots_in(sub), self.rows_in(index))
    rows, c = cfg.prefill_batch, cfg.prefill_len
    nowhere, zeros, no_row, tokens = self.replicated_in(
        np.full(rows, cfg.slots, np.int32), np.zeros(rows, np.int32),
        np.full(rows, cfg.prompts, np.int32), np.zeros((rows, c), np.int32))
    for bound, prefill in self.prefill.items():
      cache = prefill(params, cache, nowhere, tokens, zeros, zeros, zeros)
      cache = self.copy[bound](cache, zeros, nowhere)
    if self.prefill_prompts is not None:
      cache = self.prefill_prompts(params, cache, no_row, tokens, zeros)
    nowhere = np.full((rows, c), cfg.prompts or cfg.slots, np.int32)
    cache = self.prefill_packed(params, cache, *self.replicated_in(nowhere, *np.zeros((2, rows, c),
                                                                                      np.int32)))
    return cache

  def copy_slots(self, cache, pairs: list[tuple[int, int]], reach: int):
    """``cache`` with slot rows copied (``pairs`` of source, destination) over
    their first ``reach`` positions, ``prefill_batch`` pairs a call."""
    rows = self.cfg.prefill_batch
    bound = min(b for b in self.copy if b >= reach)
    for i in range(0, len(pairs), rows):
      src = np.full(rows, 0, np.int32)
      dst = np.full(rows, self.cfg.slots, np.int32)      # out of range: dropped
      part = np.asarray(pairs[i:i + rows], np.int32)
      src[:len(part)], dst[:len(part)] = part[:, 0], part[:, 1]
      cache = self.copy[bound](cache, *self.replicated_in(src, dst))
    return cache

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
    full = jit(functools.partial(decode_steps, self.graphdef, self.slot_layout, **static),
               (self.param_sh, self.cache_sh, slots_sh))
    rows = {b: jit(functools.partial(decode_rows, self.graphdef, self.slot_layout, bound=b,
                                     **static),
                   (self.param_sh, self.cache_sh, slots_sh, b1))
            for b in self.bounds}
    return full, rows
