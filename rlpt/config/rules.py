"""The names a run's sharding config may use: the mesh's axes, the models'
logical axes, and the two rules tables mapping one to the other (training:
FSDP + tensor; sampling: tensor only). `rlpt.sharding` applies them."""

from __future__ import annotations

from collections.abc import Sequence

# Fixed axis order: data outermost (cheapest collectives across slices),
# tensor innermost (most communication, wants the fastest links).
MESH_AXES = ("data", "fsdp", "sequence", "tensor")

# A rules table: (logical axis, mesh axis or tuple of mesh axes or None).
Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

# Every logical axis the models name. A rules table may map only these.
LOGICAL_AXES = ("batch", "seq", "embed", "heads", "kv_heads", "head_dim", "mlp", "vocab")

# Training layout: FSDP over `fsdp` on the embed dimension, tensor parallelism
# over heads / mlp / vocab, batch over data x fsdp.
DEFAULT_RULES: Rules = (
    ("batch", ("data", "fsdp")),
    ("seq", None),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
)

# Sampling layout: parameters tensor-parallel only, replicated over data and
# fsdp, so decoding (one token per step, weight-bandwidth bound) never gathers
# weights across the fsdp axis. Sequences still spread over data x fsdp.
SAMPLE_RULES: Rules = (
    ("batch", ("data", "fsdp")),
    ("seq", None),
    ("embed", None),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("vocab", "tensor"),
)


def sequence_sharded(rules: Rules) -> Rules:
  """``rules`` with the ``seq`` axis on the ``sequence`` mesh axis (long
  contexts: ring attention, sequence-sharded activations and KV cache)."""
  return tuple((name, "sequence" if name == "seq" else target) for name, target in rules)


def check_rules(rules: Rules, what: str = "rules", mesh_axes: Sequence[str] = MESH_AXES) -> Rules:
  """Validates a rules table; returns it as nested tuples.

  Raises a ValueError naming the offending entry for an unknown logical axis,
  an unknown mesh axis, a duplicate logical axis or a mesh axis used twice
  within one entry.
  """
  out = []
  seen: set[str] = set()
  for i, entry in enumerate(rules):
    if len(entry) != 2:
      raise ValueError(f"{what}[{i}]={entry!r}: expected a (logical axis, mesh axes) pair.")
    name, target = entry
    if name not in LOGICAL_AXES:
      raise ValueError(f"{what}[{i}] names unknown logical axis '{name}'; the models use "
                       f"{LOGICAL_AXES}.")
    if name in seen:
      raise ValueError(f"{what}[{i}]: logical axis '{name}' has more than one rule.")
    seen.add(name)
    names = () if target is None else ((target,) if isinstance(target, str) else tuple(target))
    for a in names:
      if a not in mesh_axes:
        raise ValueError(f"{what}[{i}] maps '{name}' to unknown mesh axis '{a}'; mesh axes are "
                         f"{tuple(mesh_axes)}.")
    if len(set(names)) != len(names):
      raise ValueError(f"{what}[{i}] maps '{name}' to {names}, repeating a mesh axis.")
    out.append((name, None if target is None else (target if isinstance(target, str) else names)))
  return tuple(out)
