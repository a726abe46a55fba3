"""Byte-level tokenizer: UTF-8 bytes are ids 0..255, then PAD, BOS, EOS."""

from __future__ import annotations

import dataclasses


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
