"""Shape and numerics of a decoder-only transformer."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

# Names accepted by rlpt.attention.attention (its "cudnn" is reached through "auto").
ATTENTION_IMPLS = ("dense", "auto", "blockwise", "sparse", "ring")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture of a Llama-style decoder.

  Attributes:
    vocab_size: number of token ids (the byte tokenizer needs 259).
    d_model: width of the residual stream.
    num_layers: decoder blocks.
    num_heads: query heads.
    num_kv_heads: key/value heads (grouped-query attention); divides num_heads.
    head_dim: width of one attention head.
    mlp_dim: hidden width of the SwiGLU MLP.
    rope_theta: RoPE base wavelength.
    norm_eps: RMSNorm epsilon.
    tie_embeddings: reuse the embedding table as the output projection.
    dtype: activation dtype ("float32" or "bfloat16"); parameters stay fp32.
    attention_impl: attention without a KV cache (training, scoring), one of
      ATTENTION_IMPLS; see rlpt.attention.dispatch. "dense" keeps the model's
      mask-based attention; the others mask by positions. "ring" needs a mesh
      with a `sequence` axis set by jax.set_mesh. The cached (sampling) path
      is always dense.
    attention_block_size: query/key block length of the blockwise kernels.
    attention_window: sliding window in keys (the token itself included), 0 = none.
    attention_sinks: leading positions that stay visible outside the window.
  """

  vocab_size: int = 259
  d_model: int = 128
  num_layers: int = 4
  num_heads: int = 4
  num_kv_heads: int = 2
  head_dim: int = 32
  mlp_dim: int = 384
  rope_theta: float = 10_000.0
  norm_eps: float = 1e-6
  tie_embeddings: bool = True
  dtype: str = "float32"
  attention_impl: str = "dense"
  attention_block_size: int = 512
  attention_window: int = 0
  attention_sinks: int = 0

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "mlp_dim"):
      if getattr(self, name) <= 0:
        raise ValueError(f"model.{name} must be positive, got {getattr(self, name)}.")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(
          f"model.num_heads ({self.num_heads}) must be a multiple of model.num_kv_heads "
          f"({self.num_kv_heads}) for grouped-query attention.")
    if self.head_dim % 2:
      raise ValueError(f"model.head_dim must be even for RoPE, got {self.head_dim}.")
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"model.dtype must be 'float32' or 'bfloat16', got '{self.dtype}'.")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(f"model.attention_impl must be one of {ATTENTION_IMPLS}, got "
                       f"'{self.attention_impl}'.")
    if self.attention_block_size <= 0:
      raise ValueError(f"model.attention_block_size must be positive, got "
                       f"{self.attention_block_size}.")
    if self.attention_window < 0:
      raise ValueError(f"model.attention_window must be >= 0 (0 = no window), got "
                       f"{self.attention_window}.")
    if self.attention_sinks < 0:
      raise ValueError(f"model.attention_sinks must be >= 0, got {self.attention_sinks}.")
    if self.attention_sinks and not self.attention_window:
      raise ValueError(f"model.attention_sinks ({self.attention_sinks}) only applies with a "
                       "sliding window; set model.attention_window > 0 or the sinks to 0.")
    if self.attention_impl == "sparse" and not self.attention_window:
      raise ValueError("model.attention_impl 'sparse' needs model.attention_window > 0.")

  @property
  def jnp_dtype(self):
    return jnp.dtype(self.dtype)

  def num_params(self) -> int:
    """Parameter count of the policy (excluding a value head)."""
    d, h = self.d_model, self.head_dim
    attn = d * h * (2 * self.num_heads + 2 * self.num_kv_heads)
    mlp = 3 * d * self.mlp_dim
    per_layer = attn + mlp + 2 * d
    head = 0 if self.tie_embeddings else d * self.vocab_size
    return self.vocab_size * d + self.num_layers * per_layer + d + head
