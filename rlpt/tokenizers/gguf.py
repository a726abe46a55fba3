"""The tokenizer and chat template of a GGUF file, from its metadata.

A GGUF file carries no tokenizer.json: its vocabulary, merges, token types,
special ids and Jinja chat template are metadata keys (``tokenizer.*``).
``GGUFTokenizer`` builds the equivalent Hugging Face ``tokenizers`` pipeline
from them and is an ``HFTokenizer`` from there on (encode, decode, token_id,
special ids). Two kinds of vocabulary are read:

- ``gpt2``, byte-level BPE (SmolLM2, Qwen): the stored vocabulary and merges,
  text split first as llama.cpp splits it for ``tokenizer.ggml.pre`` (SmolLM2's
  ``smollm``: digits one by one, then GPT-2's regex, as its tokenizer.json).
- ``llama``, SentencePiece BPE, on Gemma 3: no merges are stored, so they are
  rebuilt from the vocabulary ranked by each token's position in it (Gemma's
  scores do not follow its merge order), spaces as U+2581, bytes as <0xNN>
  fallback tokens. This is how transformers' GGUF loader rebuilds them too.

Control tokens (type 3) are special added tokens, user-defined ones (type 4,
Gemma's runs of newlines) plain added tokens: both are matched whole.

``chat_template`` is the file's Jinja template (``tokenizer.chat_template``;
SmolLM2-Instruct's is ChatML, Gemma 3 base has none), which
rlpt.tokenizers.chat lays prompts out by. ``save_pretrained`` writes
tokenizer.json and tokenizer_config.json (with the Jinja template) for an
export that transformers loads.
"""

from __future__ import annotations

import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors

from rlpt.models.gguf import DEFAULT_CACHE, read_gguf, resolve_gguf
from rlpt.tokenizers.hf import HFTokenizer

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _split(regex: str) -> list:
  return [pre_tokenizers.Split(Regex(regex), behavior="isolated"),
          pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]


# tokenizer.ggml.pre -> pre-tokenizers of a byte-level vocabulary (llama.cpp's splits).
PRE_TOKENIZERS = {
    "gpt2": lambda: [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)],
    "smollm": lambda: [pre_tokenizers.Digits(individual_digits=True),
                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)],
    "qwen2": lambda: _split(_QWEN2_SPLIT),
    "llama-bpe": lambda: _split(_LLAMA3_SPLIT),
    "llama3": lambda: _split(_LLAMA3_SPLIT),
}
_CONTROL, _USER_DEFINED = 3, 4


def _byte_level(meta: dict, path: str) -> Tokenizer:
  pre = meta.get("tokenizer.ggml.pre", "gpt2")
  if pre not in PRE_TOKENIZERS:
    raise ValueError(f"'{path}': tokenizer.ggml.pre '{pre}' is not supported; rlpt splits text "
                     f"for {sorted(PRE_TOKENIZERS)}.")
  vocab = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
  merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
  tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False))
  tok.pre_tokenizer = pre_tokenizers.Sequence(PRE_TOKENIZERS[pre]())
  tok.decoder = decoders.ByteLevel()
  return tok


def _sentencepiece(meta: dict, path: str) -> Tokenizer:
  """Gemma's vocabulary as BPE: a token of spaces is stored as spaces, looked
  up as U+2581s; merges ranked by the merged token's position, then by the
  lengths of its halves (each token's splits in vocabulary order)."""
  tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t
            for t in meta["tokenizer.ggml.tokens"]]
  vocab = {t: i for i, t in enumerate(tokens)}
  rank = {t: -i for i, t in enumerate(tokens)}
  found = []
  for piece, score in rank.items():
    local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
             if piece[:k] in vocab and piece[k:] in vocab]
    local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
    found += [(a, b, score) for a, b in local]
  found.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
  unk = tokens[int(meta.get("tokenizer.ggml.unknown_token_id", 0))]
  tok = Tokenizer(models.BPE(vocab, [(a, b) for a, b, _ in found], unk_token=unk, fuse_unk=True,
                             byte_fallback=True))
  space = [normalizers.Prepend("\u2581")] if meta.get("tokenizer.ggml.add_space_prefix") else []
  tok.normalizer = normalizers.Sequence([*space, normalizers.Replace(" ", "\u2581")])
  tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                   decoders.Fuse()])
  return tok


def build_tokenizer(meta: dict, path: str = "GGUF file") -> Tokenizer:
  """A ``tokenizers.Tokenizer`` from a GGUF file's metadata (see the module doc)."""
  kind, arch = meta.get("tokenizer.ggml.model"), meta.get("general.architecture")
  if kind == "gpt2":
    tok = _byte_level(meta, path)
  elif kind == "llama" and str(arch).startswith("gemma"):
    tok = _sentencepiece(meta, path)
  else:
    raise ValueError(f"'{path}': tokenizer.ggml.model '{kind}' on architecture '{arch}' is not "
                     "supported; rlpt reads 'gpt2' (byte-level BPE) and Gemma's 'llama' "
                     "(SentencePiece BPE).")
  tokens, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type", ())
  # A control token outside the byte alphabet is a llama.cpp mislabel, and a
  # user-defined token of spaces was respelled: adding either would grow the
  # vocabulary past the embedding's rows.
  alphabet = set(pre_tokenizers.ByteLevel.alphabet()) if kind == "gpt2" else None
  vocab, control, user = tok.get_vocab(), [], []
  for token, kind_of in zip(tokens, types):
    if kind_of == _CONTROL and (alphabet is None or set(token) <= alphabet):
      control.append(AddedToken(token, normalized=False, special=True))
    elif kind_of == _USER_DEFINED and token in vocab:
      user.append(AddedToken(token, normalized=False, special=False))
  tok.add_special_tokens(control)
  tok.add_tokens(user)
  return tok


class GGUFTokenizer(HFTokenizer):
  """The tokenizer of a GGUF file given by name (rlpt.models.gguf.GGUF_MODELS)
  or path. ``has_bos``: the file asks for BOS before a text
  (``tokenizer.ggml.add_bos_token``; SentencePiece files default to yes, as
  llama.cpp does). ``chat_template``: the file's Jinja template or None."""

  def __init__(self, model: str, cache_dir: str = DEFAULT_CACHE):
    gguf = read_gguf(resolve_gguf(model, cache_dir))
    meta = gguf.metadata
    if "tokenizer.ggml.eos_token_id" not in meta:
      raise ValueError(f"'{gguf.path}' has no tokenizer.ggml.eos_token_id.")
    ids = {k: int(meta[f"tokenizer.ggml.{k}_token_id"]) if f"tokenizer.ggml.{k}_token_id" in meta
           else None for k in ("bos", "eos", "padding")}
    self._set(build_tokenizer(meta, gguf.path), ids["bos"], ids["eos"], ids["padding"])
    self.has_bos = bool(meta.get("tokenizer.ggml.add_bos_token",
                                 meta.get("tokenizer.ggml.model") == "llama"))
    self.chat_template = meta.get("tokenizer.chat_template") or None
    self._tokens = meta["tokenizer.ggml.tokens"]
    if self.has_bos:  # transformers then adds BOS to a text, as the file asks
      bos = (self._tokens[self.bos_id], self.bos_id)
      self._tok.post_processor = processors.TemplateProcessing(
          single=f"{bos[0]} $A", pair=f"{bos[0]} $A $B", special_tokens=[bos])

  def save_pretrained(self, directory: str) -> None:
    """tokenizer.json + tokenizer_config.json (special tokens, chat template)."""
    os.makedirs(directory, exist_ok=True)
    self._tok.save(os.path.join(directory, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast",
              "bos_token": self._tokens[self.bos_id], "eos_token": self._tokens[self.eos_id],
              "pad_token": self._tokens[self.pad_id], "add_bos_token": self.has_bos}
    if self.chat_template:
      config["chat_template"] = self.chat_template
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
      json.dump(config, f, indent=2)
