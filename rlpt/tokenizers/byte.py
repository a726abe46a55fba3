"""Byte-level tokenizer: UTF-8 bytes are ids 0..255, then PAD, BOS, EOS."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import ClassVar


@dataclasses.dataclass(frozen=True)
class ByteTokenizer:
  """Hermetic tokenizer for the built-in tiny models; needs no download."""

  pad_id: int = 256
  bos_id: int = 257
  eos_id: int = 258
  vocab_size: int = 259

  def encode(self, text: str) -> list[int]:
    # surrogatepass keeps lone surrogates (malformed model output) encodable.
    return list(text.encode("utf-8", errors="surrogatepass"))

  def decode(self, ids) -> str:
    data = bytes(int(i) for i in ids if 0 <= int(i) < 256)
    return data.decode("utf-8", errors="replace")

  # The built-in bases are prompted with bare text (rlpt.tokenizers.prompts.PromptFormat).
  chat_template: ClassVar[str | None] = None

  # Hugging Face names of the special ids.
  SPECIAL: ClassVar[dict[str, str]] = {"pad": "<pad>", "bos": "<s>", "eos": "</s>"}

  def save_pretrained(self, directory: str) -> list[str]:
    """Writes ``tokenizer.json``, ``tokenizer_config.json`` and
    ``special_tokens_map.json``: the same ids for transformers, TRL and vLLM
    (``AutoTokenizer.from_pretrained``). A byte-level BPE with no merges: each
    byte is one token (GPT-2's byte-to-character table), PAD/BOS/EOS are added
    special tokens, and encoding prepends BOS, as rlpt's prompts do. Returns
    the paths written."""
    os.makedirs(directory, exist_ok=True)
    names = {self.pad_id: self.SPECIAL["pad"], self.bos_id: self.SPECIAL["bos"],
             self.eos_id: self.SPECIAL["eos"]}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    bos = self.SPECIAL["bos"]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, t in sorted(names.items())],
        "normalizer": None, "pre_tokenizer": byte_level,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [self.bos_id], "tokens": [bos]}}},
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {c: b for b, c in enumerate(_byte_chars())}, "merges": []},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos,
              "eos_token": self.SPECIAL["eos"], "pad_token": self.SPECIAL["pad"],
              "add_bos_token": True, "clean_up_tokenization_spaces": False,
              "model_max_length": 1 << 20}
    special = {"bos_token": bos, "eos_token": self.SPECIAL["eos"],
               "pad_token": self.SPECIAL["pad"]}
    paths = []
    for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config),
                      ("special_tokens_map.json", special)):
      paths.append(os.path.join(directory, name))
      with open(paths[-1], "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
    return paths


def _byte_chars() -> list[str]:
  """The printable character standing for each byte 0..255 in byte-level BPE
  vocabularies (GPT-2's table: printable Latin-1 bytes stand for themselves,
  the others for the code points from 256 on, in byte order)."""
  keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
  chars, extra = {}, 0
  for b in range(256):
    if b in keep:
      chars[b] = chr(b)
    else:
      chars[b] = chr(256 + extra)
      extra += 1
  return [chars[b] for b in range(256)]
