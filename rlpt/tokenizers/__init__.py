"""Tokenizers behind one small interface (`Tokenizer`)."""

from rlpt.tokenizers.base import Tokenizer
from rlpt.tokenizers.byte import ByteTokenizer

__all__ = ["Tokenizer", "ByteTokenizer"]
