"""The tiny Llama fixture (used by experiments/grpo_hf_import.py:smoke) is a real
Hugging Face checkpoint: transformers loads it and agrees with rlpt."""

import os
import sys

import numpy as np
import pytest

from rlpt.config import BaseModelConfig
from rlpt.models.hf_fixtures import make_tiny_llama, tiny_llama_config
from rlpt.bases import resolve_base, resolve_tokenizer
from rlpt.sharding import DEFAULT_RULES, make_mesh
from rlpt.steps import forward_logits
from rlpt.tokenizers import ByteTokenizer


def test_tiny_llama_loads_in_rlpt_and_transformers(tmp_path):
  path = make_tiny_llama(str(tmp_path / "tiny"))
  base = BaseModelConfig(hf_checkpoint=path)
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
  cfg, graphdef, params, where = resolve_base(base, mesh=mesh, rules=DEFAULT_RULES)
  assert where == path and cfg == tiny_llama_config()
  assert tuple(params["lm_head"].get_value().sharding.spec) == ("fsdp", "tensor")
  tok = resolve_tokenizer(base)
  ref = ByteTokenizer()
  assert (tok.pad_id, tok.bos_id, tok.eos_id) == (ref.pad_id, ref.bos_id, ref.eos_id)
  ids = [tok.bos_id] + tok.encode("Sort: 3 1 2")
  assert ids[1:] == ref.encode("Sort: 3 1 2")

  pytest.importorskip("torch")
  import torch
  sys.path.insert(0, os.path.dirname(__file__))
  from hf_testlib import hf_logits  # noqa: E402 (also quiets transformers' logging)
  from transformers import AutoModelForCausalLM, AutoTokenizer
  model = AutoModelForCausalLM.from_pretrained(path).float().eval()
  hf_tok = AutoTokenizer.from_pretrained(path)
  assert hf_tok("Sort: 3 1 2", add_special_tokens=False)["input_ids"] == ids[1:]
  assert (hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.pad_token_id) == (257, 258, 256)
  tokens = np.array([ids])
  np.testing.assert_allclose(np.asarray(forward_logits(graphdef, params, tokens)),
                             hf_logits(model, tokens), atol=1e-4)
  del torch
