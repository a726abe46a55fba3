"""A weight with a low-rank update kept factored: ``W + scale * A @ B``.

LoRA's training step used to multiply by the merged ``W + scale * A @ B``.
Its backward then forms the gradient of that merged weight, ``x^T dy``, a
matmul as large as the forward's own for every adapted weight, only to
contract it with B and A. Kept factored, ``x @ W + scale * (x @ A) @ B``
(`project` in rlpt.models.transformer), the backward carries ``dy`` through
W once (for the layers below) and everything else is rank-r: the update does
about two forwards' work instead of three.

``A`` is [*I, r] and ``B`` [r, *O] for a weight [*I, *O] (its input axes
first), as rlpt.models.lora lays them out. A `LowRank` stands where the
weight's array stood inside a Variable (``var[...]`` returns it), so the
model's code reads it like any weight.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class LowRank:
  """``w + scale * a @ b``, factored (see the module doc)."""

  w: jax.Array
  a: jax.Array
  b: jax.Array
  scale: float

  def tree_flatten(self):
    return (self.w, self.a, self.b), self.scale

  @classmethod
  def tree_unflatten(cls, scale, children):
    return cls(*children, scale)

  def __getitem__(self, index):
    if index is not Ellipsis:
      raise TypeError(f"a LowRank weight is read whole (w[...]), not at {index!r}.")
    return self

  @property
  def shape(self):
    return self.w.shape

  @property
  def dtype(self):
    return self.w.dtype

  def astype(self, dtype) -> "LowRank":
    return LowRank(self.w.astype(dtype), self.a.astype(dtype), self.b.astype(dtype), self.scale)

  def merged(self) -> jax.Array:
    """The plain weight ``w + scale * a @ b``, in w's dtype."""
    return self.w + (jnp.tensordot(self.a, self.b, axes=1) * self.scale).astype(self.w.dtype)


def low_rank_equations(eq: str) -> tuple[str, str]:
  """For ``eq`` = "x,w->out" whose weight's leading letters are the ones it
  contracts with x: the equations of ``x @ A`` and of ``(x @ A) @ B``."""
  lhs, out = eq.split("->")
  xs, ws = lhs.split(",")
  n_in = next((i for i, c in enumerate(ws) if c not in xs), len(ws))
  if any(c in xs for c in ws[n_in:]):
    raise ValueError(f"einsum {eq!r}: a LowRank weight's contracted axes must come first.")
  r = next(c for c in "zyxwvuqpo" if c not in eq)
  xa = "".join(c for c in xs if c not in ws[:n_in]) + r
  return f"{xs},{ws[:n_in]}{r}->{xa}", f"{xa},{r}{ws[n_in:]}->{out}"
