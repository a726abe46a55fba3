"""GGUF checkpoints (rlpt/models/gguf.py, rlpt/tokenizers/gguf.py) on tiny
random models of each family, written as GGUF files here the way llama.cpp's
converter writes them (tests/models/gguf_testlib.py): fast, no downloads.

For each family, rlpt's logits (fp32) equal, to 1e-4 abs:
- those of the transformers model the file was written from, on an F32 file
  (the name, layout, q/k permutation and norm-offset mapping is exact), and
- those of transformers' own GGUF loader (``gguf_file=``) on a file mixing
  Q8_0, Q4_0, Q4_1, Q5_0, F16, BF16 and F32 weights;
and a load sharded on an 8-device mesh (each shard dequantising only its
rows) gives the same logits. Then the errors: a wrong name, a missing file or
package, an unsupported architecture, tensor type or tensor, a bad assembly.
"""

import hashlib
import os
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, os.path.dirname(__file__))
from gguf_testlib import MERGED_ID, QUANTISED, make_model, write_gguf  # noqa: E402
from hf_testlib import hf_logits  # noqa: E402

from rlpt.models import gguf as gguf_mod  # noqa: E402
from rlpt.models.gguf import (GGUF_MODELS, PackagedGGUF, UnsupportedCheckpointError,  # noqa: E402
                              hf_config_from_gguf, load_gguf_checkpoint, read_gguf,
                              resolve_gguf)
from rlpt.sharding import DEFAULT_RULES, make_mesh  # noqa: E402
from rlpt.steps import forward_logits  # noqa: E402
from rlpt.tokenizers.chat import template_name  # noqa: E402
from rlpt.tokenizers.gguf import GGUFTokenizer  # noqa: E402

TOL = 1e-4  # fp32, max abs logit difference
ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3"}
TOKENS = np.random.default_rng(1).integers(0, 320, (2, 12))


@pytest.fixture(scope="module", params=sorted(ARCHS))
def tiny(request, tmp_path_factory):
  family = request.param
  d = tmp_path_factory.mktemp(f"gguf-{family}")
  model = make_model(family)
  f32 = write_gguf(str(d / "f32.gguf"), model, ARCHS[family])
  quant = write_gguf(str(d / "quant.gguf"), model, ARCHS[family], QUANTISED)
  return family, model, f32, quant


def test_f32_file_gives_the_models_logits(tiny):
  family, model, f32, _ = tiny
  cfg, graphdef, params = load_gguf_checkpoint(f32)
  assert cfg.vocab_size == 320 and cfg.tie_embeddings == model.config.tie_word_embeddings
  diff = np.abs(np.asarray(forward_logits(graphdef, params, TOKENS)) - hf_logits(model, TOKENS))
  assert diff.max() < TOL, (family, diff.max())


def test_quantised_file_matches_transformers_gguf_loader(tiny):
  import torch
  from transformers import AutoModelForCausalLM
  family, _, _, quant = tiny
  types = {t.type_name for t in read_gguf(quant).tensors.values()}
  assert types == set(QUANTISED), types
  ref = AutoModelForCausalLM.from_pretrained(os.path.dirname(quant), gguf_file="quant.gguf",
                                             dtype=torch.float32,
                                             attn_implementation="eager").eval()
  _, graphdef, params = load_gguf_checkpoint(quant)
  diff = np.abs(np.asarray(forward_logits(graphdef, params, TOKENS)) - hf_logits(ref, TOKENS))
  assert diff.max() < TOL, (family, diff.max())


def test_sharded_load_reads_row_blocks_to_the_same_logits(tiny):
  family, model, _, quant = tiny
  # Gemma's one kv head cannot split over a tensor axis: fsdp alone splits it.
  mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2} if model.config.num_key_value_heads > 1
                   else {"data": 2, "fsdp": 4})
  _, graphdef, full = load_gguf_checkpoint(quant)
  _, _, sharded = load_gguf_checkpoint(quant, mesh, DEFAULT_RULES)
  wq = sharded["decoder"]["blocks"][0]["attn"]["wq"].get_value()
  assert len({s.index for s in wq.addressable_shards}) > 1  # really split
  np.testing.assert_allclose(np.asarray(forward_logits(graphdef, sharded, TOKENS)),
                             np.asarray(forward_logits(graphdef, full, TOKENS)), atol=TOL)


def test_config_from_metadata(tiny):
  family, model, f32, _ = tiny
  hf = hf_config_from_gguf(read_gguf(f32))
  assert hf["vocab_size"] == 320 and hf["bos_token_id"] == 257 and hf["eos_token_id"] == 258
  assert hf["attention_bias"] == (family == "qwen2")
  if family == "gemma3":
    assert hf["layer_types"] == model.config.layer_types
    assert hf["query_pre_attn_scalar"] == 256 and hf["rope_local_base_freq"] == 10_000.0


def test_tokenizer_from_metadata(tiny):
  family, _, f32, _ = tiny
  tok = GGUFTokenizer(f32)
  assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (257, 258, 256, 320)
  assert not tok.has_bos and tok.chat_template is None
  ids = tok.encode("a tiny test")
  assert ids == [97, MERGED_ID, 105, 110, 121, MERGED_ID, 101, 115, 116]
  assert tok.encode("<|im_end|>") == [260] and tok.decode(ids + [258]) == "a tiny test"


def test_template_names():
  assert template_name("{{ '<|im_start|>' + m['role'] }}") == "chatml"
  assert template_name("{{ '<start_of_turn>' + role }}") == "gemma"
  assert template_name("<|start_header_id|>") == "llama3"
  assert template_name(None) is None and template_name("") is None
  with pytest.raises(ValueError, match=r"'\[INST\].*matches none of rlpt's templates"):
    template_name("[INST] {{ content }} [/INST]")


# ----------------------------------------------------------------------------
# Errors a user can cause, each naming the value and what was expected.


def test_wrong_name_and_missing_file(tmp_path):
  with pytest.raises(ValueError, match=r"unknown model 'smollm2-1.7b'.*'gemma3-270m'.*\.gguf"):
    resolve_gguf("smollm2-1.7b")
  with pytest.raises(FileNotFoundError, match=r"no GGUF file at '.*nowhere\.gguf'"):
    load_gguf_checkpoint(str(tmp_path / "nowhere.gguf"))
  (tmp_path / "x.gguf").write_bytes(b"NOTAGGUF" * 8)
  with pytest.raises(ValueError, match=r"x\.gguf' is not a GGUF file"):
    read_gguf(str(tmp_path / "x.gguf"))


def test_missing_packages_name_the_pip_command(monkeypatch):
  monkeypatch.setitem(GGUF_MODELS, "nope", PackagedGGUF(
      "nope.gguf", (("rlpt_no_such_package", "nope.gguf"),), "pip install rlpt-no-such==1"))
  with pytest.raises(ModuleNotFoundError,
                     match=r"^model 'nope' needs the package rlpt-no-such-package: "
                           r"pip install rlpt-no-such==1"):
    resolve_gguf("nope")
  monkeypatch.setattr(gguf_mod, "dequantize", None)
  with pytest.raises(ModuleNotFoundError, match=r"needs the gguf package: pip install gguf=="):
    read_gguf("any.gguf")


def test_unsupported_architecture_type_and_tensor(tmp_path):
  model = make_model("llama")
  with pytest.raises(UnsupportedCheckpointError, match=r"architecture 'phi3' is not supported.*"
                                                       r"\['gemma3', 'llama', 'qwen2', 'qwen3'\]"):
    load_gguf_checkpoint(write_gguf(str(tmp_path / "phi3.gguf"), model, "phi3"))
  with pytest.raises(UnsupportedCheckpointError, match=r"'token_embd.weight': 'Q5_1'.*not "
                                                       r"supported; rlpt reads \['F32'"):
    load_gguf_checkpoint(write_gguf(str(tmp_path / "q51.gguf"), model, "llama", ("Q5_1", "F32")))
  odd = write_gguf(str(tmp_path / "odd.gguf"), model, "llama",
                   metadata={"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0})
  with pytest.raises(UnsupportedCheckpointError, match="rope type 'yarn' is not supported"):
    load_gguf_checkpoint(odd)
  gone = write_gguf(str(tmp_path / "gone.gguf"), model, "llama", skip=("blk.1.ffn_up.weight",))
  with pytest.raises(ValueError, match=r"no tensor 'model.layers.1.mlp.up_proj.weight'"):
    load_gguf_checkpoint(gone)
  with pytest.raises(UnsupportedCheckpointError, match=r"'blk.0.ffn_gate_exps.weight' has no "
                                                       r"counterpart in rlpt's llama model"):
    gguf_mod.hf_name("blk.0.ffn_gate_exps.weight", "llama")


def _fake_parts(tmp_path, monkeypatch, parts: list[bytes], sha: str):
  for i, data in enumerate(parts):
    pkg = tmp_path / "site" / f"rlpt_fake_part{i}"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "m.part").write_bytes(data)
  monkeypatch.syspath_prepend(str(tmp_path / "site"))
  entry = PackagedGGUF("m.gguf", tuple((f"rlpt_fake_part{i}", "data/m.part")
                                       for i in range(len(parts))), "pip install fake", sha,
                       sum(map(len, parts)))
  monkeypatch.setitem(GGUF_MODELS, "fake", entry)


def test_parts_are_assembled_once_and_their_hash_checked(tmp_path, monkeypatch):
  parts = [b"GGUF" + bytes(range(60)), bytes(range(100, 200))]
  _fake_parts(tmp_path, monkeypatch, parts, hashlib.sha256(b"".join(parts)).hexdigest())
  cache = str(tmp_path / "cache")
  path = resolve_gguf("fake", cache)
  with open(path, "rb") as f:
    assert f.read() == b"".join(parts)
  stamp = os.stat(path).st_mtime_ns
  assert resolve_gguf("fake", cache) == path and os.stat(path).st_mtime_ns == stamp
  assert sorted(os.listdir(cache)) == ["m.gguf", "m.gguf.lock", "m.gguf.sha256"]
  monkeypatch.setitem(GGUF_MODELS, "fake", PackagedGGUF(
      "m.gguf", GGUF_MODELS["fake"].parts, "pip install fake", "0" * 64, GGUF_MODELS["fake"].size))
  with pytest.raises(ValueError, match=r"join to sha256 [0-9a-f]{64}, expected 0{64}; "
                                       r"reinstall them: pip install fake"):
    resolve_gguf("fake", str(tmp_path / "cache2"))
  assert os.listdir(tmp_path / "cache2") == ["m.gguf.lock"]  # nothing half-written is left
