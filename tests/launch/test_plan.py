"""The memory plan against hand arithmetic (Llama-8B shapes on 64 devices)."""

import importlib

import pytest

from launch.plan import plan
from rlpt.config import PlanConfig, ShardingConfig, from_config_dict
from rlpt.models import ModelConfig
from rlpt.device.memory import memory_plan

D, L, N, K, H, F, V = 4096, 32, 32, 8, 128, 14336, 128256
FSDP, TP = 16, 4


def test_llama_8b_plan_matches_hand_arithmetic():
  cfg = from_config_dict(PlanConfig, importlib.import_module("experiments.plan_llama_8b").get_config())
  assert (cfg.model.d_model, cfg.model.num_layers, cfg.model.mlp_dim) == (D, L, F)
  p = plan(cfg)
  # Matrices split over fsdp x tensor; RMSNorm scales only over fsdp (embed).
  matrices = L * (D * N * H * 2 + D * K * H * 2 + 3 * D * F) + 2 * V * D  # embed + lm_head
  norms = (2 * L + 1) * D
  assert p.param_counts["policy"] == matrices + norms == 8_030_261_248
  params = 4 * (matrices // (FSDP * TP) + norms // FSDP)
  assert p.rows["policy params"] == params
  assert p.rows["policy gradients"] == params
  assert p.rows["reference params"] == params
  assert p.rows["policy optimizer (Adam)"] == 2 * params + 4  # mu, nu and a replicated count
  # Sampling copy: tensor-parallel only, replicated over fsdp.
  assert p.rows["policy sampling copy"] == 4 * (matrices // TP + norms)
  # Critic: trunk (no lm_head) + head [D] (fsdp) + scalar bias (replicated).
  v_matrices = matrices - V * D
  v_params = 4 * (v_matrices // (FSDP * TP) + (norms + D) // FSDP + 1)
  assert p.rows["value params"] == v_params
  assert p.rows["value optimizer (Adam)"] == 2 * v_params + 4
  # KV cache, bf16: [L, B, S, K, H] x (k, v); batch over data x fsdp, K over tensor.
  assert p.rows["KV cache (sampling)"] == 2 * 2 * L * (256 // FSDP) * 4096 * (K // TP) * H
  # Activations (the documented estimate): tokens per device x per-token bytes.
  tokens = 16 * 4096 // FSDP
  per_layer = 2 * 6 * D + 2 * (3 * N * H // TP + 3 * K * H // TP) + 2 * 6 * F // TP + 4 * N // TP
  assert p.rows["activations (policy step)"] == tokens * L * per_layer
  # Scoring by chunks of 1024 positions: one chunk's four fp32 [tokens x vocab] blocks.
  assert p.rows["scoring logits (policy step)"] == (16 // FSDP) * 1024 * 4 * 4 * V // TP
  resident = sum(p.rows[k] for k in ("policy params", "policy optimizer (Adam)",
                                     "policy sampling copy", "reference params", "value params",
                                     "value optimizer (Adam)"))
  assert p.peak == resident + max(p.rows["KV cache (sampling)"],
                                  params + p.rows["activations (policy step)"]
                                  + p.rows["scoring logits (policy step)"])
  assert "fits" in p.table()


@pytest.mark.parametrize("size", ["8b", "70b"])
def test_long_context_plans_fit_80gb_and_split_tokens_over_the_sequence(size):
  cd = importlib.import_module(f"experiments.plan_llama_{size}").get_config("128k")
  cfg = from_config_dict(PlanConfig, cd)
  p = plan(cfg)
  assert cfg.seq_len == 131072 and p.mesh["sequence"] > 1 and "fits" in p.table()
  assert p.peak <= 80 * 2 ** 30
  # The whole [tokens x vocab] logits would be this many times the chunk's.
  full = plan(from_config_dict(PlanConfig, {**cd.to_dict(), "logprob_chunk": 0}))
  assert full.rows["scoring logits (policy step)"] == (
      p.rows["scoring logits (policy step)"] * 131072 // 1024 * 3 // 4)
  tokens = cfg.train_batch * 131072 // (p.mesh["data"] * p.mesh["fsdp"] * p.mesh["sequence"])
  per_token = p.rows["activations (policy step)"] / tokens
  assert per_token == pytest.approx(
      plan(from_config_dict(PlanConfig, {**cd.to_dict(), "seq_len": 65536}))
      .rows["activations (policy step)"] / (tokens // 2))


def test_70b_plan_and_reference_on_host():
  cd = importlib.import_module("experiments.plan_llama_70b").get_config("smoke")
  cd.sharding = {"reference_memory": "pinned_host"}
  p = plan(from_config_dict(PlanConfig, cd))
  assert p.rows["reference params"] == 0
  assert p.host_rows["reference params (per device's shard)"] == p.rows["policy params"]


def test_plan_bad_input_names_the_numbers():
  model = ModelConfig(vocab_size=259, d_model=64, num_layers=1, num_heads=4, num_kv_heads=2,
                      head_dim=16, mlp_dim=128)
  rules = ShardingConfig()
  with pytest.raises(ValueError, match=r"has 16 devices but 32 are available"):
    memory_plan(model, {"fsdp": 4, "tensor": 4}, 32, rules.train_rules, rules.sample_rules,
                train_batch=8, seq_len=8, sample_batch=8, sample_len=8)
  with pytest.raises(ValueError, match=r"size 259, not divisible by mesh axes \('tensor',\)"):
    memory_plan(model, {"fsdp": 4, "tensor": 2}, 8, rules.train_rules, rules.sample_rules,
                train_batch=8, seq_len=8, sample_batch=8, sample_len=8)
  with pytest.raises(ValueError, match=r"train_batch=6 must be a multiple of the 4 batch"):
    memory_plan(model, {"fsdp": 4}, 4, rules.train_rules, rules.sample_rules,
                train_batch=6, seq_len=8, sample_batch=8, sample_len=8)
  with pytest.raises(ValueError, match=r"\['wk'\]: dimension 1 has size 2, not divisible .* total size 4"):
    memory_plan(model, {"tensor": 4}, 4, rules.train_rules, rules.sample_rules,
                train_batch=8, seq_len=8, sample_batch=8, sample_len=8)
