"""rlpt's own default model (byte tokenizer, tied head scaled by d_model**-0.5)
exports to a Hugging Face checkpoint that transformers loads as it is, model
and tokenizer, with rlpt's logits; rlpt reads the export back."""

import os
import sys

import jax
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, os.path.dirname(__file__))
from hf_testlib import hf_logits  # noqa: E402

from rlpt.models import ModelConfig, Transformer  # noqa: E402
from rlpt.models.hf import load_hf_checkpoint, save_hf_checkpoint  # noqa: E402
from rlpt.steps import forward_logits  # noqa: E402
from rlpt.tokenizers.byte import ByteTokenizer  # noqa: E402


def test_default_model_and_byte_tokenizer_load_in_transformers(tmp_path):
  from transformers import AutoModelForCausalLM, AutoTokenizer
  cfg = ModelConfig()  # rlpt's default: tied head, scaled
  assert cfg.tie_embeddings and cfg.scale_tied_head
  graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(0)))
  tok = ByteTokenizer()
  out = save_hf_checkpoint(str(tmp_path / "hf"), params, cfg, tokenizer=tok)

  hf_tok = AutoTokenizer.from_pretrained(out)
  texts = ["Reverse: hello", "héllo wörld ✓ 日本", "a\tb\n c  ", ""]
  for text in texts:
    ids = hf_tok(text)["input_ids"]
    assert ids == [tok.bos_id] + tok.encode(text)  # as rlpt tokenizes a prompt
    assert hf_tok.decode(ids, skip_special_tokens=True) == text
  assert (hf_tok.pad_token_id, hf_tok.bos_token_id, hf_tok.eos_token_id) == (256, 257, 258)

  model = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
  assert model.config.eos_token_id == tok.eos_id
  tokens = np.array([[tok.bos_id] + tok.encode("Sort: dcba -> abcd")], np.int64)
  ref = np.asarray(forward_logits(graphdef, params, jax.numpy.asarray(tokens)))
  np.testing.assert_allclose(hf_logits(model, tokens), ref, atol=1e-5, rtol=0)

  # rlpt reads its export back: the untied equivalent, the same logits.
  cfg2, graphdef2, params2 = load_hf_checkpoint(out)
  assert not cfg2.tie_embeddings and not cfg2.scale_tied_head
  np.testing.assert_allclose(np.asarray(forward_logits(graphdef2, params2, tokens)), ref,
                             atol=1e-5, rtol=0)
