"""How a batch lies on the mesh: its sharding, the row multiple it needs, row buckets."""

from __future__ import annotations

import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlpt.sharding import Rules, logical_to_spec


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
