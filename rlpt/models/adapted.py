"""A frozen weight with its LoRA adapters, as the model's products read it
(rlpt.models.lora builds these; rlpt.models.transformer.project applies them).
Kept apart from rlpt.models.lora, which imports the model for its exports."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LoraWeight:
  """A frozen weight ``w`` with its adapters, applied factored.

  ``project`` (rlpt.models.transformer) multiplies by it as
  ``x w + scale (x a) b``: no weight-sized product is ever formed, so the
  gradient reaches the adapters through two rank-r products and the frozen
  weight's cotangent (a product as large as the forward's) is never built.
  Merging first (``w + scale a b``) would make autodiff form exactly that
  weight-sized gradient, a third forward's worth of FLOPs per update.
  ``a`` is [*I, r] and ``b`` [r, *O] for a weight with input dims I and output
  dims O; ``merged()`` is the plain weight the sampler and exports read.
  """

  w: jax.Array
  a: jax.Array
  b: jax.Array
  scale: float = dataclasses.field(metadata=dict(static=True))

  @property
  def shape(self):
    return self.w.shape

  @property
  def dtype(self):
    return self.w.dtype

  def __getitem__(self, key):
    if key is not Ellipsis:  # a Variable's [...] read; nothing slices a weight in the model
      raise TypeError(f"a LoRA-adapted weight is read whole ([...]), not sliced with {key!r}.")
    return self

  def merged(self) -> jax.Array:
    """``w + scale * a @ b`` in ``w``'s dtype."""
    delta = jnp.tensordot(self.a, self.b, axes=1) * self.scale
    return self.w + delta.astype(self.w.dtype)

  def delta(self, eq: str, x, dtype) -> jax.Array:
    """``scale * (x a) b`` for the product ``einsum(eq, x, w)``, accumulated in
    fp32: the adapters' share of ``project(eq, x, self, dtype)``."""
    inputs, out = eq.split("->")
    xs, ws = inputs.split(",")
    n_in = self.a.ndim - 1
    w_in, w_out = ws[:n_in], ws[n_in:]
    r = next(c for c in "rzyxwvuqpo" if c not in eq)
    x_keep = "".join(c for c in xs if c not in w_in)
    xa = jnp.einsum(f"{xs},{w_in}{r}->{x_keep}{r}", x.astype(dtype), self.a.astype(dtype),
                    preferred_element_type=jnp.float32)
    xab = jnp.einsum(f"{x_keep}{r},{r}{w_out}->{out}", xa.astype(dtype), self.b.astype(dtype),
                     preferred_element_type=jnp.float32)
    return xab * jnp.float32(self.scale)

