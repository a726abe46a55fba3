"""Glue shared by the pre-training and RL loops: mesh placement and jitting."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlpt.sharding import Rules, logical_to_spec, state_shardings
from rlpt.steps import TrainState, init_train_state


def batch_sharding(mesh: Mesh, rules: Rules, ndim: int) -> NamedSharding:
  """Shards the leading (batch) dimension by the ``batch`` rule; the rest replicated."""
  return NamedSharding(mesh, logical_to_spec(("batch",) + (None,) * (ndim - 1), rules))


def batch_multiple(mesh: Mesh, rules: Rules) -> int:
  """Number of shards of the batch dimension: batches must be a multiple of it."""
  spec = logical_to_spec(("batch",), rules)[0]
  names = () if spec is None else ((spec,) if isinstance(spec, str) else spec)
  return int(np.prod([mesh.shape[n] for n in names])) if names else 1


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def place_train_state(params: nnx.State, optimizer: optax.GradientTransformation, mesh: Mesh,
                      rules: Rules) -> tuple[TrainState, TrainState]:
  """Puts params on the mesh by the rules and builds the optimizer state there.

  Returns (state, its shardings). The optimizer state's shardings are those the
  compiler gives ``optimizer.init`` on sharded params (moments follow params).
  """
  param_sh = state_shardings(params, mesh, rules)
  params = jax.device_put(params, param_sh)
  state = jax.jit(functools.partial(init_train_state, optimizer=optimizer))(params)
  shardings = jax.tree.map(lambda x: x.sharding, state)
  return state, shardings


def jit_step(fn: Callable, state_shardings, batch_shardings, mesh: Mesh, **static) -> Callable:
  """jit(fn(state, *batch) -> (state, metrics)) with explicit shardings, state donated."""
  return jax.jit(
      functools.partial(fn, **static),
      in_shardings=(state_shardings, *batch_shardings),
      out_shardings=(state_shardings, replicated(mesh)),
      donate_argnums=0,
  )
