"""Builds the device mesh from a config mapping of axis name to size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from rlpt.config.rules import MESH_AXES


def resolve_mesh_shape(shape: Mapping[str, int], num_devices: int) -> tuple[int, ...]:
  """Returns the mesh shape in MESH_AXES order, resolving one ``-1`` entry.

  Raises a ValueError naming the offending axis or product when the request
  cannot be laid on ``num_devices`` devices.
  """
  unknown = sorted(set(shape) - set(MESH_AXES))
  if unknown:
    raise ValueError(f"Unknown mesh axis {unknown}; expected a subset of {MESH_AXES}.")
  sizes = [int(shape.get(axis, 1)) for axis in MESH_AXES]
  for axis, size in zip(MESH_AXES, sizes):
    if size == 0 or size < -1:
      raise ValueError(f"Mesh axis '{axis}' has size {size}; expected a positive size or -1.")
  if sizes.count(-1) > 1:
    raise ValueError(f"At most one mesh axis may be -1, got {dict(zip(MESH_AXES, sizes))}.")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if num_devices % known:
      raise ValueError(
          f"Mesh {dict(zip(MESH_AXES, sizes))}: the fixed axes multiply to {known}, "
          f"which does not divide the {num_devices} available devices.")
    sizes[sizes.index(-1)] = num_devices // known
  elif known != num_devices:
    raise ValueError(
        f"Mesh {dict(zip(MESH_AXES, sizes))} has {known} devices but {num_devices} are "
        "available; use -1 on one axis to take the rest.")
  return tuple(sizes)


def make_mesh(shape: Mapping[str, int], devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Creates a Mesh with axes MESH_AXES from e.g. ``{"data": -1, "tensor": 2}``."""
  devices = list(devices) if devices is not None else jax.devices()
  sizes = resolve_mesh_shape(shape, len(devices))
  # Auto axes: the compiler propagates shardings from the annotated inputs,
  # outputs and `constrain` points (explicit-sharding mode would require an
  # out-sharding on every gather).
  return jax.make_mesh(sizes, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)
