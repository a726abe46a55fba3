"""Hugging Face ``config.json`` <-> ``ModelConfig`` for Llama 3, Qwen2/Qwen3, Gemma 2/3.

``config_from_hf`` reads either config.json generation (transformers >= 5's
``rope_parameters`` or the older ``rope_theta`` + ``rope_scaling``) and
refuses, naming it, any architecture option rlpt does not implement;
``config_to_hf`` writes the transformers >= 5 layout for export. The weights
themselves are rlpt.models.hf's.
"""

from __future__ import annotations

import json
import os

from rlpt.config.model import RopeScaling
from rlpt.config.model import ModelConfig

# config.json model_type -> rlpt family name.
MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
               "gemma3_text": "gemma3", "gemma3": "gemma3"}
FAMILIES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                  "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
                  "gemma3": "Gemma3ForCausalLM"}
_HF_MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
                  "gemma3": "gemma3_text"}


class UnsupportedCheckpointError(ValueError):
  """A checkpoint uses an architecture option rlpt does not implement (named in the message)."""


def read_hf_config(directory: str) -> dict:
  path = os.path.join(directory, "config.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"No Hugging Face checkpoint at '{directory}': expected '{path}'.")
  with open(path) as f:
    cfg = json.load(f)
  if "text_config" in cfg:  # multimodal Gemma3: the language model's part
    cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", "gemma3_text")}
  return cfg


def _rope_scaling(params: dict | None, what: str) -> RopeScaling:
  if not params:
    return RopeScaling()
  kind = params.get("rope_type", params.get("type", "default"))
  if kind == "default":
    return RopeScaling()
  if kind == "linear":
    return RopeScaling("linear", float(params["factor"]))
  if kind == "llama3":
    return RopeScaling("llama3", float(params["factor"]), float(params["low_freq_factor"]),
                       float(params["high_freq_factor"]),
                       int(params["original_max_position_embeddings"]))
  raise UnsupportedCheckpointError(f"{what}: rope type '{kind}' is not supported; rlpt implements "
                                   "'default', 'linear' and 'llama3'.")


def _rope(hf: dict, family: str) -> tuple[float, RopeScaling, float]:
  """(theta, scaling, local theta) from either config.json generation.

  transformers >= 5 writes ``rope_parameters`` (per layer type for Gemma3);
  checkpoints on the Hub mostly carry the older ``rope_theta`` +
  ``rope_scaling`` (+ Gemma3's ``rope_local_base_freq``).
  """
  rp = hf.get("rope_parameters")
  if rp and family == "gemma3" and "full_attention" in rp:
    full, local = rp["full_attention"], rp.get("sliding_attention", {})
    local_scaling = _rope_scaling(local, "rope_parameters.sliding_attention")
    if local_scaling.kind != "none":
      raise UnsupportedCheckpointError("scaled RoPE on Gemma3's sliding layers is not supported.")
    return (float(full["rope_theta"]), _rope_scaling(full, "rope_parameters.full_attention"),
            float(local.get("rope_theta", 10_000.0)))
  if rp:
    theta, scaling = float(rp["rope_theta"]), _rope_scaling(rp, "rope_parameters")
  else:
    theta = float(hf.get("rope_theta", 10_000.0))
    scaling = _rope_scaling(hf.get("rope_scaling"), "rope_scaling")
  local = float(hf.get("rope_local_base_freq", 10_000.0)) if family == "gemma3" else 0.0
  return theta, scaling, local


def _layer_types(hf: dict, family: str) -> list[str]:
  n = hf["num_hidden_layers"]
  if hf.get("layer_types"):
    return list(hf["layer_types"])
  if family == "gemma2":
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
  if family == "gemma3":
    pattern = hf.get("sliding_window_pattern", hf.get("_sliding_window_pattern", 6))
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
  return ["full_attention"] * n


def config_from_hf(hf: dict, dtype: str = "float32") -> tuple[ModelConfig, str]:
  """(ModelConfig, family) for a config.json dict; unsupported options raise."""
  model_type = hf.get("model_type")
  if model_type not in MODEL_TYPES:
    raise ValueError(f"config.json model_type '{model_type}' is not supported; rlpt imports "
                     f"{sorted(MODEL_TYPES)}.")
  family = MODEL_TYPES[model_type]
  gemma = family.startswith("gemma")
  if hf.get("mlp_bias") or (family != "qwen2" and hf.get("attention_bias")):
    raise UnsupportedCheckpointError(f"{model_type}: attention_bias / mlp_bias are not supported.")
  if hf.get("use_sliding_window"):
    raise UnsupportedCheckpointError(f"{model_type}: use_sliding_window=True is not supported.")
  if hf.get("use_bidirectional_attention"):
    raise UnsupportedCheckpointError(f"{model_type}: bidirectional attention is not supported.")
  act = hf.get("hidden_activation") or hf.get("hidden_act")
  want = "gelu_pytorch_tanh" if gemma else "silu"
  if act != want:
    raise UnsupportedCheckpointError(f"{model_type}: activation '{act}' is not supported (want '{want}').")
  theta, scaling, local = _rope(hf, family)
  window = hf.get("sliding_window") or 0
  types = _layer_types(hf, family)
  windows = tuple(window if t == "sliding_attention" else 0 for t in types)
  d, heads = hf["hidden_size"], hf["num_attention_heads"]
  cfg = ModelConfig(
      vocab_size=hf["vocab_size"], d_model=d, num_layers=hf["num_hidden_layers"],
      num_heads=heads, num_kv_heads=hf.get("num_key_value_heads") or heads,
      head_dim=hf.get("head_dim") or d // heads, mlp_dim=hf["intermediate_size"],
      rope_theta=theta, norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", gemma)), dtype=dtype,
      scale_tied_head=False, qkv_bias=family == "qwen2",
      qk_norm=family in ("qwen3", "gemma3"), norm_offset=1.0 if gemma else 0.0,
      embed_scale=gemma, mlp_activation="gelu_tanh" if gemma else "silu", post_norms=gemma,
      attn_scale=float(hf.get("query_pre_attn_scalar", 0)) ** -0.5 if gemma else 0.0,
      attn_logit_softcap=float(hf.get("attn_logit_softcapping") or 0.0),
      final_logit_softcap=float(hf.get("final_logit_softcapping") or 0.0),
      layer_windows=windows if any(windows) else (), rope_scaling=scaling,
      rope_local_theta=local if any(windows) else 0.0)
  return cfg, family


def family_of(cfg: ModelConfig) -> str:
  """The Hugging Face family whose architecture ``cfg`` is (for export)."""
  if cfg.post_norms and cfg.norm_offset == 1.0 and cfg.embed_scale:
    return "gemma3" if cfg.qk_norm else "gemma2"
  if cfg.qkv_bias and not cfg.qk_norm:
    return "qwen2"
  if cfg.qk_norm and not cfg.qkv_bias:
    return "qwen3"
  if not (cfg.qkv_bias or cfg.post_norms or cfg.embed_scale or cfg.norm_offset):
    return "llama"
  raise ValueError("this ModelConfig matches no Hugging Face family rlpt exports "
                   f"{FAMILIES}: {cfg}")


def _rope_dict(theta: float, s: RopeScaling) -> dict:
  if s.kind == "none":
    return {"rope_type": "default", "rope_theta": theta}
  if s.kind == "linear":
    return {"rope_type": "linear", "factor": s.factor, "rope_theta": theta}
  return {"rope_type": "llama3", "factor": s.factor, "low_freq_factor": s.low_freq_factor,
          "high_freq_factor": s.high_freq_factor,
          "original_max_position_embeddings": s.original_max_position, "rope_theta": theta}


def config_to_hf(cfg: ModelConfig, family: str | None = None, dtype: str = "float32",
                 extra: dict | None = None) -> dict:
  """config.json for ``cfg`` (transformers >= 5 layout: ``rope_parameters``)."""
  family = family or family_of(cfg)
  if cfg.tie_embeddings and cfg.scale_tied_head:
    raise ValueError("a tied head scaled by d_model**-0.5 (model.scale_tied_head=True) has no "
                     "tied Hugging Face equivalent; write it untied (rlpt.models.hf."
                     "untie_scaled_head; save_hf_checkpoint does).")
  if cfg.attention_window or cfg.attention_sinks:
    raise ValueError("model.attention_window / attention_sinks have no Hugging Face "
                     "equivalent in these families; use layer_windows.")
  gemma = family.startswith("gemma")
  windows = cfg.layer_windows or (0,) * cfg.num_layers
  sliding = sorted({w for w in windows if w})
  if len(sliding) > 1:
    raise ValueError(f"Hugging Face configs have one sliding window size, got {sliding}.")
  out = {
      "architectures": [_ARCHITECTURES[family]], "model_type": _HF_MODEL_TYPE[family],
      "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
      "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
      "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
      "intermediate_size": cfg.mlp_dim, "rms_norm_eps": cfg.norm_eps,
      "tie_word_embeddings": cfg.tie_embeddings, "max_position_embeddings": 8192,
      "dtype": dtype, "attention_bias": cfg.qkv_bias, "use_cache": True,
  }
  if gemma:
    out["hidden_activation"] = "gelu_pytorch_tanh"
    scalar = cfg.attn_scale ** -2 if cfg.attn_scale else cfg.head_dim
    out["query_pre_attn_scalar"] = round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar
    out["attn_logit_softcapping"] = cfg.attn_logit_softcap or None
    out["final_logit_softcapping"] = cfg.final_logit_softcap or None
    out["attention_bias"] = False
  else:
    out["hidden_act"] = "silu"
    out["mlp_bias"] = False
  if family != "llama":
    out["layer_types"] = ["sliding_attention" if w else "full_attention" for w in windows]
    out["sliding_window"] = sliding[0] if sliding else None
  elif sliding:
    raise ValueError("Llama has no sliding-window layers.")
  if family == "gemma3":
    out["rope_parameters"] = {
        "full_attention": _rope_dict(cfg.rope_theta, cfg.rope_scaling),
        "sliding_attention": _rope_dict(cfg.rope_local_theta or cfg.rope_theta, RopeScaling())}
  else:
    out["rope_parameters"] = _rope_dict(cfg.rope_theta, cfg.rope_scaling)
  out.update(extra or {})
  return out
