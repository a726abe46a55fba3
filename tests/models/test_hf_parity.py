"""Hugging Face import/export parity: tiny random models of every family, built
with transformers' own config classes in PyTorch (fp32, eager attention).

For each family: rlpt's logits after import equal transformers' to 1e-4 abs,
the import is sharded on an 8-device mesh by the rules, greedy decoding with
rlpt's Sampler equals ``generate(do_sample=False)`` token for token, and an
export loads back into transformers with the same logits.
"""

import json
import sys
import os

import jax
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, os.path.dirname(__file__))
from hf_testlib import hf_logits, make_hf_model  # noqa: E402

from rlpt.models.hf import (config_from_hf, family_of, load_hf_checkpoint,  # noqa: E402
                            read_hf_config, save_hf_checkpoint)
from rlpt.sampling import Sampler, SamplingParams  # noqa: E402
from rlpt.sharding import DEFAULT_RULES, make_mesh, state_shardings  # noqa: E402
from rlpt.steps import forward_logits  # noqa: E402

FAMILIES = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
TOL = 1e-4  # fp32, max abs logit difference
# Filled by the tests; printed at the end of the module (pytest -s) for the README.
PARITY: dict[str, float] = {}


@pytest.fixture(scope="module")
def mesh():
  return make_mesh({"data": 2, "fsdp": 2, "tensor": 2})


@pytest.fixture(scope="module", params=FAMILIES)
def imported(request, tmp_path_factory, mesh):
  family = request.param
  d = str(tmp_path_factory.mktemp(family))
  model = make_hf_model(family, d)
  cfg, graphdef, params = load_hf_checkpoint(d, mesh, DEFAULT_RULES)
  return family, d, model, cfg, graphdef, params


def test_config_maps_family_switches(imported):
  family, d, _, cfg, _, _ = imported
  assert family_of(cfg) == family
  assert config_from_hf(read_hf_config(d))[0] == cfg
  gemma = family.startswith("gemma")
  assert cfg.embed_scale == cfg.post_norms == gemma and cfg.norm_offset == (1.0 if gemma else 0.0)
  assert cfg.qkv_bias == (family == "qwen2")
  assert cfg.qk_norm == (family in ("qwen3", "gemma3"))
  assert not cfg.scale_tied_head
  if gemma:
    assert cfg.layer_windows == (4, 0)


def test_import_is_sharded_by_the_rules(imported, mesh):
  *_, params = imported
  want = jax.tree.leaves(state_shardings(params, mesh, DEFAULT_RULES))
  arrays = jax.tree.leaves(params)
  assert len(arrays) == len(want)
  for x, w in zip(arrays, want):
    assert x.sharding.is_equivalent_to(w, x.ndim), (x.shape, x.sharding, w)
  wq = params["decoder"]["blocks"][0]["attn"]["wq"].get_value()
  assert len(wq.addressable_shards) == 8
  assert wq.addressable_shards[0].data.shape == (32, 2, wq.shape[2])  # embed/fsdp, heads/tensor


def test_logits_match_transformers(imported):
  family, _, model, _, graphdef, params = imported
  tokens = np.random.default_rng(1).integers(0, 256, (2, 12))
  ref = hf_logits(model, tokens)
  out = np.asarray(forward_logits(graphdef, params, tokens))
  diff = float(np.abs(out - ref).max())
  PARITY[family] = diff
  print(f"\nHF parity {family}: max |logit diff| = {diff:.2e} (max |logit| {np.abs(ref).max():.1f})")
  assert diff < TOL


def test_greedy_generation_matches_transformers(imported):
  import torch
  family, _, model, cfg, graphdef, params = imported
  prompts = np.array([[1, 17, 99, 5, 42], [1, 200, 3, 0, 0]])
  lengths = np.array([5, 3])
  new = 8
  sampler = Sampler(graphdef, cfg, max_prompt_len=5, max_new_tokens=new, pad_id=0, stop_ids=())
  out = sampler.generate(params, prompts, lengths, jax.random.key(0), SamplingParams(0.0))
  ours = np.asarray(out.tokens)
  for b in range(2):
    ids = torch.as_tensor(prompts[b:b + 1, :lengths[b]])
    with torch.no_grad():
      ref = model.generate(ids, max_new_tokens=new, do_sample=False,
                           attention_mask=torch.ones_like(ids))[0, lengths[b]:].numpy()
    np.testing.assert_array_equal(ours[b], ref, err_msg=f"{family} row {b}")


def test_export_round_trips_through_transformers(imported, tmp_path):
  from transformers import AutoModelForCausalLM
  family, d, model, cfg, _, params = imported
  out_dir = save_hf_checkpoint(str(tmp_path / "export"), params, cfg, tokenizer_from=d)
  with open(os.path.join(out_dir, "config.json")) as f:
    assert json.load(f)["model_type"] in (family, "gemma3_text")
  back = AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager").eval()
  tokens = np.random.default_rng(2).integers(0, 256, (2, 12))
  np.testing.assert_allclose(hf_logits(back, tokens), hf_logits(model, tokens), atol=1e-5)
  # And rlpt reads its own export back to the same config.
  assert load_hf_checkpoint(out_dir)[0] == cfg


def test_bf16_export_loads(imported, tmp_path):
  import torch
  from transformers import AutoModelForCausalLM
  family, _, model, cfg, graphdef, params = imported
  out_dir = save_hf_checkpoint(str(tmp_path / "bf16"), params, cfg, dtype="bfloat16")
  back = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.bfloat16)
  w = back.model.layers[0].self_attn.q_proj.weight
  assert w.dtype == torch.bfloat16
  np.testing.assert_allclose(w.float().detach().numpy(),
                             model.model.layers[0].self_attn.q_proj.weight.detach().numpy(),
                             rtol=1e-2, atol=1e-2)
  # rlpt reads bf16 safetensors (numpy cannot) through its memory map.
  _, _, p16 = load_hf_checkpoint(out_dir)
  tokens = np.random.default_rng(3).integers(0, 256, (1, 8))
  np.testing.assert_allclose(np.asarray(forward_logits(graphdef, p16, tokens)),
                             hf_logits(back.float(), tokens), atol=1e-4)
