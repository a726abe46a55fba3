"""Every user mistake in a config is caught before anything compiles, with a clear message."""

import os
import subprocess
import sys

import pytest

from experiments import domains, grpo_default, pretrain_base
from rlpt.config import ConfigError, PretrainConfig, TrainConfig, from_config_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cfg(**overrides):
  # A plain dict: ConfigDict itself refuses some type changes, and config files
  # may build dicts too, so the typed boundary must check everything.
  c = grpo_default.get_config("smoke").to_dict()
  for path, value in overrides.items():
    node = c
    *parents, leaf = path.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = value
  return c


def test_default_and_smoke_configs_build():
  for arg in ("", "smoke"):
    cfg = from_config_dict(TrainConfig, grpo_default.get_config(arg))
    assert cfg.rollout.batch_size % cfg.rollout.group_size == 0
    from_config_dict(PretrainConfig, pretrain_base.get_config(arg))
  cfg = from_config_dict(TrainConfig, grpo_default.get_config("async"))
  assert cfg.rollout.staleness == 1 and cfg.rollout.max_staleness == 3
  assert sorted(cfg.rollout.domain_staleness) == sorted(
      d for d in cfg.domains.ids if d.startswith(("rlpt/code-", "rlpt/terminal-")))


def test_unknown_key_is_named_with_a_suggestion():
  c = grpo_default.get_config("smoke")
  d = c.to_dict()
  d["rollout"]["tempreture"] = 0.5
  with pytest.raises(ConfigError, match=r"config\.rollout\.tempreture.*Did you mean 'config\.rollout\.temperature'"):
    from_config_dict(TrainConfig, d)


@pytest.mark.parametrize("overrides,match", [
    ({"rollout.group_size": 1}, r"group_size must be >= 2 for grpo"),
    ({"rollout.batch_size": 18}, r"batch_size=18 completions is not divisible by rollout.group_size=4"),
    ({"optim.learning_rate": -1e-4}, r"learning_rate must be > 0, got -0.0001"),
    ({"rollout.temperature": "hot"}, r"rollout.temperature must be a number, got str 'hot'"),
    ({"steps": 2.5}, r"config.steps must be an integer, got float 2.5"),
    ({"rl.policy_loss": "ppo_clipp"}, r"Unknown policy loss 'ppo_clipp'.*Did you mean 'ppo_clip'"),
    ({"rl.minibatches": 3}, r"not divisible by rl.minibatches=3"),
    ({"domains.ids": []}, r"domains.ids is empty"),
    ({"domains.weights": [1.0]}, r"domains.weights has 1 entries"),
    ({"curriculum.strategy": "uniformm"},
     r"Unknown domain sampling strategy 'uniformm'.*Did you mean 'uniform'"),
    ({"domains.weights": [1.0] * len(domains.DEFAULT)}, r"domains.weights is set but curriculum.strategy='uniform'"),
    ({"curriculum.strategy": "fixed"}, r"curriculum.strategy='fixed' needs domains.weights"),
    ({"curriculum.min_share": 0.2}, r"min_share"),
    ({"curriculum.priorities": {"rlpt/math-mul-easy-v0": -1.0}}, r"priorities must be finite and >= 0"),
    ({"curriculum.priorities": {"rlpt/nope-v0": 1.0}}, r"extra \['rlpt/nope-v0'\]"),
    ({"rollout.domain_staleness": {"rlpt/nope-v0": 1}},
     r"domain_staleness names domains that are not in domains.ids: \['rlpt/nope-v0'\]"),
    ({"rollout.domain_staleness": {"rlpt/math-mul-easy-v0": -1}},
     r"domain_staleness\['rlpt/math-mul-easy-v0'\] must be an int >= 0, got -1"),
    ({"rollout.domain_staleness": {"rlpt/math-mul-easy-v0": 1}, "rl.dynamic_sampling": True},
     r"domain_staleness cannot be combined with rl.dynamic_sampling"),
    ({"rl.advantage": "rloo", "rollout.group_size": 1, "rollout.batch_size": 16},
     r"group_size must be >= 2 for rloo"),
    ({"rl.kl_mode": "both"}, r"rl.kl_mode must be 'loss' or 'reward'"),
    ({"rollout.decode_phases": -1}, r"rollout.decode_phases must be in \[0 \(auto\), rollout.max_new_tokens=\d+\], got -1"),
    ({"rollout.decode_phases": 2, "base.attention_impl": "blockwise"},
     r"decode_phases=2 needs the dense-attention samplers; base.attention_impl is 'blockwise'"),
    ({"rollout.decode_phases": 2, "speculative.gamma": 2}, r"speculative.gamma 2"),
])
def test_impossible_values_are_rejected(overrides, match):
  with pytest.raises(ConfigError, match=match):
    from_config_dict(TrainConfig, _cfg(**overrides))


def _launch(*args):
  return subprocess.run([sys.executable, "-m", "launch.train", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)


def test_misspelled_flag_override_fails_before_compiling(tmp_path):
  r = _launch("--config=experiments/grpo_default.py:smoke", f"--workdir={tmp_path}",
              "--config.rollout.tempreture=0.5")
  assert r.returncode != 0
  assert "tempreture" in r.stderr
  assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_impossible_flag_value_fails_with_one_clear_line(tmp_path):
  r = _launch("--config=experiments/grpo_default.py:smoke", f"--workdir={tmp_path}",
              "--config.rollout.group_size=1")
  assert r.returncode != 0
  assert r.returncode == 2 and r.stderr.strip().splitlines() == [
      "launch.train: error: invalid config: " + r.stderr.split("invalid config: ", 1)[1].strip()]
  assert "invalid config: rollout.group_size must be >= 2 for grpo" in r.stderr
  assert not os.path.exists(tmp_path / "metrics.jsonl")


def test_unknown_domain_names_close_matches():
  from rlpt.rollout import EnvPool
  with pytest.raises(ValueError, match="math-add-easy"):
    EnvPool(["rlpt/math-add-eazy-v0"])
