"""Glue shared by the pre-training and RL loops: placement, layouts and jitting.

Single-controller semantics across processes: every process runs the same
program on the same host values (same seeds, same rollouts), so host data
becomes a global array with ``host_to_global`` (each process fills only its
own shards from its identical copy), and results come back with ``to_host``
(an all-gather when the array spans other processes' devices). With one
process both reduce to device_put / device_get.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlpt.sharding import Rules, logical_to_spec, state_shardings, use_rules
from rlpt.steps import TrainState, init_train_state


def set_cpu_devices(n: int) -> None:
  """Gives this process's CPU platform ``n`` XLA devices that each run their
  operations on one thread (data parallel over the cores, as over the chips of
  a mesh) instead of one device that splits every operation across the cores.
  On small CPU hosts this is the faster layout for small models (see
  benchmarks/workload.py); accelerators are unaffected. Call it before JAX
  starts; 1 leaves everything as it is.
  """
  if n < 1:
    raise ValueError(f"CPU devices must be >= 1, got {n}.")
  if n == 1:
    return
  from jax._src import xla_bridge
  if xla_bridge.backends_are_initialized():
    raise RuntimeError(f"{n} CPU devices must be set before JAX starts; it has already "
                       f"started with {jax.device_count()} device(s).")
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" in flags:
    raise ValueError(f"XLA_FLAGS already sets the CPU device count ('{flags}'); set {n} CPU "
                     "devices there or here, not both.")
  os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count={n} "
                             "--xla_cpu_multi_thread_eigen=false").strip()


def set_cpu_threads(n: int) -> None:
  """Sizes XLA:CPU's intra-op thread pool to ``n`` threads (``PJRT_NPROC``)
  whatever the host's core count; 0 leaves XLA's default, one per available
  core. Call it before JAX starts.

  XLA:CPU splits a reduction (a sum over the batch, a loss mean, a bias
  gradient) into one partial sum per thread, so the thread count is part of
  the arithmetic: the same program on 1 and on 2 cores differs in the last
  bits, and 600 steps of pre-training turn those bits into another base. With
  the count fixed, a run is bit-identical on hosts with more or fewer cores
  (tests/launch/test_cpu_threads.py; the README says on which machines).
  """
  if n < 0:
    raise ValueError(f"CPU threads must be >= 0 (0: one per core), got {n}.")
  if n == 0:
    return
  current = os.environ.get("PJRT_NPROC")
  if current not in (None, str(n)):
    raise ValueError(f"PJRT_NPROC is already set to {current!r}; set {n} threads there or "
                     "here, not both.")
  from jax._src import xla_bridge
  if xla_bridge.backends_are_initialized():
    raise RuntimeError(f"{n} CPU threads must be set before JAX starts; it has already started.")
  os.environ["PJRT_NPROC"] = str(n)


def use_compilation_cache(path: str, min_compile_secs: float = 0.1) -> None:
  """Keeps XLA's compiled programs on disk under ``path`` (JAX's persistent
  compilation cache), so a later run, or a later shape seen again, loads a
  program instead of compiling it: the same executable, so the same bits.
  Programs that compile in under ``min_compile_secs`` are not kept. ``path``
  empty: off. Concurrent processes may share it (entries are written
  atomically; the key covers the JAX version, the backend, the devices and
  XLA's flags). Keep one per machine: XLA:CPU compiles for the host's own
  instruction set."""
  if not path:
    return
  os.makedirs(path, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", os.path.abspath(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_secs))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


class _Compiles:
  """XLA backend compiles of this process: count and seconds (a jax.monitoring
  listener, registered once by ``count_compiles``)."""

  count = 0
  seconds = 0.0
  listening = False

  @classmethod
  def on_event(cls, event: str, duration: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
      cls.count += 1
      cls.seconds += duration


def count_compiles() -> None:
  """Starts counting this process's XLA compiles (idempotent); see ``host_metrics``."""
  if not _Compiles.listening:
    jax.monitoring.register_event_duration_secs_listener(_Compiles.on_event)
    _Compiles.listening = True


def resident_mib() -> float:
  """This process's resident memory in MiB (/proc/self/status VmRSS; where there
  is no /proc, the peak so far from getrusage)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  import resource  # POSIX only, hence here
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
  return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def host_metrics() -> dict[str, float]:
  """The host's figures a long run watches: resident memory, the XLA compiles
  so far (a count still rising late in a run means new shapes), the compiled
  programs kept (``PROGRAMS``) and how many it has dropped."""
  return {"host/rss_mib": resident_mib(), "host/compiles": float(_Compiles.count),
          "host/compile_s": _Compiles.seconds, "host/programs": float(len(PROGRAMS)),
          "host/program_evictions": float(PROGRAMS.evictions)}


def cpu_only_host() -> bool:
  """Whether JAX will run on the CPU here: JAX_PLATFORMS says only ``cpu``, or
  no accelerator plugin (CUDA / ROCm entry points, libtpu) is installed."""
  import importlib.metadata
  import importlib.util
  platforms = {p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()}
  if platforms:
    return platforms == {"cpu"}
  return (not list(importlib.metadata.entry_points(group="jax_plugins"))
          and importlib.util.find_spec("libtpu") is None)


def batch_sharding(mesh: Mesh, rules: Rules, ndim: int) -> NamedSharding:
  """Shards the leading (batch) dimension by the ``batch`` rule; the rest replicated."""
  return NamedSharding(mesh, logical_to_spec(("batch",) + (None,) * (ndim - 1), rules))


def batch_multiple(mesh: Mesh, rules: Rules) -> int:
  """Number of shards of the batch dimension: batches must be a multiple of it."""
  spec = logical_to_spec(("batch",), rules)[0]
  names = () if spec is None else ((spec,) if isinstance(spec, str) else spec)
  return int(np.prod([mesh.shape[n] for n in names])) if names else 1


def check_batch(size: int, mesh: Mesh, rules: Rules, what: str) -> None:
  """Raises a ValueError naming the numbers when ``size`` rows cannot split evenly."""
  multiple = batch_multiple(mesh, rules)
  if size % multiple:
    raise ValueError(f"{what}={size} must be a multiple of the {multiple} batch shards of mesh "
                     f"{dict(mesh.shape)} (the 'batch' rule shards over "
                     f"{logical_to_spec(('batch',), rules)[0]}).")


def row_bucket(n: int, full: int, multiple: int, smallest: int = 1) -> int:
  """Rows to compile for ``n`` of at most ``full``: ``full`` halved while that
  still holds ``n`` rows, splits into ``multiple`` equal shards and is at least
  ``smallest`` (so a run compiles a handful of sizes, not one per count)."""
  size = full
  while (size % 2 == 0 and size // 2 >= max(n, smallest)
         and (size // 2) % multiple == 0):
    size //= 2
  return size


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


# ----------------------------------------------------------------------------
# Host <-> global arrays.


def host_to_global(tree: Any, shardings: Any) -> Any:
  """Global arrays from host values that every process holds identically.

  ``shardings`` is one Sharding for every leaf or a matching tree. Each
  process copies in only the shards of its own devices, so nothing crosses
  hosts; with one process it is a device_put.
  """
  if isinstance(shardings, jax.sharding.Sharding):
    shardings = jax.tree.map(lambda _: shardings, tree)

  def one(x, sh):
    if isinstance(x, jax.Array) and (jax.process_count() == 1 or not x.is_fully_addressable):
      # Already on devices (e.g. a checkpoint read shard by shard onto the
      # mesh): lay it out with a device-side copy, never through one host. A
      # copy, so callers that donate the result do not invalidate ``x``.
      return jax.device_put(x, sh, may_alias=False)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sh, lambda idx: x[idx])

  return jax.tree.map(one, tree, shardings)


def to_host(tree: Any) -> Any:
  """numpy copies of (possibly sharded, possibly multi-process) arrays, on every
  process: the arrays other processes hold parts of are gathered, the rest come
  over in one `jax.device_get` (all transfers started before any is waited on)."""
  leaves, treedef = jax.tree.flatten(tree)
  leaves = [np.asarray(multihost_utils.process_allgather(x, tiled=True))
            if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated
            else x for x in leaves]
  return jax.tree.unflatten(treedef, [np.asarray(x) for x in jax.device_get(leaves)])


def is_primary() -> bool:
  """Only process 0 writes logs, plots and checkpoints."""
  return jax.process_index() == 0


# ----------------------------------------------------------------------------
# Parameters, optimizer state and the two layouts.


def opt_state_shardings(optimizer: optax.GradientTransformation, params: Any,
                        param_shardings: Any, mesh: Mesh) -> Any:
  """Optimizer-state shardings: every params-shaped subtree (Adam moments) is
  sharded exactly like the parameters; everything else (counters) replicated.

  ``params`` may be abstract (ShapeDtypeStructs); nothing is allocated.
  """
  abstract = jax.eval_shape(optimizer.init, params)
  return optax.tree_map_params(optimizer, lambda _, sh: sh, abstract, param_shardings,
                               transform_non_params=lambda _: replicated(mesh))


def train_state_shardings(optimizer: optax.GradientTransformation, params: Any, mesh: Mesh,
                          rules: Rules) -> TrainState:
  param_sh = state_shardings(params, mesh, rules)
  return TrainState(replicated(mesh), param_sh,
                    opt_state_shardings(optimizer, params, param_sh, mesh))


def place_params(params: nnx.State, mesh: Mesh, rules: Rules,
                 memory_kind: str | None = None) -> nnx.State:
  """Lays host (or single-device) params out on the mesh by the rules.

  ``memory_kind="pinned_host"`` keeps them in host memory (see ``to_device``).
  """
  sh = state_shardings(params, mesh, rules)
  if memory_kind is not None:
    sh = jax.tree.map(lambda s: s.with_memory_kind(memory_kind), sh)
  return host_to_global(params, sh)


def to_device(params: Any, shardings: Any) -> Any:
  """Brings host-memory params in for one pass (the copy is freed after it)."""
  return jax.device_put(params, shardings)


def place_train_state(params: nnx.State, optimizer: optax.GradientTransformation, mesh: Mesh,
                      rules: Rules) -> tuple[TrainState, TrainState]:
  """Puts params on the mesh by the rules and builds the optimizer state there,
  sharded like the params. Returns (state, its shardings)."""
  shardings = train_state_shardings(optimizer, params, mesh, rules)
  params = host_to_global(params, shardings.params)
  init = jax.jit(functools.partial(init_train_state, optimizer=optimizer),
                 in_shardings=(shardings.params,), out_shardings=shardings)
  return init(params), shardings


def make_reshard(src_shardings: Any, dst_shardings: Any, copy: bool = False) -> Callable:
  """A jitted identity moving a tree from one layout to another (train -> sample).

  Not donated: the training copy stays alive for the next update. Where the
  layouts agree JAX forwards the input buffers unchanged; ``copy=True``
  returns fresh buffers, which outlive a later donation of the input.
  """
  fn = (lambda x: jax.tree.map(jnp.copy, x)) if copy else (lambda x: x)
  return jax.jit(fn, in_shardings=(src_shardings,), out_shardings=dst_shardings)


# ----------------------------------------------------------------------------
# Jitted steps with explicit shardings.


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


# ----------------------------------------------------------------------------
# Compiled programs, bounded.

MAX_PROGRAMS = 32  # default bound of `PROGRAMS` (launch flag --max_programs)


class ProgramPool:
  """At most ``capacity`` compiled programs of ``pooled_jit`` functions kept
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
  that JAX compiles outside ``pooled_jit`` (eager operations, one-off
  initialisers) are few, small and not counted. Thread-safe: an
  asynchronous producer samples while the update runs.

  The default, 32, holds every program of the main job (26 in its 200
  steps); the all-domains job meets 52 in 529 steps and, bounded, drops
  about one every 13 steps (docs/curriculum.md, "Long runs"). Calling
  through the pool costs a pytree flatten (0.13 ms for a 118-leaf train
  state on this CPU).
  """

  def __init__(self, capacity: int = MAX_PROGRAMS):
    self._lru: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()
    self._dead: list = []  # refs of collected functions, purged under the lock
    self.capacity = 0
    self.evictions = 0
    self.resize(capacity)

  def resize(self, capacity: int) -> None:
    """Sets the bound (0: none), dropping the least recently used programs past it."""
    if not isinstance(capacity, int) or capacity < 0:
      raise ValueError(f"the compiled-program bound must be an int >= 0 (0: no bound), got "
                       f"{capacity!r}.")
    with self._lock:
      self.capacity = capacity
      self._evict()

  def __len__(self) -> int:
    """Programs kept now (those of collected functions are gone already)."""
    with self._lock:
      self._purge()
      return len(self._lru)

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
    return self.pool._program(self, _signature(args))(*args)

  def lower(self, *args):
    """``jax.jit(...).lower`` at these arguments (arrays or ShapeDtypeStructs)."""
    return self.pool._program(self, _signature(args)).lower(*args)


def _signature(args) -> tuple:
  """What makes jit compile another program: the pytree structure and each
  leaf's shape, dtype and weak type (a Python scalar: its type)."""
  leaves, treedef = jax.tree.flatten(args)
  return treedef, tuple(
      (x.shape, x.dtype, getattr(x, "weak_type", False)) if hasattr(x, "shape") else type(x)
      for x in leaves)


PROGRAMS = ProgramPool()


def pooled_jit(fn: Callable, **jit_kwargs) -> PooledJit:
  """``jax.jit(fn, **jit_kwargs)`` with its compiled programs in ``PROGRAMS``."""
  return PROGRAMS.jit(fn, **jit_kwargs)


def jit_step(fn: Callable, state_shardings, batch_shardings, mesh: Mesh,
             rules: Rules | None = None, **static) -> Callable:
  """jit(fn(state, *batch) -> (state, metrics)) with explicit shardings, state donated.

  ``rules`` constrains the activations traced inside ``fn`` (see with_rules).
  Its compiled programs (one per batch shape) are bounded by ``PROGRAMS``.
  """
  return pooled_jit(
      with_rules(functools.partial(fn, **static), mesh, rules),
      in_shardings=(state_shardings, *batch_shardings),
      out_shardings=(state_shardings, replicated(mesh)),
      donate_argnums=0,
  )


def jit_sampler(sampler, sampling, param_shardings, mesh: Mesh, rules: Rules) -> Callable:
  """``generate(params, prompts_BxP, lengths_B, key_data) -> SampleOutput`` as one jitted
  program with explicit shardings: params in the sampling layout, prompts and
  outputs sharded on the batch rule. The KV cache is allocated, updated in place
  and freed inside the one program, so there is no buffer to donate across calls
  (donating the int32 prompts would only warn: no output has their shape).
  One program per prompt shape, bounded by ``PROGRAMS``.
  """
  from rlpt.sampling.sampler import SampleOutput
  bs1, bs2 = batch_sharding(mesh, rules, 1), batch_sharding(mesh, rules, 2)
  def generate(params, prompts_BxP, lengths_B, rng_data):
    # The key travels as raw uint32 data so host_to_global can place it.
    return sampler.generate(params, prompts_BxP, lengths_B, jax.random.wrap_key_data(rng_data),
                            sampling)

  return pooled_jit(
      with_rules(generate, mesh, rules),
      in_shardings=(param_shardings, bs2, bs1, replicated(mesh)),
      out_shardings=SampleOutput(bs2, bs2, bs1),
  )


def jit_spec_sampler(sampler, sampling, param_shardings, draft_shardings, mesh: Mesh,
                     rules: Rules) -> Callable:
  """``generate(params, draft_params, prompts_BxP, lengths_B, key_data) ->
  (SampleOutput, SpecStats)`` for a ``SpeculativeSampler``, jitted like ``jit_sampler``."""
  from rlpt.sampling.sampler import SampleOutput
  from rlpt.sampling.speculative import SpecStats
  bs1, bs2, rep = batch_sharding(mesh, rules, 1), batch_sharding(mesh, rules, 2), replicated(mesh)

  def generate(params, draft_params, prompts_BxP, lengths_B, rng_data):
    return sampler.generate(params, draft_params, prompts_BxP, lengths_B,
                            jax.random.wrap_key_data(rng_data), sampling)

  return pooled_jit(
      with_rules(generate, mesh, rules),
      in_shardings=(param_shardings, draft_shardings, bs2, bs1, rep),
      out_shardings=(SampleOutput(bs2, bs2, bs1), SpecStats(rep, rep, rep)),
  )
