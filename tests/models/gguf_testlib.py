"""Tiny GGUF files written here, as llama.cpp's converter (convert_hf_to_gguf.py)
writes them, from tiny random transformers models: no downloads. Shared by
tests/models/test_gguf*.py.

``write_gguf`` takes a transformers model and writes its weights under GGUF
names with the converter's changes (Llama's q/k rows permuted for llama.cpp's
RoPE, Gemma's norms stored as 1 + w), each weight in the ggml type
``types`` gives it (norms and biases stay F32, as the converter keeps them),
plus the metadata llama.cpp reads and a byte-level vocabulary.
"""

from __future__ import annotations

import itertools

import numpy as np

# Byte-level vocabulary: the 256 bytes (GPT-2's printable spelling), then control tokens.
SPECIALS = ("<pad>", "<bos>", "<eos>", "<|im_start|>", "<|im_end|>")
MERGED_ID = 256 + len(SPECIALS)
QUANTISED = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "F16", "BF16", "F32")

_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
          "self_attn.k_norm": "attn_k_norm", "input_layernorm": "attn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_GEMMA = {"post_attention_layernorm": "post_attention_norm",
          "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm"}


def tiny_config(family: str, vocab_size: int = 320):
  """Small configs within what a GGUF file states and transformers' GGUF
  loader reads (Gemma 3: one full layer in six, head_dim 256 =
  query_pre_attn_scalar, default RoPE)."""
  import transformers as tf
  common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=vocab_size, max_position_embeddings=256,
                bos_token_id=257, eos_token_id=258, pad_token_id=256)
  if family == "llama":
    return tf.LlamaConfig(**common, tie_word_embeddings=False, rms_norm_eps=1e-5,
                          rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
  if family == "qwen2":
    return tf.Qwen2Config(**common, tie_word_embeddings=True)
  if family == "qwen3":
    # head_dim 128 (not d_model / heads, so read from attention.key_length): transformers'
    # GGUF loader does not read that key for Qwen3 and takes Qwen3Config's default, 128.
    return tf.Qwen3Config(**common, head_dim=128, tie_word_embeddings=False)
  if family == "gemma3":
    return tf.Gemma3TextConfig(**{**common, "num_hidden_layers": 6, "num_key_value_heads": 1},
                               head_dim=256, query_pre_attn_scalar=256, sliding_window=4)
  raise ValueError(family)


def make_model(family: str, seed: int = 0):
  """A tiny random transformers model (fp32, eager attention, realistic scale)."""
  import torch
  from hf_testlib import randomize_
  from transformers import AutoModelForCausalLM
  torch.manual_seed(seed)
  model = AutoModelForCausalLM.from_config(tiny_config(family), attn_implementation="eager")
  model = randomize_(model.float().eval(), seed)
  model.generation_config.eos_token_id = None
  return model


def gguf_name(hf: str, gemma: bool) -> str:
  top = {"model.embed_tokens.weight": "token_embd.weight",
         "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
  if hf in top:
    return top[hf]
  _, _, layer, rest = hf.split(".", 3)
  module, leaf = rest.rsplit(".", 1)
  table = {**_NAMES, **(_GEMMA if gemma else {"post_attention_layernorm": "ffn_norm"})}
  return f"blk.{layer}.{table[module]}.{leaf}"


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
  """llama.cpp's LlamaModel.permute: each head's RoPE halves interleaved."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _encode(w: np.ndarray, type_name: str):
  import gguf
  qtype = gguf.GGMLQuantizationType[type_name]
  if type_name == "F32":
    return w.astype(np.float32), None
  if type_name == "F16":
    return w.astype(np.float16), None
  return gguf.quantize(w.astype(np.float32), qtype), qtype


def write_gguf(path: str, model, arch: str, types=("F32",), metadata: dict | None = None,
               skip: tuple[str, ...] = ()) -> str:
  """Writes ``model`` as a GGUF file of architecture ``arch``; weight i gets
  ``types[i % len(types)]``. ``metadata`` adds or overrides keys."""
  import gguf
  cfg, gemma = model.config, arch.startswith("gemma")
  w = gguf.GGUFWriter(path, arch)
  w.add_name(f"tiny {arch}")
  heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
  head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
  rope = cfg.rope_parameters.get("full_attention", cfg.rope_parameters)
  meta = {"block_count": cfg.num_hidden_layers, "context_length": cfg.max_position_embeddings,
          "embedding_length": cfg.hidden_size, "feed_forward_length": cfg.intermediate_size,
          "attention.head_count": heads, "attention.head_count_kv": kv,
          "attention.key_length": head_dim, "attention.value_length": head_dim,
          "rope.freq_base": float(rope["rope_theta"]), "vocab_size": cfg.vocab_size,
          "attention.layer_norm_rms_epsilon": float(cfg.rms_norm_eps)}
  if arch == "llama":
    meta["rope.dimension_count"] = head_dim
  if gemma:
    meta["attention.sliding_window"] = cfg.sliding_window
  for key, value in meta.items():
    (w.add_float32 if isinstance(value, float) else w.add_uint32)(f"{arch}.{key}", value)
  _add_vocab(w, cfg.vocab_size)
  for key, value in (metadata or {}).items():
    (w.add_float32 if isinstance(value, float) else w.add_string if isinstance(value, str)
     else w.add_uint32)(key, value)
  weights = itertools.cycle(types)
  for hf, tensor in model.state_dict().items():
    if hf == "lm_head.weight" and cfg.tie_word_embeddings:
      continue
    name, x = gguf_name(hf, gemma), tensor.detach().float().numpy()
    if name in skip:
      continue
    if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
      x = _permute(x, heads if "attn_q" in name else kv)
    if gemma and name.endswith("norm.weight"):
      x = x + 1.0
    data, qtype = _encode(x, next(weights) if x.ndim == 2 else "F32")
    w.add_tensor(name, data, raw_dtype=qtype)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def _add_vocab(w, vocab_size: int):
  """A byte-level vocabulary: the bytes (ids 0..255), SPECIALS (control,
  ids 256..), one merged token, and unused control tokens up to ``vocab_size``."""
  from rlpt.models.hf_fixtures import bytes_to_unicode
  spelling = bytes_to_unicode()
  tokens = [spelling[b] for b in range(256)] + list(SPECIALS) + ["Ġt"]
  types = [1] * 256 + [3] * len(SPECIALS) + [1]
  tokens += [f"<unused{i}>" for i in range(vocab_size - len(tokens))]
  types += [3] * (vocab_size - len(types))
  w.add_tokenizer_model("gpt2")
  w.add_tokenizer_pre("gpt2")
  w.add_token_list(tokens)
  w.add_token_types(types)
  w.add_token_merges(["Ġ t"])  # " t" is one token (MERGED_ID), the rest one per byte
  w.add_bos_token_id(257)
  w.add_eos_token_id(258)
  w.add_pad_token_id(256)
  w.add_add_bos_token(False)
