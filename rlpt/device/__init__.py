"""The device layer: where computation runs, between the pure functions below
(models, attention, rl, steps, sampling kernels) and the orchestration above
(actor, rollout, evaluation, trainer).

- ``process``: this process's XLA backend (CPU devices and threads, compilation
  cache, the primary process).
- ``telemetry``: the busy clock, resident memory, a run's compiles and programs.
- ``batch``: a batch's layout on the mesh and the row counts it allows.
- ``transfer``: host <-> device under single-controller semantics.
- ``placement``: parameters and train states placed under the sharding rules.
- ``programs``: jitted steps and samplers with explicit shardings, in a bounded
  pool of compiled programs.
- ``context``: `RunContext`, where a run runs (mesh, layouts, programs, clock,
  seed, tokenizer), built once and handed to each component.
- ``memory``: per-device byte plans (``launch.plan``), imported on its own.
"""

from rlpt.device.batch import (
    batch_multiple,
    batch_sharding,
    check_batch,
    replicated,
    row_bucket,
)
from rlpt.device.placement import (
    opt_state_shardings,
    place_params,
    place_train_state,
    train_state_shardings,
)
from rlpt.device.process import (
    is_primary,
    set_cpu_devices,
    set_cpu_threads,
    use_compilation_cache,
)
from rlpt.device.programs import (
    MAX_PROGRAMS,
    PooledJit,
    ProgramPool,
    jit_sampler,
    jit_spec_sampler,
    jit_step,
    with_rules,
)
from rlpt.device.telemetry import (
    BusyClock,
    cpu_only_host,
    host_metrics,
    resident_mib,
)
from rlpt.device.context import RunContext, SampledModel
from rlpt.device.transfer import host_to_global, make_reshard, to_device, to_host

__all__ = [
    "batch_multiple",
    "batch_sharding",
    "BusyClock",
    "check_batch",
    "cpu_only_host",
    "host_metrics",
    "host_to_global",
    "is_primary",
    "jit_sampler",
    "jit_spec_sampler",
    "jit_step",
    "make_reshard",
    "MAX_PROGRAMS",
    "opt_state_shardings",
    "place_params",
    "place_train_state",
    "PooledJit",
    "ProgramPool",
    "RunContext",
    "SampledModel",
    "replicated",
    "resident_mib",
    "row_bucket",
    "set_cpu_devices",
    "set_cpu_threads",
    "to_device",
    "to_host",
    "train_state_shardings",
    "use_compilation_cache",
    "with_rules",
]
