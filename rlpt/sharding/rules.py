"""Logical axis names -> mesh axes, applied to parameters and activations."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

import jax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rlpt.config.rules import Rules

# One layer of the KV cache in logical axes: keys [B, K, H, S], values [B, K, S, H]
# (rlpt.models.KVCache).
KV_CACHE_AXES = ("batch", "kv_heads", "seq", "head_dim")
K_CACHE_AXES = ("batch", "kv_heads", "head_dim", "seq")

_CONTEXT = threading.local()


def logical_to_spec(axes: Sequence[str | None], rules: Rules) -> PartitionSpec:
  """Maps logical axis names to a PartitionSpec; unknown names are an error."""
  table = dict(rules)
  out = []
  used: set[str] = set()
  for name in axes:
    if name is None:
      out.append(None)
      continue
    if name not in table:
      raise ValueError(f"Logical axis '{name}' has no rule; rules cover {sorted(table)}.")
    mesh_axes = table[name]
    # A mesh axis may shard at most one dimension of a tensor.
    if isinstance(mesh_axes, str):
      mesh_axes = None if mesh_axes in used else mesh_axes
      used.update([mesh_axes] if mesh_axes else [])
    elif mesh_axes is not None:
      mesh_axes = tuple(a for a in mesh_axes if a not in used) or None
      used.update(mesh_axes or ())
    out.append(mesh_axes)
  return PartitionSpec(*out)


def _prune_for_shape(spec: PartitionSpec, shape: Sequence[int], mesh: Mesh,
                     what: str) -> PartitionSpec:
  """Checks every sharded dimension divides evenly over its mesh axes."""
  for dim, (size, mesh_axes) in enumerate(zip(shape, spec)):
    if mesh_axes is None:
      continue
    names = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
    n = 1
    for a in names:
      n *= mesh.shape[a]
    if size % n:
      raise ValueError(
          f"{what}: dimension {dim} has size {size}, not divisible by mesh axes "
          f"{names} of total size {n}. Change the mesh shape or the sharding rules.")
  return spec


def named_sharding(axes: Sequence[str | None], mesh: Mesh, rules: Rules,
                   shape: Sequence[int] | None = None, what: str = "array") -> NamedSharding:
  spec = logical_to_spec(axes, rules)
  if shape is not None:
    spec = _prune_for_shape(spec, shape, mesh, what)
  return NamedSharding(mesh, spec)


def state_shardings(state: nnx.State, mesh: Mesh, rules: Rules) -> nnx.State:
  """NamedSharding for every leaf of an nnx.State, from each Variable's ``axes``.

  Variables without ``axes`` metadata (scalars such as counters) are replicated.
  """

  def one(path, var):
    axes = var.get_metadata().get("axes")
    value = var.get_value()
    if axes is None:
      axes = (None,) * value.ndim
    if len(axes) != value.ndim:
      raise ValueError(f"Parameter {jax.tree_util.keystr(path)} has axes {axes} for shape {value.shape}.")
    return var.replace(named_sharding(axes, mesh, rules, value.shape, jax.tree_util.keystr(path)))

  return jax.tree_util.tree_map_with_path(
      one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def per_device_bytes(tree, shardings) -> int:
  """Bytes one device holds of ``tree`` (arrays or ShapeDtypeStructs) laid out by
  ``shardings`` (same structure; an AbstractMesh works, nothing is allocated).

  Counts the largest shard, which every device holds when dimensions divide
  evenly (the rules enforce that for parameters).
  """
  leaves = jax.tree.leaves(tree)
  shs = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
  if len(leaves) != len(shs):
    raise ValueError(f"{len(leaves)} arrays but {len(shs)} shardings.")
  total = 0
  for x, sh in zip(leaves, shs):
    n = 1
    for d in sh.shard_shape(tuple(x.shape)):
      n *= d
    total += n * jax.numpy.dtype(x.dtype).itemsize
  return total


@contextlib.contextmanager
def use_rules(mesh: Mesh, rules: Rules) -> Iterator[None]:
  """Activates (mesh, rules) for ``constrain`` calls traced inside the block."""
  prev = getattr(_CONTEXT, "value", None)
  _CONTEXT.value = (mesh, rules)
  try:
    yield
  finally:
    _CONTEXT.value = prev


def constrain(x: jax.Array, axes: Sequence[str | None]) -> jax.Array:
  """with_sharding_constraint by logical axes under the active ``use_rules``.

  Outside ``use_rules`` (a single-device notebook) there is no mesh to
  constrain to and the array is returned as is.
  """
  ctx = getattr(_CONTEXT, "value", None)
  if ctx is None:
    return x
  mesh, rules = ctx
  spec = logical_to_spec(axes, rules)
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
