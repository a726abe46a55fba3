"""Host <-> device transfers under single-controller semantics.

Every process runs the same program on the same host values (same seeds, same
rollouts), so host data becomes a global array with ``host_to_global`` (each
process fills only its own shards from its identical copy), and results come
back with ``to_host`` (an all-gather when the array spans other processes'
devices). With one process both reduce to device_put / device_get.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils


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


def to_device(params: Any, shardings: Any) -> Any:
  """Brings host-memory params in for one pass (the copy is freed after it)."""
  return jax.device_put(params, shardings)


def make_reshard(src_shardings: Any, dst_shardings: Any, copy: bool = False) -> Callable:
  """A jitted identity moving a tree from one layout to another (train -> sample).

  Not donated: the training copy stays alive for the next update. Where the
  layouts agree JAX forwards the input buffers unchanged; ``copy=True``
  returns fresh buffers, which outlive a later donation of the input.
  """
  fn = (lambda x: jax.tree.map(jnp.copy, x)) if copy else (lambda x: x)
  return jax.jit(fn, in_shardings=(src_shardings,), out_shardings=dst_shardings)
