"""Parameters and train states placed on the mesh under the sharding rules."""

from __future__ import annotations

import functools
from typing import Any

import jax
import optax
from flax import nnx
from jax.sharding import Mesh

from rlpt.device.batch import replicated
from rlpt.device.transfer import host_to_global
from rlpt.sharding import Rules, state_shardings
from rlpt.steps import TrainState, init_train_state


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


def place_train_state(params: nnx.State, optimizer: optax.GradientTransformation, mesh: Mesh,
                      rules: Rules) -> tuple[TrainState, TrainState]:
  """Puts params on the mesh by the rules and builds the optimizer state there,
  sharded like the params. Returns (state, its shardings)."""
  shardings = train_state_shardings(optimizer, params, mesh, rules)
  params = host_to_global(params, shardings.params)
  init = jax.jit(functools.partial(init_train_state, optimizer=optimizer),
                 in_shardings=(shardings.params,), out_shardings=shardings)
  return init(params), shardings
