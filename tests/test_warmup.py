"""The supervised path on an imported model (rlpt.warmup, rlpt.pretrain.demonstration_batch).

A chat format's batch is the template's prompt ids + the demonstration + the
end-of-turn token, with only the last two as targets; bare batches are the
ids the tiny base was always pre-trained on (its cached fingerprint too); a
few warm-up steps on the tiny Hugging Face fixture lower the demonstration
loss, full and LoRA, and the saved checkpoint is a base for an RL config.
"""

import os

import numpy as np
import pytest

pytest.importorskip("tokenizers")

from experiments import pretrain_base, warmup_hf  # noqa: E402
from rlpt.config import (BaseModelConfig, ConfigError, EnvConfig, PretrainConfig,  # noqa: E402
                         TrainConfig, WarmupConfig, default_config_dict, from_config_dict)
from rlpt.data import Task  # noqa: E402
from rlpt.models.hf_fixtures import write_byte_tokenizer  # noqa: E402
from rlpt.bases import fingerprint, resolve_base  # noqa: E402
from rlpt.pretrain import demonstration_batch  # noqa: E402
from rlpt.rollout import EnvPool  # noqa: E402
from rlpt.tokenizers import ByteTokenizer  # noqa: E402
from rlpt.tokenizers.hf import load_tokenizer  # noqa: E402
from rlpt.tokenizers.prompts import PromptFormat, prompt_format  # noqa: E402
from rlpt.warmup import demonstration_loss, warmup, warmup_format, warmup_pool  # noqa: E402

MUL = "rlpt/math-mul-easy-v0"
TASKS = [Task(MUL, seed, "train") for seed in (3, 4, 5)]


def _rows(tokens, mask):
  """Each row's ids up to its last target, and its targets' positions (in tokens)."""
  out = []
  for row, m in zip(tokens, mask):
    targets = np.flatnonzero(m) + 1
    out.append((row[:targets[-1] + 1].tolist(), targets.tolist()))
  return out


@pytest.fixture(scope="module")
def instruct_pool():
  pool = EnvPool([MUL], EnvConfig(workers=1, prompt_style="instruct"))
  yield pool
  pool.close()


def test_chat_batch_is_template_prompt_demonstration_and_end_of_turn(tmp_path, instruct_pool):
  write_byte_tokenizer(str(tmp_path), extra_special=("<|im_start|>", "<|im_end|>"))
  tok = load_tokenizer(str(tmp_path))
  fmt = prompt_format(tok, "chatml")
  end = tok.token_id("<|im_end|>")
  assert fmt.stop_ids[0] == end
  tokens, mask = demonstration_batch(instruct_pool, TASKS, fmt, max_len=512)
  prompts = instruct_pool.reset(TASKS)
  for (row, targets), p in zip(_rows(tokens, mask), prompts):
    prompt = fmt.prompt_ids(p.text)
    assert prompt[-3:] == tok.encode("assistant\n")[-3:] and "Answer" in p.text  # the instruct style
    answer = tok.encode(p.info["demonstration"]) + [end]
    assert row == prompt + answer
    assert targets == list(range(len(prompt), len(prompt) + len(answer)))


def test_bare_batch_is_unchanged_and_the_base_fingerprint_too():
  tok = ByteTokenizer()
  pool = EnvPool([MUL], EnvConfig(workers=1))
  try:
    tokens, mask = demonstration_batch(pool, TASKS, PromptFormat(tok), max_len=96)
    prompts = pool.reset(TASKS)
  finally:
    pool.close()
  for i, ((row, targets), p) in enumerate(zip(_rows(tokens, mask), prompts)):
    prompt = [tok.bos_id] + tok.encode(p.text)
    assert row == prompt + tok.encode(p.info["demonstration"]) + [tok.eos_id]
    assert targets == list(range(len(prompt), len(row)))
    assert (tokens[i, len(row):] == tok.pad_id).all()
  assert tokens.shape[1] % 16 == 0
  # The cache key of the built-in bases (rlpt.bases.resolve_base): unchanged.
  assert fingerprint(from_config_dict(PretrainConfig, pretrain_base.get_config())) == "84bf1648161d"
  assert fingerprint(from_config_dict(PretrainConfig, pretrain_base.get_config("smoke"))) == "a1356ff5ef6e"


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_warmup_lowers_the_demonstration_loss_and_saves_an_rl_base(tmp_path, monkeypatch, lora):
  monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  cd = warmup_hf.get_config("smoke,lora" if lora else "smoke")
  cd.steps = 6
  cfg = from_config_dict(WarmupConfig, cd)
  fmt = warmup_format(cfg)
  pool = warmup_pool(cfg)
  try:
    held = [Task(d, 10_000 + i, "eval") for i, d in enumerate(cfg.domains.ids * 2)]
    tokens, mask = demonstration_batch(pool, held, fmt, cfg.max_len)
  finally:
    pool.close()
  _, graphdef, params, _ = resolve_base(cfg.base)
  before = demonstration_loss(graphdef, params, tokens, mask)
  path = warmup(cfg, str(tmp_path), progress=False)
  assert path == str(tmp_path / "model")
  # The saved model is a base for RL: an imported checkpoint with its tokenizer.
  model_cfg, graphdef, params, _ = resolve_base(BaseModelConfig(hf_checkpoint=path))
  after = demonstration_loss(graphdef, params, tokens, mask)
  assert after < before - 0.5, (before, after)
  assert load_tokenizer(path).encode("12") == fmt.tokenizer.encode("12")
  rl = default_config_dict(TrainConfig)
  rl.base.hf_checkpoint = path
  rl.env.prompt_style = "instruct"
  assert from_config_dict(TrainConfig, rl).base.hf_checkpoint == path


def test_mistakes_name_the_value():
  with pytest.raises(ConfigError, match=r"env.prompt_style must be one of \('bare', 'instruct'\), got 'chat'"):
    EnvConfig(prompt_style="chat")
  with pytest.raises(ConfigError, match="base.hf_checkpoint .* or base.model .*got neither"):
    WarmupConfig().check_base()
  with pytest.raises(ConfigError, match="base.checkpoint='runs/base/model' is a built-in base"):
    WarmupConfig(base=BaseModelConfig(checkpoint="runs/base/model", experiment="")).check_base()
  with pytest.raises(ValueError, match="warmup_hf argument 'gpt2': expected one of"):
    warmup_hf.get_config("gpt2")
