"""Hugging Face checkpoints in and out: Llama 3, Qwen2/Qwen3, Gemma 2/3.

Import (``load_hf_checkpoint``) reads ``config.json`` into a ``ModelConfig``
and the safetensors weights (one file or an ``index.json`` shard set) with the
``safetensors`` numpy API -- no torch at load time -- straight onto the mesh:
every parameter is built with ``jax.make_array_from_callback`` and its target
``NamedSharding`` from ``rlpt.sharding.state_shardings``, and the callback
reads from disk only the block of the Hugging Face tensor that its shard
needs (a row/column range, via safetensors' lazy ``get_slice``). So no device,
and no host buffer, ever holds more than one shard of one tensor at a time;
the host pays only for the shards of its own devices. bf16 tensors, which
numpy cannot name, are read through a read-only memory map of the same file
(the format is an 8-byte header length, a JSON header, raw little-endian
data), still one shard block at a time.

Parameters are converted to fp32 (``param_dtype``) as rlpt keeps them; the
activation dtype is ``dtype``.

Export (``save_hf_checkpoint``) writes ``config.json`` + ``model.safetensors``
that ``transformers.AutoModelForCausalLM.from_pretrained`` loads, plus the
tokenizer files of a source directory when given.

The ``config.json`` <-> ``ModelConfig`` mapping both use (``config_from_hf``,
``config_to_hf``, ``family_of``, ``read_hf_config``) is rlpt.models.hf_config's,
re-exported here.

Layouts: Hugging Face ``nn.Linear`` weights are [out, in]; rlpt keeps
[in, out] with heads split out (wq [D, N, H], wo [N, H, D]). Each parameter
is described by a ``_Spec``: the HF name, how each HF dimension splits (the
q_proj rows split as (N, H)) and the permutation of the split dims that gives
the rlpt layout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
from typing import Any

import jax
import ml_dtypes
import numpy as np
from flax import nnx

from rlpt.config.model import ModelConfig
from rlpt.models.hf_config import (
    FAMILIES,
    MODEL_TYPES,
    UnsupportedCheckpointError,
    config_from_hf,
    config_to_hf,
    family_of,
    read_hf_config,
)
from rlpt.models.transformer import Transformer
from rlpt.sharding import DEFAULT_RULES, Rules, state_shardings

__all__ = [
    "FAMILIES",
    "MODEL_TYPES",
    "TOKENIZER_FILES",
    "UnsupportedCheckpointError",
    "read_hf_config",
    "config_from_hf",
    "family_of",
    "config_to_hf",
    "SafetensorsReader",
    "load_hf_checkpoint",
    "load_hf_weights",
    "hf_state_dict",
    "write_safetensors",
    "save_hf_checkpoint",
    "untie_scaled_head",
]

# Files of a checkpoint directory that describe its tokenizer and generation.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model",
                   "special_tokens_map.json", "generation_config.json", "chat_template.jinja")


# ----------------------------------------------------------------------------
# Parameter name and layout mapping.


@dataclasses.dataclass(frozen=True)
class _Spec:
  """rlpt parameter = transpose(hf.reshape(flattened split), perm).

  split: per HF dimension, the sizes it splits into (rows of q_proj: (N, H)).
  perm: rlpt dimension i is flattened split dimension perm[i].
  """

  name: str
  split: tuple[tuple[int, ...], ...]
  perm: tuple[int, ...]


def _param_specs(cfg: ModelConfig, family: str, prefix: str = "model.",
                 head: str = "lm_head.weight") -> dict[tuple, _Spec]:
  d, n, k, h, f, v = (cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim,
                      cfg.vocab_size)
  gemma = family.startswith("gemma")
  vec = lambda name, size: _Spec(name, ((size,),), (0,))
  specs = {
      ("decoder", "embed"): _Spec(prefix + "embed_tokens.weight", ((v,), (d,)), (0, 1)),
      ("decoder", "final_norm", "scale"): vec(prefix + "norm.weight", d),
  }
  if not cfg.tie_embeddings:
    specs[("lm_head",)] = _Spec(head, ((v,), (d,)), (1, 0))
  for i in range(cfg.num_layers):
    p, b = f"{prefix}layers.{i}.", ("decoder", "blocks", i)
    specs[b + ("attn", "wq")] = _Spec(p + "self_attn.q_proj.weight", ((n, h), (d,)), (2, 0, 1))
    specs[b + ("attn", "wk")] = _Spec(p + "self_attn.k_proj.weight", ((k, h), (d,)), (2, 0, 1))
    specs[b + ("attn", "wv")] = _Spec(p + "self_attn.v_proj.weight", ((k, h), (d,)), (2, 0, 1))
    specs[b + ("attn", "wo")] = _Spec(p + "self_attn.o_proj.weight", ((d,), (n, h)), (1, 2, 0))
    if cfg.qkv_bias:
      specs[b + ("attn", "bq")] = _Spec(p + "self_attn.q_proj.bias", ((n, h),), (0, 1))
      specs[b + ("attn", "bk")] = _Spec(p + "self_attn.k_proj.bias", ((k, h),), (0, 1))
      specs[b + ("attn", "bv")] = _Spec(p + "self_attn.v_proj.bias", ((k, h),), (0, 1))
    if cfg.qk_norm:
      specs[b + ("attn", "q_norm", "scale")] = vec(p + "self_attn.q_norm.weight", h)
      specs[b + ("attn", "k_norm", "scale")] = vec(p + "self_attn.k_norm.weight", h)
    specs[b + ("mlp", "w_gate")] = _Spec(p + "mlp.gate_proj.weight", ((f,), (d,)), (1, 0))
    specs[b + ("mlp", "w_up")] = _Spec(p + "mlp.up_proj.weight", ((f,), (d,)), (1, 0))
    specs[b + ("mlp", "w_down")] = _Spec(p + "mlp.down_proj.weight", ((d,), (f,)), (1, 0))
    specs[b + ("attn_norm", "scale")] = vec(p + "input_layernorm.weight", d)
    if gemma:
      specs[b + ("attn_post_norm", "scale")] = vec(p + "post_attention_layernorm.weight", d)
      specs[b + ("mlp_norm", "scale")] = vec(p + "pre_feedforward_layernorm.weight", d)
      specs[b + ("mlp_post_norm", "scale")] = vec(p + "post_feedforward_layernorm.weight", d)
    else:
      specs[b + ("mlp_norm", "scale")] = vec(p + "post_attention_layernorm.weight", d)
  return specs


def _path_key(path) -> tuple:
  return tuple(getattr(p, "key", getattr(p, "idx", getattr(p, "name", None))) for p in path)


# ----------------------------------------------------------------------------
# Reading safetensors lazily.


class SafetensorsReader:
  """Name -> lazily sliced tensors of a checkpoint directory (one or many files)."""

  def __init__(self, directory: str):
    from safetensors import safe_open
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
      with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    else:
      files = sorted(x for x in os.listdir(directory) if x.endswith(".safetensors"))
    if not files:
      raise FileNotFoundError(f"No *.safetensors weights in '{directory}'.")
    self._stack = contextlib.ExitStack()
    self._where: dict[str, Any] = {}
    self._headers: dict[str, tuple[str, dict, int]] = {}
    for name in files:
      path = os.path.join(directory, name)
      handle = self._stack.enter_context(safe_open(path, framework="numpy"))
      for key in handle.keys():
        self._where[key] = (handle, path)

  def __contains__(self, name: str) -> bool:
    return name in self._where

  def keys(self):
    return self._where.keys()

  def shape(self, name: str) -> tuple[int, ...]:
    return tuple(self._where[name][0].get_slice(name).get_shape())

  def read(self, name: str, index: tuple[slice, ...]) -> np.ndarray:
    """The block ``index`` of tensor ``name``; only that block is read from disk."""
    handle, path = self._where[name]
    sl = handle.get_slice(name)
    if sl.get_dtype() != "BF16":
      return sl[index]
    return self._bf16_map(path, name)[index]

  def _bf16_map(self, path: str, name: str) -> np.ndarray:
    # numpy has no bfloat16, so safetensors' numpy API refuses BF16 tensors:
    # map the file read-only and view the tensor's bytes as ml_dtypes.bfloat16.
    if path not in self._headers:
      with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
      self._headers[path] = (path, header, 8 + n)
    _, header, start = self._headers[path]
    meta = header[name]
    lo, hi = meta["data_offsets"]
    raw = np.memmap(path, np.uint8, "r", offset=start + lo, shape=(hi - lo,))
    return raw.view(ml_dtypes.bfloat16).reshape(meta["shape"])

  def close(self):
    self._stack.close()


def _read_block(reader: SafetensorsReader, spec: _Spec, index: tuple, dtype) -> np.ndarray:
  """Reads the part of ``spec``'s HF tensor that rlpt block ``index`` needs."""
  flat = [s for g in spec.split for s in g]
  split_idx = [slice(None)] * len(flat)
  for i, sl in enumerate(index):
    split_idx[spec.perm[i]] = sl
  hf_idx, post, shape, pos = [], [], [], 0
  for group in spec.split:
    ranges = [split_idx[pos + j].indices(group[j])[:2] for j in range(len(group))]
    inner = math.prod(group[1:])
    (a, b), rest = ranges[0], ranges[1:]
    # Contiguous HF rows covering the block; inner split dims are cut afterwards.
    hf_idx.append(slice(a * inner, b * inner))
    shape += [b - a, *group[1:]]
    post += [slice(None)] + [slice(lo, hi) for lo, hi in rest]
    pos += len(group)
  block = np.asarray(reader.read(spec.name, tuple(hf_idx))).reshape(shape)[tuple(post)]
  return np.ascontiguousarray(np.transpose(block, spec.perm)).astype(dtype)


def _prefixes(reader: SafetensorsReader) -> tuple[str, str]:
  for prefix, head in (("model.", "lm_head.weight"),
                       ("model.language_model.", "lm_head.weight"),
                       ("language_model.model.", "language_model.lm_head.weight")):
    if prefix + "embed_tokens.weight" in reader:
      return prefix, head
  raise ValueError("no embed_tokens.weight under a known prefix; keys start "
                   f"{sorted(reader.keys())[:5]}")


def load_hf_checkpoint(directory: str, mesh: jax.sharding.Mesh | None = None,
                       rules: Rules = DEFAULT_RULES, dtype: str = "float32",
                       param_dtype: str = "float32",
                       ) -> tuple[ModelConfig, nnx.GraphDef, nnx.State]:
  """(model config, graphdef, params) of a Hugging Face checkpoint directory.

  With ``mesh`` every parameter is a global array laid out by ``rules``
  (``state_shardings``), each device's shard read from disk by itself; without
  one, every parameter lands on this process's first local device.
  ``dtype`` is the activation dtype, ``param_dtype`` the parameters'.
  """
  hf_config = read_hf_config(directory)
  reader = SafetensorsReader(directory)
  try:
    return load_hf_weights(hf_config, reader, mesh, rules, dtype, param_dtype, directory)
  finally:
    reader.close()


def load_hf_weights(hf_config: dict, reader, mesh: jax.sharding.Mesh | None = None,
                    rules: Rules = DEFAULT_RULES, dtype: str = "float32",
                    param_dtype: str = "float32", source: str = "checkpoint",
                    ) -> tuple[ModelConfig, nnx.GraphDef, nnx.State]:
  """``load_hf_checkpoint`` from a config.json dict and a reader of tensors by
  Hugging Face name and layout (``in``, ``keys``, ``shape``, ``read(name,
  slices)``): a ``SafetensorsReader``, or rlpt.models.gguf's of a GGUF file."""
  model_cfg, family = config_from_hf(hf_config, dtype)
  abstract = nnx.eval_shape(lambda: Transformer(model_cfg, nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  if mesh is not None:
    shardings = state_shardings(state, mesh, rules)
  else:
    one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    shardings = jax.tree.map(lambda _: one, state)
  prefix, head = _prefixes(reader)
  if not model_cfg.tie_embeddings and head not in reader:
    raise ValueError(f"'{source}' has untied embeddings but no '{head}'.")
  specs = _param_specs(model_cfg, family, prefix, head)
  pdt = np.dtype(param_dtype)

  def build(path, var, sh):
    key = _path_key(path)
    spec = specs.get(key)
    if spec is None:
      raise ValueError(f"rlpt parameter {key} has no Hugging Face counterpart.")
    if spec.name not in reader:
      raise ValueError(f"'{source}' has no tensor '{spec.name}' (rlpt parameter {key}).")
    shape = var.get_value().shape
    hf_shape = reader.shape(spec.name)
    want = tuple(math.prod(g) for g in spec.split)
    if hf_shape != want:
      raise ValueError(f"'{spec.name}' has shape {hf_shape}; config.json implies {want}.")
    arr = jax.make_array_from_callback(
        shape, sh.get_value() if isinstance(sh, nnx.Variable) else sh,
        lambda idx: _read_block(reader, spec, idx, pdt))
    return var.replace(arr)

  params = jax.tree_util.tree_map_with_path(
      build, state, shardings, is_leaf=lambda x: isinstance(x, nnx.Variable))
  jax.block_until_ready(jax.tree.leaves(params))
  return model_cfg, graphdef, params


# ----------------------------------------------------------------------------
# Export.


def hf_state_dict(params: nnx.State, cfg: ModelConfig, family: str | None = None,
                  dtype=np.float32) -> dict[str, np.ndarray]:
  """{HF name: array} of an rlpt policy's params (gathered to host one at a time)."""
  family = family or family_of(cfg)
  specs = _param_specs(cfg, family)
  out = {}
  for key, spec in specs.items():
    node = params
    for k in key:
      node = node[k]
    x = np.asarray(jax.device_get(node.get_value() if isinstance(node, nnx.Variable) else node))
    split = np.transpose(x, np.argsort(spec.perm))
    out[spec.name] = np.ascontiguousarray(split.reshape([math.prod(g) for g in spec.split])
                                          ).astype(dtype)
  return out


_ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
              np.dtype(ml_dtypes.bfloat16): "BF16"}


def write_safetensors(path: str, tensors: dict[str, np.ndarray],
                      metadata: dict[str, str] | None = None) -> None:
  """A safetensors file of fp32 / fp16 / bf16 arrays (bf16 needs no torch)."""
  header, offset = {}, 0
  names = sorted(tensors)
  for name in names:
    x = tensors[name]
    header[name] = {"dtype": _ST_DTYPES[x.dtype], "shape": list(x.shape),
                    "data_offsets": [offset, offset + x.nbytes]}
    offset += x.nbytes
  if metadata:
    header["__metadata__"] = metadata
  blob = json.dumps(header, separators=(",", ":")).encode()
  blob += b" " * (-len(blob) % 8)
  with open(path, "wb") as f:
    f.write(len(blob).to_bytes(8, "little"))
    f.write(blob)
    for name in names:
      f.write(np.ascontiguousarray(tensors[name]).tobytes())


def untie_scaled_head(params, cfg: ModelConfig):
  """A tied head scaled by d_model**-0.5 (rlpt's default, ``scale_tied_head``)
  as the equal untied one, which every Hugging Face family has: lm_head =
  embed^T * d_model**-0.5 (the same logits up to fp32 rounding). Other models
  are returned as they are."""
  if not (cfg.tie_embeddings and cfg.scale_tied_head):
    return params, cfg
  embed = params["decoder"]["embed"]
  embed = np.asarray(jax.device_get(embed.get_value() if isinstance(embed, nnx.Variable)
                                    else embed), np.float32)
  head = np.ascontiguousarray(embed.T * np.float32(cfg.d_model ** -0.5))
  return ({**params, "lm_head": head},
          dataclasses.replace(cfg, tie_embeddings=False, scale_tied_head=False))


def save_hf_checkpoint(directory: str, params: nnx.State, cfg: ModelConfig,
                       family: str | None = None, dtype: str = "float32",
                       tokenizer_from: str | None = None, extra_config: dict | None = None,
                       tokenizer: Any = None) -> str:
  """Writes ``config.json`` + ``model.safetensors`` (+ tokenizer files copied from
  ``tokenizer_from``, e.g. the imported base) for transformers. Returns the path.

  ``tokenizer``: one with ``save_pretrained`` (rlpt's ByteTokenizer) writes its
  Hugging Face files instead, and its special ids go into config.json.
  ``dtype``: "float32" or "bfloat16" weights. rlpt's scaled tied head is
  written untied (`untie_scaled_head`), so the export reads back as an
  untied model with the same logits.
  """
  if dtype not in ("float32", "bfloat16"):
    raise ValueError(f"export dtype must be 'float32' or 'bfloat16', got '{dtype}'.")
  params, cfg = untie_scaled_head(params, cfg)
  family = family or family_of(cfg)
  hf_cfg = config_to_hf(cfg, family, dtype, extra_config)
  if tokenizer_from:
    src = read_hf_config(tokenizer_from) if os.path.exists(
        os.path.join(tokenizer_from, "config.json")) else {}
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
      if k in src and k not in hf_cfg:
        hf_cfg[k] = src[k]
  if tokenizer is not None and not tokenizer_from and hasattr(tokenizer, "save_pretrained"):
    hf_cfg.update({"bos_token_id": tokenizer.bos_id, "eos_token_id": tokenizer.eos_id,
                   "pad_token_id": tokenizer.pad_id})
    tokenizer.save_pretrained(directory)
  os.makedirs(directory, exist_ok=True)
  np_dtype = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
  write_safetensors(os.path.join(directory, "model.safetensors"),
                    hf_state_dict(params, cfg, family, np_dtype), {"format": "pt"})
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(hf_cfg, f, indent=2)
  if tokenizer_from:
    for name in TOKENIZER_FILES:
      src = os.path.join(tokenizer_from, name)
      if os.path.exists(src):
        shutil.copyfile(src, os.path.join(directory, name))
  return directory
