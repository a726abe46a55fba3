"""A tiny random Llama checkpoint in Hugging Face format, made locally.

CI has no real checkpoint and no network, so the HF import path is exercised
on this: ``make_tiny_llama(directory)`` writes ``config.json``,
``model.safetensors`` (through rlpt's own exporter: numpy only, no torch), a
byte-level ``tokenizer.json`` and ``tokenizer_config.json``. The tokenizer's
ids 0..255 are the UTF-8 bytes and 256/257/258 are <pad>/<bos>/<eos>, the same
ids as rlpt's ByteTokenizer, so the byte-level pipeline and the environments'
prompts work unchanged. transformers loads the directory as a LlamaForCausalLM
and a PreTrainedTokenizerFast (tests/models/test_hf_fixtures.py).

    python -m rlpt.models.hf_fixtures /tmp/tiny-llama
"""

from __future__ import annotations

import json
import os
import shutil
import sys

from flax import nnx

from rlpt.config.model import ModelConfig
from rlpt.models.hf import save_hf_checkpoint
from rlpt.models.transformer import Transformer

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


def tiny_llama_config(vocab_size: int = 320) -> ModelConfig:
  """Llama 3 layout at toy size; vocab padded past the tokenizer's 259 ids."""
  return ModelConfig(vocab_size=vocab_size, d_model=64, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=16, mlp_dim=128, rope_theta=500_000.0, norm_eps=1e-5,
                     tie_embeddings=False, scale_tied_head=False)


def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's byte -> printable character table used by ByteLevel tokenizers."""
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
      range(ord("®"), ord("ÿ") + 1))
  cs = bs[:]
  n = 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def write_byte_tokenizer(directory: str, extra_special: tuple[str, ...] = ()) -> None:
  """tokenizer.json (byte-level BPE without merges: one token per byte, id = byte)
  plus tokenizer_config.json naming <bos>/<eos>/<pad> (ids 257/258/256)."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers
  vocab = {ch: b for b, ch in bytes_to_unicode().items()}
  tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
  tok.decoder = decoders.ByteLevel()
  tok.add_special_tokens([PAD, BOS, EOS, *extra_special])
  os.makedirs(directory, exist_ok=True)
  tok.save(os.path.join(directory, "tokenizer.json"))
  with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
               "pad_token": PAD, "model_max_length": 2048}, f, indent=2)


def make_tiny_llama(directory: str, seed: int = 0, vocab_size: int = 320) -> str:
  """Writes the tiny checkpoint to ``directory`` (atomically); returns it."""
  directory = os.path.abspath(directory)
  tmp = directory + ".tmp"
  if os.path.exists(tmp):
    shutil.rmtree(tmp)
  cfg = tiny_llama_config(vocab_size)
  _, params = nnx.split(Transformer(cfg, nnx.Rngs(seed)))
  ids = {"bos_token_id": 257, "eos_token_id": 258, "pad_token_id": 256}
  save_hf_checkpoint(tmp, params, cfg, "llama", extra_config=ids)
  with open(os.path.join(tmp, "generation_config.json"), "w") as f:
    json.dump(ids, f, indent=2)
  write_byte_tokenizer(tmp)
  if os.path.exists(directory):
    shutil.rmtree(directory)
  os.replace(tmp, directory)
  return directory


def ensure_tiny_llama(directory: str, seed: int = 0) -> str:
  """``make_tiny_llama`` unless ``directory`` already holds a checkpoint."""
  if not os.path.exists(os.path.join(directory, "config.json")):
    make_tiny_llama(directory, seed)
  return directory


if __name__ == "__main__":
  if len(sys.argv) != 2:
    raise SystemExit("usage: python -m rlpt.models.hf_fixtures DIRECTORY")
  print(make_tiny_llama(sys.argv[1]))
