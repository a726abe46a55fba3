"""Every experiment config runs end to end at its ``:smoke`` size (1-2 steps)."""

import glob
import importlib
import json
import os

import pytest

from rlpt.config import PretrainConfig, TrainConfig, from_config_dict
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENTS = sorted(
    os.path.splitext(os.path.basename(p))[0]
    for p in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
    if not os.path.basename(p).startswith("_") and os.path.basename(p) != "domains.py")
# Experiments whose smoke run another test makes (with check_train_run), in the
# module that already chose their domains (choosing every domain takes a
# minute; under make test's workers each module would choose them again).
COVERED_ELSEWHERE = {"grpo_all_domains": "tests/experiments/test_all_domains.py"}


def test_every_experiment_is_collected():
  assert "grpo_default" in EXPERIMENTS and "pretrain_base" in EXPERIMENTS
  for name, module in COVERED_ELSEWHERE.items():
    assert name in EXPERIMENTS
    assert "check_train_run" in open(os.path.join(ROOT, module)).read(), module


def check_train_run(cfg, workdir, result):
  """What every training experiment's smoke run must produce in ``workdir``."""
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  train_rows = [r for r in rows if r["kind"] == "train"]
  assert [r["step"] for r in train_rows] == list(range(1, cfg.steps + 1))
  for r in train_rows:
    assert r["infra_errors"] == 0
    assert 0.0 <= r["reward/mean"] <= 1.0
    assert r["time/generate"] > 0 and r["throughput/generated_tokens_per_s"] > 0
  assert os.path.getsize(os.path.join(workdir, "eval_success.png")) > 1000
  assert "| mean |" in result["table"]
  assert os.listdir(os.path.join(workdir, "tensorboard"))


@pytest.mark.parametrize("name", [n for n in EXPERIMENTS if n not in COVERED_ELSEWHERE])
def test_smoke_run(name, tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  module = importlib.import_module(f"experiments.{name}")
  cd = module.get_config("smoke")
  if module.RUNNER == "pretrain":
    from rlpt.pretrain import pretrain
    cfg = from_config_dict(PretrainConfig, cd)
    path = pretrain(cfg, str(tmp_path), progress=False)
    assert os.path.exists(os.path.join(path, "model.json"))
    rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    assert rows[-1]["step"] == cfg.steps and rows[-1]["loss"] < rows[0]["loss"]
    return
  if module.RUNNER == "warmup":
    from rlpt.config import WarmupConfig
    from rlpt.warmup import warmup
    cfg = from_config_dict(WarmupConfig, cd)
    path = warmup(cfg, str(tmp_path), progress=False)
    assert os.path.exists(os.path.join(path, "model.safetensors"))
    rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    assert rows[-1]["step"] == cfg.steps and rows[-1]["loss"] < rows[0]["loss"]
    return
  if module.RUNNER == "plan":
    from launch.plan import plan
    from rlpt.config import PlanConfig
    result = plan(from_config_dict(PlanConfig, cd))
    assert result.rows["policy params"] > 0 and result.peak > 0
    assert "| **peak**" in result.table()
    return
  assert module.RUNNER == "train", (
      f"experiments/{name}.py: RUNNER must be 'train', 'pretrain', 'warmup' or 'plan'")
  cd.base.cache_dir = base_cache_dir()
  cd.progress = False
  cfg = from_config_dict(TrainConfig, cd)
  from rlpt.trainer import train
  result = train(cfg, str(tmp_path))
  check_train_run(cfg, str(tmp_path), result)
  # The trained tasks, replayable without rlpt: one row per step, one task per prompt group.
  tasks = [json.loads(l) for l in open(tmp_path / "tasks.jsonl")]
  assert [t["step"] for t in tasks] == list(range(1, cfg.steps + 1))
  for t in tasks:
    assert len(t["tasks"]) == cfg.rollout.prompts_per_step
    assert all(d in cfg.domains.ids and split == "train" for d, _, split in t["tasks"])
  if cfg.checkpoint.export:
    # The final policy, also as a Hugging Face checkpoint with its tokenizer.
    hf = tmp_path / "export" / "hf"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
      assert os.path.getsize(hf / name) > 0, (name, os.listdir(tmp_path / "export"))
