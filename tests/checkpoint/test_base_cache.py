"""Runs that share a base cache build each base once (rlpt.bases)."""

import os
import threading
import time
import types

from rlpt import bases


def test_two_runs_sharing_a_cache_pretrain_the_base_once(tmp_path, monkeypatch):
  built = []

  def fake_pretrain(cfg, workdir, progress=True):
    built.append(workdir)
    time.sleep(0.3)  # long enough that the second run arrives while it trains
    os.makedirs(os.path.join(workdir, "model"))
    with open(os.path.join(workdir, "model", "model.json"), "w") as f:
      f.write("{}")

  monkeypatch.setattr(bases, "pretrain", fake_pretrain)
  workdir = str(tmp_path / "cache" / "base-abc")
  path = os.path.join(workdir, "model")
  built_base = bases.BuiltBase("pretrain", types.SimpleNamespace(steps=1), workdir, path)
  runs = [threading.Thread(target=bases._build_cached_base,
                           args=(built_base, None, False)) for _ in range(3)]
  for r in runs:
    r.start()
  for r in runs:
    r.join()
  assert built == [workdir]
  assert os.path.exists(os.path.join(path, "model.json"))


WARMUP_FILE = """
from rlpt.config import WarmupConfig, default_config_dict
RUNNER = "warmup"

def get_config(arg="smollm2-135m-instruct"):
  c = default_config_dict(WarmupConfig)
  c.base.model = arg
  c.steps = 7
  return c
"""


def test_a_warmup_config_builds_the_base_and_its_tokenizer_is_the_imported_models(tmp_path, monkeypatch):
  """base.experiment naming a warm-up config: an imported base (its
  tokenizer, no byte-level prompt bounds), cached under the config's
  fingerprint, warmed up once and then read as a Hugging Face checkpoint."""
  from rlpt.config import BaseModelConfig
  config_file = tmp_path / "warm.py"
  config_file.write_text(WARMUP_FILE)
  base = BaseModelConfig(experiment=str(config_file), arg="my-model", cache_dir=str(tmp_path / "cache"))
  built = bases.built_base(base)
  assert built.runner == "warmup" and built.config.steps == 7 and built.config.base.model == "my-model"
  assert built.workdir == str(tmp_path / "cache" / f"warm-my-model-{bases.fingerprint(built.config)}")
  assert bases.imported_base(base)
  assert not bases.imported_base(BaseModelConfig())  # the tiny built-in base
  seen = []
  monkeypatch.setattr(bases, "imported_tokenizer", lambda base_cfg: seen.append(base_cfg.model) or "tok")
  assert bases.resolve_tokenizer(base) == "tok" and seen == ["my-model"]

  calls = []

  def fake_warmup(cfg, workdir, progress=True):
    calls.append(workdir)
    os.makedirs(os.path.join(workdir, "model"))
    open(os.path.join(workdir, "model", "rlpt_warmup.json"), "w").write("{}")

  monkeypatch.setattr(bases, "warmup", fake_warmup)
  monkeypatch.setattr(bases, "load_imported", lambda base_cfg, mesh, rules, hf_checkpoint="":
                      (types.SimpleNamespace(), "graph", {"w": hf_checkpoint}, hf_checkpoint))
  for _ in range(2):
    _, graph, params, path = bases.resolve_base(base, progress=False)
    assert path == built.path and params == {"w": built.path} and graph == "graph"
  assert calls == [built.workdir]  # warmed up once, then read from the cache


def test_a_base_experiment_of_another_runner_is_refused(tmp_path):
  from rlpt.config import BaseModelConfig
  config_file = tmp_path / "rl.py"
  config_file.write_text("RUNNER = 'train'\ndef get_config():\n  return {}\n")
  import pytest
  with pytest.raises(ValueError, match=r"base.experiment=.*rl.py' is a 'train' config; a base is built by one of"):
    bases.built_base(BaseModelConfig(experiment=str(config_file)))
