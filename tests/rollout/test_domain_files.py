"""Dataset files named by a run's config (``domains.files``): registered once per
process before anything compiles, their ids joining ``domains.ids``, bad files
refused with the entry, file, line and field."""

import json
import os
import subprocess
import sys

import pytest

from rlpt.config import EnvConfig
from rlpt.config import ConfigError, DomainsConfig
from rlpt.data import Task
from rlpt.rollout.domains import register_domain_files
from rlpt.rollout.envs import EnvPool
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write(path, rows):
  path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
  return path


def test_file_ids_join_the_domain_list():
  cfg = DomainsConfig(ids=("rlpt/math-add-easy-v0", "rlpt/dataset-b-v0"),
                      files=("rlpt/dataset-a-v0=a.jsonl:exact", "rlpt/dataset-b-v0=b.jsonl"))
  assert cfg.ids == ("rlpt/math-add-easy-v0", "rlpt/dataset-b-v0", "rlpt/dataset-a-v0")
  assert DomainsConfig(files=("rlpt/dataset-a-v0=a.jsonl",)).ids == ("rlpt/dataset-a-v0",)
  with pytest.raises(ConfigError, match=r"domains.files\[1\] is 'b.jsonl'; expected"):
    DomainsConfig(files=("rlpt/dataset-a-v0=a.jsonl", "b.jsonl"))
  with pytest.raises(ConfigError, match="names one id twice"):
    DomainsConfig(files=("rlpt/dataset-a-v0=a.jsonl", "rlpt/dataset-a-v0=b.jsonl"))
  with pytest.raises(ConfigError, match="has 1 entries for 2 domains"):
    DomainsConfig(ids=("rlpt/math-add-easy-v0",), weights=(1.0,), files=("rlpt/dataset-a-v0=a.jsonl",))


def test_registered_once_and_served_by_the_pool(tmp_path):
  path = _write(tmp_path / "caps.jsonl", [{"id": f"c{i}", "prompt": f"Capital letter {i}?", "answer": "ABCDEFGHIJ"[i % 10]}
                                         for i in range(40)])
  desc = f"rlpt/dataset-poolcaps-v0={path}:exact"
  assert register_domain_files([desc]) == (desc,)
  assert register_domain_files([desc]) == (desc,)  # again: the same registration, kept
  pool = EnvPool(["rlpt/dataset-poolcaps-v0"], EnvConfig(workers=1), files=[desc])
  try:
    eps = pool.start([Task("rlpt/dataset-poolcaps-v0", s, "train") for s in range(3)])
    steps = pool.step(eps, [e.info["demonstration"] for e in eps])
    assert all(s.done and s.graded.success for s in steps)
  finally:
    pool.close()
  other = _write(tmp_path / "other.jsonl", [{"prompt": "x?", "answer": "y"}])
  with pytest.raises(ValueError, match=r"domains.files\[0\] .*already registered.*caps.jsonl"):
    register_domain_files([f"rlpt/dataset-poolcaps-v0={other}:exact"])


def test_a_bad_file_names_entry_file_line_and_field(tmp_path):
  path = _write(tmp_path / "bad.jsonl", [{"prompt": "1+1?", "answer": "2"}, {"prompt": "2+2?", "anwser": "4"}])
  with pytest.raises(ValueError, match=r"domains.files\[1\] .*bad.jsonl.*line 2.*'answer'"):
    register_domain_files([f"rlpt/dataset-okfirst-v0={_write(tmp_path / 'ok.jsonl', [{'prompt': 'a', 'answer': '1'}])}",
                           f"rlpt/dataset-bad-v0={path}"])
  with pytest.raises(ValueError, match=r"domains.files\[0\] .*nope.jsonl"):
    register_domain_files([f"rlpt/dataset-nope-v0={tmp_path / 'nope.jsonl'}"])


def test_the_flag_trains_on_a_file(tmp_path):
  """`launch.train --config.domains.files=[...]` on the smoke job: the file's
  domain is trained on and evaluated, with nothing changed in rlpt/."""
  _write(tmp_path / "adds.jsonl", [{"q": f"What is {i} + 1?", "a": str(i + 1)} for i in range(60)])
  work = tmp_path / "run"
  r = subprocess.run(
      [sys.executable, "-m", "launch.train", "--config=experiments/grpo_default.py:smoke",
       f"--workdir={work}", "--config.steps=1", f"--config.base.cache_dir={base_cache_dir()}",
       "--config.progress=False", "--config.domains.ids=['rlpt/strings-reverse-easy-v0']",
       f"--config.domains.files=['rlpt/dataset-adds-v0={tmp_path / 'adds.jsonl'}:numeric?prompt=q&answer=a']"],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "| dataset-adds-v0 |" in r.stdout
  config = json.loads((work / "config.json").read_text())
  assert config["domains"]["ids"] == ["rlpt/strings-reverse-easy-v0", "rlpt/dataset-adds-v0"]
  rows = [json.loads(l) for l in open(work / "metrics.jsonl")]
  assert any("rlpt/dataset-adds-v0" in k for r in rows for k in r), "no per-domain metric for the file"
