"""Compiled programs: jitted steps and samplers with explicit shardings, traced
under the rules, kept in a bounded pool of compiled programs that a run owns
(``RunContext.programs``): two runs in one process share neither programs nor
counts."""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import weakref
from collections.abc import Callable

import jax
from jax.sharding import Mesh

from rlpt.device.batch import batch_sharding, replicated
from rlpt.sampling.sampler import SampleOutput
from rlpt.sampling.speculative import SpecStats
from rlpt.sharding import Rules, use_rules


def with_rules(fn: Callable, mesh: Mesh, rules: Rules | None) -> Callable:
  """``fn`` traced under ``use_rules(mesh, rules)``, so the model's ``constrain``
  calls pin activations to the rules' layout (without rules they are no-ops)."""
  if rules is None:
    return fn

  @functools.wraps(fn)
  def wrapped(*args, **kwargs):
    # The abstract mesh lets mesh-aware kernels (ring attention, sharded
    # decode) find the `sequence` axis while tracing.
    with use_rules(mesh, rules), jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)

  return wrapped


MAX_PROGRAMS = 32  # default bound of a run's `ProgramPool` (launch flag --max_programs)

# The pools whose work this thread is doing now, innermost last: an XLA
# compile is counted by the innermost (jax.monitoring calls its listeners in
# the compiling thread).
_RUNNING = threading.local()


def _on_event(event: str, duration: float, **_) -> None:
  if event == "/jax/core/compile/backend_compile_duration":
    pools = getattr(_RUNNING, "pools", None)
    if pools:
      pools[-1]._compiled(duration)


jax.monitoring.register_event_duration_secs_listener(_on_event)


class ProgramPool:
  """At most ``capacity`` compiled programs of this pool's ``jit`` functions kept
  in memory, the least recently used dropped first (``capacity`` 0: no bound).

  XLA keeps each compiled program resident (on XLA:CPU a median 33 MiB for
  the tiny model's sampler: benchmarks/program_memory.py), and a run over
  many domains keeps meeting new shapes (prompt widths, row buckets, packed
  row counts), so an unbounded cache grows for as long as the run meets
  them. Each pooled function holds one ``jax.jit`` per argument signature;
  dropping it releases its executable and traces (JAX's own caches hold them
  only while that function lives). Meeting the signature again traces it
  anew and loads the executable from the persistent compilation cache
  (``use_compilation_cache``; about half a second for the tiny model's
  sampler) or compiles it: the same program, so the same bits. Programs
  that JAX compiles outside the pool (eager operations, one-off
  initialisers) are few, small and not bounded here. Thread-safe: an
  asynchronous producer samples while the update runs.

  The default, 32, holds every program of the main job (26 in its 200
  steps); the all-domains job meets 52 in 529 steps and, bounded, drops
  about one every 13 steps (docs/curriculum.md, "Long runs"). Calling
  through the pool costs a pytree flatten (0.13 ms for a 118-leaf train
  state on this CPU).

  ``compiles`` / ``compile_s``: the XLA compiles made while this pool's
  programs run or inside ``counting()`` (a cached program loaded from the
  persistent cache is no compile); another pool's work is not counted here.
  """

  def __init__(self, capacity: int = MAX_PROGRAMS):
    self._lru: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()
    self._dead: list = []  # refs of collected functions, purged under the lock
    self.capacity = 0
    self.evictions = 0
    self.compiles, self.compile_s = 0, 0.0
    self.resize(capacity)

  def resize(self, capacity: int) -> None:
    """Sets the bound (0: none), dropping the least recently used programs past it."""
    if not isinstance(capacity, int) or capacity < 0:
      raise ValueError(f"the compiled-program bound must be an int >= 0 (0: no bound), got "
                       f"{capacity!r}.")
    with self._lock:
      self.capacity = capacity
      self._evict()

  def reserve(self, count: int) -> None:
    """Room for ``count`` more programs (an unbounded pool stays unbounded): a
    component whose programs are a fixed set, known when it is built (the
    engine's), adds them to the bound instead of competing for it with the
    run's shape-driven programs and evicting them, or being evicted, every step."""
    if not isinstance(count, int) or count < 0:
      raise ValueError(f"a reservation must be an int >= 0, got {count!r}.")
    with self._lock:
      if self.capacity:
        self.capacity += count

  def __len__(self) -> int:
    """Programs kept now (those of collected functions are gone already)."""
    with self._lock:
      self._purge()
      return len(self._lru)

  @contextlib.contextmanager
  def counting(self):
    """XLA compiles in this thread within the block count as this pool's
    (its programs' own calls do so already; wrap eager work of the run)."""
    pools = _RUNNING.__dict__.setdefault("pools", [])
    pools.append(self)
    try:
      yield
    finally:
      pools.pop()

  def _compiled(self, seconds: float) -> None:
    with self._lock:
      self.compiles += 1
      self.compile_s += seconds

  def jit(self, fn: Callable, **jit_kwargs) -> "PooledJit":
    """``jax.jit(fn, **jit_kwargs)`` whose compiled programs this pool bounds."""
    return PooledJit(self, fn, jit_kwargs)

  def _program(self, owner: "PooledJit", signature) -> Callable:
    key = (owner.ref, signature)
    with self._lock:
      fn = owner.programs.get(signature)
      if fn is not None:
        self._lru.move_to_end(key)
        return fn
      # A fresh function per signature, so JAX's caches keyed by it die with it.
      inner = owner.fn
      fn = owner.programs[signature] = jax.jit(functools.wraps(inner)(lambda *a: inner(*a)),
                                               **owner.jit_kwargs)
      self._lru[key] = None
      self._evict()
      return fn

  def _evict(self) -> None:
    self._purge()  # collected functions' places are free, not evictions
    while self.capacity and len(self._lru) > self.capacity:
      (ref, signature), _ = self._lru.popitem(last=False)
      owner = ref()
      if owner is not None:
        owner.programs.pop(signature, None)
      self.evictions += 1

  def _forget(self, ref) -> None:
    """``ref``'s function was collected (a weakref callback, which may run
    inside any allocation, so it only records it)."""
    self._dead.append(ref)

  def _purge(self) -> None:
    while self._dead:
      ref = self._dead.pop()
      for key in [k for k in self._lru if k[0] is ref]:
        del self._lru[key]


class PooledJit:
  """A jitted function whose compiled programs a ``ProgramPool`` bounds (see
  there); called like ``jax.jit(fn, **jit_kwargs)``, positional arguments only."""

  def __init__(self, pool: ProgramPool, fn: Callable, jit_kwargs: dict):
    self.pool, self.fn, self.jit_kwargs = pool, fn, jit_kwargs
    self.programs: dict = {}
    self.ref = weakref.ref(self, pool._forget)

  def __call__(self, *args):
    with self.pool.counting():
      return self.pool._program(self, _signature(args))(*args)

  def lower(self, *args):
    """``jax.jit(...).lower`` at these arguments (arrays or ShapeDtypeStructs)."""
    with self.pool.counting():
      return self.pool._program(self, _signature(args)).lower(*args)


def _signature(args) -> tuple:
  """What makes jit compile another program: the pytree structure and each
  leaf's shape, dtype and weak type (a Python scalar: its type)."""
  leaves, treedef = jax.tree.flatten(args)
  return treedef, tuple(
      (x.shape, x.dtype, getattr(x, "weak_type", False)) if hasattr(x, "shape") else type(x)
      for x in leaves)


def jit_step(programs: ProgramPool, fn: Callable, state_shardings, batch_shardings, mesh: Mesh,
             rules: Rules | None = None, **static) -> Callable:
  """jit(fn(state, *batch) -> (state, metrics)) with explicit shardings, state donated.

  ``rules`` constrains the activations traced inside ``fn`` (see with_rules).
  Its compiled programs (one per batch shape) are kept in ``programs``.
  """
  return programs.jit(
      with_rules(functools.partial(fn, **static), mesh, rules),
      in_shardings=(state_shardings, *batch_shardings),
      out_shardings=(state_shardings, replicated(mesh)),
      donate_argnums=0,
  )


def jit_sampler(programs: ProgramPool, sampler, sampling, param_shardings, mesh: Mesh,
                rules: Rules) -> Callable:
  """``generate(params, prompts_BxP, lengths_B, key_data) -> SampleOutput`` as one jitted
  program with explicit shardings: params in the sampling layout, prompts and
  outputs sharded on the batch rule. The KV cache is allocated, updated in place
  and freed inside the one program, so there is no buffer to donate across calls
  (donating the int32 prompts would only warn: no output has their shape).
  One program per prompt shape, kept in ``programs``.
  """
  bs1, bs2 = batch_sharding(mesh, rules, 1), batch_sharding(mesh, rules, 2)
  def generate(params, prompts_BxP, lengths_B, rng_data):
    # The key travels as raw uint32 data so host_to_global can place it.
    return sampler.generate(params, prompts_BxP, lengths_B, jax.random.wrap_key_data(rng_data),
                            sampling)

  return programs.jit(
      with_rules(generate, mesh, rules),
      in_shardings=(param_shardings, bs2, bs1, replicated(mesh)),
      out_shardings=SampleOutput(bs2, bs2, bs1),
  )


def jit_spec_sampler(programs: ProgramPool, sampler, sampling, param_shardings, draft_shardings,
                     mesh: Mesh, rules: Rules) -> Callable:
  """``generate(params, draft_params, prompts_BxP, lengths_B, key_data) ->
  (SampleOutput, SpecStats)`` for a ``SpeculativeSampler``, jitted like ``jit_sampler``."""
  bs1, bs2, rep = batch_sharding(mesh, rules, 1), batch_sharding(mesh, rules, 2), replicated(mesh)

  def generate(params, draft_params, prompts_BxP, lengths_B, rng_data):
    return sampler.generate(params, draft_params, prompts_BxP, lengths_B,
                            jax.random.wrap_key_data(rng_data), sampling)

  return programs.jit(
      with_rules(generate, mesh, rules),
      in_shardings=(param_shardings, draft_shardings, bs2, bs1, rep),
      out_shardings=(SampleOutput(bs2, bs2, bs1), SpecStats(rep, rep, rep)),
  )
