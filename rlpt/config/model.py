"""The models' configs: the shape and numerics of a decoder-only transformer
(`ModelConfig`, with its RoPE scaling, `RopeScaling`) and its LoRA adapters
(`LoraConfig`). Plain data: `rlpt.models` and `rlpt.attention` build on them."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

ROPE_SCALING_KINDS = ("none", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """How to stretch RoPE to a longer context.

  Attributes:
    kind: "none", "linear" or "llama3".
    factor: context extension factor (>= 1); Llama 3.1 uses 8.
    low_freq_factor: llama3 only; wavelengths above original/low are fully scaled.
    high_freq_factor: llama3 only; wavelengths below original/high are kept.
    original_max_position: llama3 only; the context length of pre-training.
  """

  kind: str = "none"
  factor: float = 1.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position: int = 8192

  def __post_init__(self):
    if self.kind not in ROPE_SCALING_KINDS:
      raise ValueError(f"rope scaling kind must be one of {ROPE_SCALING_KINDS}, got '{self.kind}'.")
    if not self.factor >= 1.0:
      raise ValueError(f"rope scaling factor must be >= 1, got {self.factor}.")
    if self.kind == "llama3":
      if not 0 < self.low_freq_factor < self.high_freq_factor:
        raise ValueError(
            f"llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got "
            f"{self.low_freq_factor} and {self.high_freq_factor}.")
      if self.original_max_position <= 0:
        raise ValueError(f"llama3 rope scaling original_max_position must be positive, got "
                         f"{self.original_max_position}.")


# Names accepted by rlpt.attention.attention (its "cudnn" is reached through "auto").
ATTENTION_IMPLS = ("dense", "auto", "blockwise", "sparse", "ring")
# MLP gate activations: SwiGLU (Llama, Qwen) and GeGLU with tanh-approximate GELU (Gemma).
MLP_ACTIVATIONS = ("silu", "gelu_tanh")


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

  Switches for imported Hugging Face families (rlpt.models.hf); every default
  keeps the native rlpt model:

    scale_tied_head: multiply the tied head's logits by d_model**-0.5 (rlpt's
      own init); Hugging Face tied heads are not scaled.
    qkv_bias: biases on the q/k/v projections (Qwen2).
    qk_norm: RMSNorm over head_dim of queries and keys before RoPE (Qwen3, Gemma3).
    norm_offset: RMSNorm multiplies by (norm_offset + weight); Gemma stores
      weight - 1 and uses 1.0.
    embed_scale: multiply embeddings by sqrt(d_model) (Gemma).
    mlp_activation: one of MLP_ACTIVATIONS.
    post_norms: extra RMSNorms on the attention and MLP outputs before the
      residual add (Gemma2/3 "sandwich" norms).
    attn_scale: attention score multiplier; 0 = head_dim**-0.5 (Gemma uses
      query_pre_attn_scalar**-0.5).
    attn_logit_softcap: scores -> cap * tanh(scores / cap) before masking; 0 = off.
    final_logit_softcap: the same on the output logits; 0 = off.
    layer_windows: per-layer sliding window (0 = full attention), one entry per
      layer; empty = every layer uses attention_window.
    rope_scaling: RoPE frequency scaling (rlpt.attention.RopeScaling) of the
      full-attention layers (and of all layers when rope_local_theta is 0).
    rope_local_theta: RoPE base of sliding-window layers, unscaled (Gemma3);
      0 = same as the full layers.
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
  scale_tied_head: bool = True
  qkv_bias: bool = False
  qk_norm: bool = False
  norm_offset: float = 0.0
  embed_scale: bool = False
  mlp_activation: str = "silu"
  post_norms: bool = False
  attn_scale: float = 0.0
  attn_logit_softcap: float = 0.0
  final_logit_softcap: float = 0.0
  layer_windows: tuple[int, ...] = ()
  rope_scaling: RopeScaling = RopeScaling()
  rope_local_theta: float = 0.0

  def __post_init__(self):
    # A config read back from JSON (rlpt.checkpoint.load_model) has lists and
    # dicts where these fields hold a tuple and a RopeScaling.
    if isinstance(self.rope_scaling, dict):
      object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
    if not isinstance(self.layer_windows, tuple):
      object.__setattr__(self, "layer_windows", tuple(self.layer_windows))
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
    if self.mlp_activation not in MLP_ACTIVATIONS:
      raise ValueError(f"model.mlp_activation must be one of {MLP_ACTIVATIONS}, got "
                       f"'{self.mlp_activation}'.")
    for name in ("attn_scale", "attn_logit_softcap", "final_logit_softcap", "rope_local_theta"):
      if getattr(self, name) < 0:
        raise ValueError(f"model.{name} must be >= 0 (0 = off), got {getattr(self, name)}.")
    if self.layer_windows:
      if len(self.layer_windows) != self.num_layers:
        raise ValueError(f"model.layer_windows has {len(self.layer_windows)} entries for "
                         f"{self.num_layers} layers; give one window (0 = full) per layer.")
      if any(w < 0 for w in self.layer_windows):
        raise ValueError(f"model.layer_windows must be >= 0, got {self.layer_windows}.")
      if self.attention_window:
        raise ValueError("set either model.attention_window (every layer) or "
                         "model.layer_windows (per layer), not both.")
    if self.attn_logit_softcap and self.attention_impl != "dense":
      raise ValueError(f"model.attn_logit_softcap needs model.attention_impl='dense' (the "
                       f"kernels do not soft-cap), got '{self.attention_impl}'.")

  @property
  def full_dense_attention(self) -> bool:
    """Every layer attends densely over all earlier keys (no kernel, no window):
    what attention over an explicit [T, S] mask (packed rows, decode phases) needs."""
    return self.attention_impl == "dense" and not self.attention_window and not any(
        self.layer_windows)

  def window(self, layer: int) -> int:
    """Sliding window of layer ``layer`` in keys, 0 = full attention."""
    return self.layer_windows[layer] if self.layer_windows else self.attention_window

  @property
  def jnp_dtype(self):
    return jnp.dtype(self.dtype)

  def num_params(self) -> int:
    """Parameter count of the policy (excluding a value head)."""
    d, h = self.d_model, self.head_dim
    attn = d * h * (2 * self.num_heads + 2 * self.num_kv_heads)
    mlp = 3 * d * self.mlp_dim
    per_layer = attn + mlp + 2 * d
    per_layer += (self.num_heads + 2 * self.num_kv_heads) * h if self.qkv_bias else 0
    per_layer += 2 * h if self.qk_norm else 0
    per_layer += 2 * d if self.post_norms else 0
    head = 0 if self.tie_embeddings else d * self.vocab_size
    return self.vocab_size * d + self.num_layers * per_layer + d + head


# rlpt weight -> (sub-module, number of leading input dims, HF module name).
LORA_TARGETS = {
    "wq": ("attn", 1, "self_attn.q_proj"), "wk": ("attn", 1, "self_attn.k_proj"),
    "wv": ("attn", 1, "self_attn.v_proj"), "wo": ("attn", 2, "self_attn.o_proj"),
    "w_gate": ("mlp", 1, "mlp.gate_proj"), "w_up": ("mlp", 1, "mlp.up_proj"),
    "w_down": ("mlp", 1, "mlp.down_proj"),
}


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """rank: r; alpha: the update is scaled by alpha / rank; targets: keys of LORA_TARGETS."""

  rank: int = 8
  alpha: float = 16.0
  targets: tuple[str, ...] = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")

  def __post_init__(self):
    if self.rank <= 0:
      raise ValueError(f"lora.rank must be positive, got {self.rank}.")
    if self.alpha <= 0:
      raise ValueError(f"lora.alpha must be positive, got {self.alpha}.")
    bad = [t for t in self.targets if t not in LORA_TARGETS]
    if bad or not self.targets:
      raise ValueError(f"lora.targets {self.targets} must be a non-empty subset of "
                       f"{tuple(LORA_TARGETS)}.")

  @property
  def scale(self) -> float:
    return self.alpha / self.rank
