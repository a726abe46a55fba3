"""Tokenizers of imported checkpoints: Hugging Face ``tokenizers`` (tokenizer.json)
and SentencePiece (tokenizer.model), both behind rlpt's ``Tokenizer`` protocol.

Special ids come from the checkpoint directory: ``tokenizer_config.json``
(``bos_token`` / ``eos_token`` / ``pad_token``, as strings or
``{"content": ...}``), then ``generation_config.json`` and ``config.json``
(``*_token_id``). A missing pad falls back to EOS (padding is masked anyway).
The Jinja chat template (``chat_template``, None if none) is the directory's
chat_template.jinja, else tokenizer_config.json's ``chat_template``, as
transformers reads them; rlpt.tokenizers.chat lays prompts out by it.

``encode`` never adds BOS/EOS; special-token *text* inside ``text`` is parsed
as the special token by tokenizers (added tokens) and by SentencePiece only
for user-defined symbols, so chat templates (rlpt.tokenizers.chat) insert
special tokens by id, never by text.
"""

from __future__ import annotations

import json
import os
from typing import Any


def _read_json(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def _token_text(x: Any) -> str | None:
  if isinstance(x, dict):
    return x.get("content")
  return x


def _first_id(x: Any) -> int | None:
  if isinstance(x, list):
    return int(x[0]) if x else None
  return None if x is None else int(x)


def read_chat_template(directory: str | None) -> str | None:
  """The Jinja chat template of a checkpoint directory, or None. A list of
  named templates (older tokenizer_config.json files) gives its "default"."""
  if not directory:
    return None
  path = os.path.join(directory, "chat_template.jinja")
  if os.path.exists(path):
    with open(path) as f:
      return f.read()
  template = _read_json(os.path.join(directory, "tokenizer_config.json")).get("chat_template")
  if isinstance(template, list):
    template = {t.get("name"): t.get("template") for t in template}.get("default")
  return template or None


class _SpecialIds:
  """Resolves bos/eos/pad ids of a checkpoint directory with a token->id lookup."""

  def __init__(self, directory: str | None, token_to_id, bos: int | None, eos: int | None,
               pad: int | None):
    tc = _read_json(os.path.join(directory, "tokenizer_config.json")) if directory else {}
    gc = _read_json(os.path.join(directory, "generation_config.json")) if directory else {}
    mc = _read_json(os.path.join(directory, "config.json")) if directory else {}

    def resolve(name: str, given: int | None) -> int | None:
      if given is not None:
        return given
      text = _token_text(tc.get(f"{name}_token"))
      if text is not None and token_to_id(text) is not None:
        return token_to_id(text)
      for src in (gc, mc):
        if src.get(f"{name}_token_id") is not None:
          return _first_id(src[f"{name}_token_id"])
      return None

    self.bos = resolve("bos", bos)
    self.eos = resolve("eos", eos)
    self.pad = resolve("pad", pad)


class HFTokenizer:
  """A ``tokenizers`` tokenizer.json with the rlpt Tokenizer interface.

  Args:
    path: a tokenizer.json file or a directory holding one.
    bos_id / eos_id / pad_id: override the ids read from the directory.
  """

  def __init__(self, path: str, bos_id: int | None = None, eos_id: int | None = None,
               pad_id: int | None = None):
    from tokenizers import Tokenizer as _Tok
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.exists(file):
      raise FileNotFoundError(f"No tokenizer.json at '{file}'.")
    tok = _Tok.from_file(file)
    ids = _SpecialIds(directory, tok.token_to_id, bos_id, eos_id, pad_id)
    if ids.eos is None:
      raise ValueError(f"'{directory}': no EOS token found in tokenizer_config.json, "
                       "generation_config.json or config.json; pass eos_id.")
    self._set(tok, ids.bos, ids.eos, ids.pad)
    self.chat_template = read_chat_template(directory)

  def _set(self, tok, bos: int | None, eos: int, pad: int | None):
    """Takes a ``tokenizers.Tokenizer`` and its special ids (also for
    rlpt.tokenizers.gguf, whose tokenizer comes from a GGUF file's metadata)."""
    self._tok = tok
    self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
    # Llama 3 / Qwen tokenizers may define no BOS: conversations then start bare.
    self.eos_id = eos
    self.bos_id = bos if bos is not None else eos
    self.has_bos = bos is not None
    self.pad_id = pad if pad is not None else eos
    self._special = {self.bos_id, self.eos_id, self.pad_id}

  def token_id(self, token: str) -> int:
    """Id of a (special) token's text; raises naming it if the vocabulary lacks it."""
    i = self._tok.token_to_id(token)
    if i is None:
      raise KeyError(f"token '{token}' is not in this tokenizer's vocabulary.")
    return i

  def token_text(self, i: int) -> str:
    """The vocabulary's text of token ``i`` (a special token's as written in a
    chat template; Jinja templates' ``bos_token`` / ``eos_token``)."""
    return self._tok.id_to_token(int(i))

  def encode(self, text: str) -> list[int]:
    return self._tok.encode(text, add_special_tokens=False).ids

  def decode(self, ids, skip_special: bool = True) -> str:
    ids = [int(i) for i in ids if 0 <= int(i) < self.vocab_size]
    return self._tok.decode(ids, skip_special_tokens=skip_special)


class SentencePieceTokenizer:
  """A SentencePiece tokenizer.model with the rlpt Tokenizer interface.

  SentencePiece adds a dummy-prefix space to every ``encode`` call when the
  model was trained with ``add_dummy_prefix`` (Llama 2 style); Gemma's model
  has it off, which makes turn-by-turn encoding exact.
  """

  def __init__(self, path: str, bos_id: int | None = None, eos_id: int | None = None,
               pad_id: int | None = None):
    import sentencepiece as spm
    directory = path if os.path.isdir(path) else os.path.dirname(path)
    file = os.path.join(path, "tokenizer.model") if os.path.isdir(path) else path
    if not os.path.exists(file):
      raise FileNotFoundError(f"No tokenizer.model at '{file}'.")
    self._sp = spm.SentencePieceProcessor(model_file=file)
    self.vocab_size = self._sp.get_piece_size()

    def lookup(token: str) -> int | None:
      i = self._sp.piece_to_id(token)
      return None if i == self._sp.unk_id() and token != self._sp.id_to_piece(i) else i

    own = lambda i: None if i < 0 else i
    ids = _SpecialIds(directory, lookup, bos_id if bos_id is not None else own(self._sp.bos_id()),
                      eos_id if eos_id is not None else own(self._sp.eos_id()),
                      pad_id if pad_id is not None else own(self._sp.pad_id()))
    if ids.eos is None:
      raise ValueError(f"'{file}' defines no EOS piece; pass eos_id.")
    self.eos_id = ids.eos
    self.bos_id = ids.bos if ids.bos is not None else ids.eos
    self.has_bos = ids.bos is not None
    self.pad_id = ids.pad if ids.pad is not None else ids.eos
    self._lookup = lookup
    self.chat_template = read_chat_template(directory)

  def token_id(self, token: str) -> int:
    i = self._lookup(token)
    if i is None:
      raise KeyError(f"token '{token}' is not in this tokenizer's vocabulary.")
    return i

  def token_text(self, i: int) -> str:
    """The vocabulary's piece of token ``i`` (see HFTokenizer.token_text)."""
    return self._sp.id_to_piece(int(i))

  def encode(self, text: str) -> list[int]:
    return list(self._sp.encode(text, out_type=int))

  def decode(self, ids, skip_special: bool = True) -> str:
    ids = [int(i) for i in ids if 0 <= int(i) < self.vocab_size]
    if skip_special:
      ids = [i for i in ids if not (self._sp.is_control(i) or self._sp.is_unknown(i))]
    return self._sp.decode(ids)


def load_tokenizer(directory: str):
  """The tokenizer of a checkpoint directory: tokenizer.json if present, else tokenizer.model."""
  if os.path.exists(os.path.join(directory, "tokenizer.json")):
    return HFTokenizer(directory)
  if os.path.exists(os.path.join(directory, "tokenizer.model")):
    return SentencePieceTokenizer(directory)
  raise FileNotFoundError(f"'{directory}' has neither tokenizer.json nor tokenizer.model.")
