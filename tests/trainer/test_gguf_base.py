"""A GGUF base by name (base.model): the run's model, tokenizer, chat template
and reference fingerprint come from the file inside its pinned package."""

import pytest

from rlpt.config import BaseModelConfig

pytest.importorskip("gguf")


def _smollm2_path():
  from rlpt.models.gguf import resolve_gguf
  try:
    return resolve_gguf("smollm2-135m-instruct")
  except (ValueError, FileNotFoundError, RuntimeError) as e:  # the package is not installed
    pytest.skip(str(e))


def test_one_base_source_at_a_time():
  with pytest.raises(ValueError, match="base.hf_checkpoint='/x', base.model='smollm2-135m-instruct'"):
    BaseModelConfig(hf_checkpoint="/x", model="smollm2-135m-instruct")


def test_smollm2_by_name_is_the_runs_model_tokenizer_and_template():
  from rlpt.checkpoint.manager import model_fingerprint
  from rlpt.bases import resolve_base, resolve_tokenizer
  from rlpt.tokenizers.prompts import prompt_format

  path = _smollm2_path()
  base = BaseModelConfig(model="smollm2-135m-instruct")
  model_cfg, _, params, where = resolve_base(base, progress=False)
  assert where == path and model_cfg.vocab_size == 49152 and model_cfg.num_layers == 30
  assert sum(x.size for x in __import__("jax").tree.leaves(params)) == 134_515_008
  tok = resolve_tokenizer(base)
  fmt = prompt_format(tok)
  assert fmt.name == "chatml" and fmt.stop_ids == (tok.token_id("<|im_end|>"),)
  assert model_fingerprint(path) == model_fingerprint(path) and len(model_fingerprint(path)) == 16


def test_the_hf_import_experiment_takes_a_model_name():
  from experiments import grpo_hf_import

  c = grpo_hf_import.get_config("smollm2-135m-instruct")
  assert c.base.model == "smollm2-135m-instruct" and not c.base.hf_checkpoint
  assert c.rollout.chat_template == "auto"
  with pytest.raises(ValueError, match="smollm2-135m-instruct"):
    grpo_hf_import.get_config("/no/such/dir")
