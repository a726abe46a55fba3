"""One entry point for attention: picks an implementation by name, backend and shape.

Implementations (all positions-based, see ``rlpt.attention.reference``):

  dense      fp32 reference, O(T * S) memory; short sequences and tests.
  blockwise  flash attention with causal block skipping, O(T) memory fwd+bwd.
  sparse     the blockwise kernel with a sliding window (+ attention sinks):
             only blocks inside the window are visited, O(T * window) FLOPs.
             The same kernel, because block skipping is already general; a
             second kernel would be a second place for masking bugs.
  ring       blockwise inner kernel in a ring over the ``sequence`` mesh axis
             (zigzag layout), O(T / n) memory per device.
  cudnn      ``jax.nn.dot_product_attention(implementation="cudnn")``, GPU only,
             for the plain case (see ``trivial_positions``).
  auto       cudnn where it applies; else ring if a mesh with a ``sequence``
             axis > 1 is passed; else sparse with a window; else blockwise for
             long sequences (T >= 2 * block_size); else dense.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.attention.blockwise import blockwise_attention
from rlpt.attention.reference import reference_attention
from rlpt.attention.ring import ring_attention

IMPLS = ("auto", "dense", "blockwise", "ring", "sparse", "cudnn")
_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def cudnn_applies(q_BxTxNxH, k_BxSxKxH, *, window, num_sinks, trivial_positions) -> bool:
  """Whether cuDNN flash attention can compute this call exactly."""
  t, h = q_BxTxNxH.shape[1], q_BxTxNxH.shape[3]
  return (jax.default_backend() == "gpu" and trivial_positions and num_sinks == 0
          and q_BxTxNxH.dtype in _CUDNN_DTYPES and t == k_BxSxKxH.shape[1]
          and h % 8 == 0 and h <= 128)


def resolve_impl(impl: str, q_BxTxNxH, k_BxSxKxH, *, window, num_sinks, block_size, mesh,
                 trivial_positions) -> str:
  """The implementation ``attention`` runs for these (static) arguments."""
  if impl != "auto":
    return impl
  if cudnn_applies(q_BxTxNxH, k_BxSxKxH, window=window, num_sinks=num_sinks,
                   trivial_positions=trivial_positions):
    return "cudnn"
  t, s = q_BxTxNxH.shape[1], k_BxSxKxH.shape[1]
  if mesh is not None and dict(mesh.shape).get("sequence", 1) > 1 and t == s:
    return "ring"
  if window is not None:
    return "sparse"
  return "blockwise" if t >= 2 * block_size else "dense"


def nn_dot_product_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, *, kv_valid, window,
                             implementation: str | None = "cudnn") -> jax.Array:
  """Our semantics through ``jax.nn.dot_product_attention``, for trivial positions.

  Valid only when positions are 0..T-1 on both sides and kv_valid is a prefix
  mask (it becomes key_value_seq_lengths); the window maps to a left window of
  ``window - 1`` (jax counts keys besides the query's own). Rows that see no
  key at all are the one difference: jax returns an arbitrary average, not 0.
  """
  lengths = None if kv_valid is None else jnp.sum(kv_valid, axis=1, dtype=jnp.int32)
  local = None if window is None else (window - 1, 0)
  return jax.nn.dot_product_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, is_causal=True,
                                      key_value_seq_lengths=lengths, local_window_size=local,
                                      implementation=implementation)


def _validate(q, k, v, q_positions, kv_positions, kv_valid, impl, window, num_sinks, block_size):
  if impl not in IMPLS:
    raise ValueError(f"attention impl must be one of {IMPLS}, got '{impl}'.")
  if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
    raise ValueError(f"attention wants q [B, T, N, H] and k, v [B, S, K, H] of equal shape, got "
                     f"q {q.shape}, k {k.shape}, v {v.shape}.")
  (b, t, n, h), (bk, s, kh, hk) = q.shape, k.shape
  if b != bk or h != hk or n % kh:
    raise ValueError(f"q {q.shape} and k {k.shape} must share B and H, and K must divide N.")
  if q_positions.shape != (b, t) or kv_positions.shape != (b, s):
    raise ValueError(f"q_positions {q_positions.shape} must be {(b, t)} and kv_positions "
                     f"{kv_positions.shape} must be {(b, s)}.")
  if kv_valid is not None and kv_valid.shape != (b, s):
    raise ValueError(f"kv_valid {kv_valid.shape} must be {(b, s)}.")
  if window is not None and (not isinstance(window, int) or window < 1):
    raise ValueError(f"attention window must be None or a positive int, got {window!r}.")
  if not isinstance(num_sinks, int) or num_sinks < 0:
    raise ValueError(f"attention num_sinks must be a non-negative int, got {num_sinks!r}.")
  if not isinstance(block_size, int) or block_size < 1:
    raise ValueError(f"attention block_size must be a positive int, got {block_size!r}.")
  if impl == "sparse" and window is None:
    raise ValueError("attention impl 'sparse' needs a window (sliding window + sinks); "
                     "use 'blockwise' for full causal attention.")


def attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, *, q_positions, kv_positions, kv_valid=None,
              impl: str = "auto", window: int | None = None, num_sinks: int = 0,
              block_size: int = 512, mesh=None, trivial_positions: bool = False) -> jax.Array:
  """Causal attention masked by positions; [B, T, N, H] in q's dtype.

  Args:
    q_BxTxNxH, k_BxSxKxH, v_BxSxKxH: queries and keys/values (K kv heads, GQA).
    q_positions, kv_positions: [B, T] / [B, S] int token positions.
    kv_valid: optional [B, S] bool, False for padding or unwritten cache slots.
    impl: one of IMPLS (see the module docstring).
    window: sliding window in keys (the query's own included), None = full.
    num_sinks: positions < num_sinks stay visible outside the window.
    block_size: query and key block length of the blockwise kernels.
    mesh: the device mesh for "ring" (default: the mesh set by ``jax.set_mesh``).
    trivial_positions: the caller promises positions are 0..T-1 on both sides
      and kv_valid is a prefix mask, which lets "auto" use cuDNN on GPU.
  """
  _validate(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, q_positions, kv_positions, kv_valid, impl, window,
            num_sinks, block_size)
  name = resolve_impl(impl, q_BxTxNxH, k_BxSxKxH, window=window, num_sinks=num_sinks,
                      block_size=block_size, mesh=mesh, trivial_positions=trivial_positions)
  kw = dict(q_positions=q_positions, kv_positions=kv_positions, kv_valid=kv_valid,
            window=window, num_sinks=num_sinks)
  if name == "dense":
    return reference_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, **kw)
  if name in ("blockwise", "sparse"):
    return blockwise_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, block_size=block_size, **kw)
  if name == "ring":
    if q_BxTxNxH.shape[1] != k_BxSxKxH.shape[1]:
      raise ValueError(f"attention impl 'ring' is self-attention: T ({q_BxTxNxH.shape[1]}) "
                       f"must equal S ({k_BxSxKxH.shape[1]}).")
    mesh = mesh if mesh is not None else jax.sharding.get_abstract_mesh()
    if "sequence" not in dict(mesh.shape):
      raise ValueError("attention impl 'ring' needs a mesh with a 'sequence' axis: pass mesh= "
                       "or call under jax.set_mesh(mesh).")
    return ring_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, mesh=mesh, block_size=block_size,
                          **kw)
  if num_sinks or not trivial_positions:
    raise ValueError("attention impl 'cudnn' needs trivial_positions=True and num_sinks=0.")
  return nn_dot_product_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, kv_valid=kv_valid,
                                  window=window)
