"""The all-domains job (experiments/grpo_all_domains.py) at its ``:smoke`` size:
every registered domain (bounded to the tiny context) in one run, which takes
its steps, evaluates (all domains first and last, a rotating subset between),
checkpoints, is interrupted and resumes (keeping at most 4 compiled programs)
with metrics identical to an uninterrupted run's; its report covers every
domain."""

import csv
import json
import os

import pytest

from environments import bounded, registry
from experiments import domains, grpo_all_domains
from rlpt.config import TrainConfig, from_config_dict
from rlpt.metrics import WALL_CLOCK_PREFIXES
from tests.bases import base_cache_dir
from tests.experiments.test_smoke_runs import check_train_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if not k.startswith(WALL_CLOCK_PREFIXES)}
          for r in rows if r["kind"] in ("train", "eval")]


def _report(workdir):
  with open(os.path.join(workdir, "domains.csv")) as f:
    return [{k: v for k, v in r.items() if k != "env_seconds"} for r in csv.DictReader(f)]


def test_selection_covers_every_registered_domain():
  ids, left_out = domains.every_domain()
  originals = [s.id for s in registry.list_domains() if not bounded.is_bounded_id(s.id)]
  assert len(ids) + len(left_out) == len(originals) and len(ids) >= 200
  # Each selected domain is an original or its bounded cut, whose tasks fit.
  for d in ids:
    spec = registry.get(d)
    assert spec.max_prompt_chars <= domains.ALL_PROMPT_CHARS
  for d, why in left_out:
    assert d in originals and why
  # Every family is represented.
  assert {registry.get(d).family for d in ids} >= {"math", "strings", "code", "terminal", "rg",
                                                   "dataset", "cad", "finance"}
  assert domains.every_domain("family=rg,difficulty=easy")[0] == tuple(
      d for d in ids if registry.get(d).family == "rg" and registry.get(d).difficulty == "easy")
  with pytest.raises(ValueError, match="must be <key>=<value>"):
    grpo_all_domains.get_config("families=rg")
  with pytest.raises(ValueError, match="strategy='best'"):
    grpo_all_domains.get_config("strategy=best")


def test_a_run_over_every_domain_steps_evaluates_checkpoints_and_resumes(tmp_path, monkeypatch):
  from rlpt.trainer import Trainer, train
  monkeypatch.chdir(ROOT)
  cd = grpo_all_domains.get_config("smoke")
  cd.progress = False
  cd.base.cache_dir = base_cache_dir()
  cd.checkpoint.export = False
  cfg = from_config_dict(TrainConfig, cd)
  n = len(cfg.domains.ids)
  reference = str(tmp_path / "reference")
  result = train(cfg, reference)
  check_train_run(cfg, reference, result)  # the experiment's smoke run (test_smoke_runs.py)

  # Interrupted after the checkpoint of step 1, then resumed.
  workdir = str(tmp_path / "resumed")
  trainer = Trainer(cfg, workdir)
  step = trainer.train_step

  def stop_before_step_2():
    if trainer.step == 1:
      raise KeyboardInterrupt
    return step()
  trainer.train_step = stop_before_step_2
  with pytest.raises(KeyboardInterrupt):
    trainer.run()
  trainer.close()
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1"]
  # The resumed run keeps at most 4 compiled programs (a long run's bound,
  # tightened): programs dropped and made again compute the same bits.
  trainer = Trainer(cfg, workdir, max_programs=4)
  try:
    trainer.run()
  finally:
    trainer.close()
  assert trainer.ctx.programs.evictions >= 3  # 6 on the 2-core Xeon
  assert _rows(workdir) == _rows(reference)
  # The report of the resumed run (its training summary restored from the
  # checkpoint) is the uninterrupted run's, but for the environments' seconds.
  assert _report(workdir) == _report(reference)

  rows = _rows(reference)
  evals = [r for r in rows if r["kind"] == "eval"]
  assert [r["step"] for r in evals] == [0, 1, 2]
  assert [r["eval/domains"] for r in evals] == [n, cfg.eval.domains_per_eval, n]
  train_rows = [r for r in rows if r["kind"] == "train"]
  for r in train_rows:
    assert r["signal/groups"] == cfg.rollout.prompts_per_step
    assert 0.0 <= r["signal/informative_share"] <= 1.0
    assert r["infra_errors"] == 0
  # The report: every domain once, sorted by gain, with the figures.
  assert len(result["domains"]) == n
  assert {r["domain"] for r in result["domains"]} == set(cfg.domains.ids)
  for name in ("domains.csv", "domain_shares.png", "eval_success.png", "summary.md"):
    assert os.path.getsize(os.path.join(reference, name)) > 0
