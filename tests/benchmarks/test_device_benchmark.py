"""benchmarks/device.py: the roofline accounting against direct counts, and the
whole script at its --quick shapes on CPU (every part, every figure well formed
and consistent with its own inputs)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import roofline  # noqa: E402

from rlpt.models import ModelConfig  # noqa: E402

KEYS = {"figure", "value", "unit", "limit", "limit_unit", "of_limit", "limit_source", "device"}


def test_kv_bytes_per_token_counts_keys_values_and_scales():
  cfg = ModelConfig(num_layers=3, num_kv_heads=2, head_dim=32, dtype="bfloat16")
  assert roofline.kv_bytes_per_token(cfg) == 3 * 2 * 2 * 32 * 2  # layers, k+v, heads, dim, bytes
  # int8: one byte per element plus an fp32 scale per (token, head) for k and for v.
  assert roofline.kv_bytes_per_token(cfg, int8=True) == 3 * 2 * 2 * (32 + 4)


def test_decode_bytes_is_weights_per_step_plus_the_growing_context():
  w, kvb, rows, prompt, new = 1000.0, 10.0, 4, 6, 5
  direct = sum(w + rows * (prompt + t) * kvb for t in range(new))
  assert roofline.decode_bytes(w, kvb, rows, prompt, new) == direct
  # A group's shared prompt is read once per step.
  direct = sum(w + (rows // 2 * prompt + rows * t) * kvb for t in range(new))
  assert roofline.decode_bytes(w, kvb, rows, prompt, new, group=2) == direct


def test_bound_names_what_binds():
  assert roofline.bound_seconds(10.0, 1.0, 10.0, 10.0) == (1.0, "compute")
  assert roofline.bound_seconds(1.0, 30.0, 10.0, 10.0) == (3.0, "memory")


@pytest.mark.parametrize("kind,flops,bw", [("NVIDIA H200", 989e12, 4.8e12),
                                            ("NVIDIA H100 80GB HBM3", 989e12, 3.35e12),
                                            ("NVIDIA H100 PCIe", 756e12, 2.0e12),
                                            ("NVIDIA A100-SXM4-80GB", 312e12, 2.039e12),
                                            ("TPU v5 lite", 197e12, 819e9),
                                            ("TPU v5", 459e12, 2.765e12)])
def test_device_limits_by_kind(kind, flops, bw):
  got = roofline.device_limits(kind)
  assert got[:2] == (flops, bw) and got[2]


def test_unknown_device_has_no_table_entry():
  assert roofline.device_limits("cpu") is None


def test_attention_flops_match_a_dense_mask_count():
  import device
  t, window, sinks, heads, dim = 50, 8, 2, 3, 4
  q, k = np.arange(t)[:, None], np.arange(t)[None]
  causal = k <= q
  visible = causal & ((q - k < window) | (k < sinks))
  assert device.attention_flops(t, heads, dim, window, sinks) == 12 * heads * dim * visible.sum()
  assert device.attention_flops(t, heads, dim, None, 0) == 12 * heads * dim * causal.sum()


def test_unknown_part_is_refused(tmp_path):
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "device.py"),
                         "--parts=train,decod", f"--out={tmp_path}"],
                        capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert proc.returncode != 0
  assert "decod" in proc.stderr and "speculative" in proc.stderr


def test_quick_run_writes_every_figure(tmp_path):
  proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "device.py"), "--quick",
                         f"--out={tmp_path}", "--reps=1"],
                        capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  printed = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
  with open(tmp_path / "device.jsonl") as f:
    rows = [json.loads(line) for line in f]
  assert rows == printed
  for r in rows:
    assert KEYS <= set(r), r
    assert r["value"] > 0 and r["limit"] > 0 and math.isfinite(r["of_limit"]), r
  by = {}
  for r in rows:
    by.setdefault(r["figure"], []).append(r)
  assert {k: len(v) for k, v in by.items()} == {
      "matmul": 1, "memory_bandwidth": 1, "train_step_mfu": 1, "decode_tokens_per_s": 4,
      "engine_tokens_per_s": 1,
      "speculative_speedup": 1, "attention_fwd_bwd": 5, "grpo_generate_s": 1,
      "grpo_reference_s": 1, "grpo_update_s": 1, "grpo_step_s": 1}
  # No table entry for a CPU: the limits are this run's own measurements.
  flops, bw = by["matmul"][0]["value"], by["memory_bandwidth"][0]["value"]
  assert by["train_step_mfu"][0]["limit"] == flops
  assert by["train_step_mfu"][0]["of_limit"] == pytest.approx(by["train_step_mfu"][0]["value"] / flops)
  for r in by["decode_tokens_per_s"]:  # the limit is the roofline of the bytes it reports
    tokens = r["batch"] * r["new_tokens"]
    assert r["value"] == pytest.approx(tokens / r["decode_s"])
    if r["binding"] == "memory":
      assert r["limit"] == pytest.approx(tokens / (r["bytes_read"] / bw))
  assert {(r["batch"], r["kv_cache"]) for r in by["decode_tokens_per_s"]} == {
      (8, "float32"), (16, "float32"), (8, "int8"), (16, "int8")}
  kv = {r["kv_cache"]: r["kv_bytes_per_token"] for r in by["decode_tokens_per_s"]}
  assert kv["int8"] < kv["float32"]
  engine = by["engine_tokens_per_s"][0]
  assert engine["slots"] == 16 and 0 <= engine["host_share"] < 1
  assert engine["value"] == pytest.approx(engine["slots"] * engine["new_tokens"] / engine["seconds"])
  spec = by["speculative_speedup"][0]
  a, g = spec["acceptance"], spec["gamma"]
  assert 0 <= a <= 1 and spec["limit"] == pytest.approx((1 - a ** (g + 1)) / (1 - a))
  for r in by["attention_fwd_bwd"]:
    assert r["peak_bytes"] > 0 and r["value"] == pytest.approx(r["model_flops"] / r["seconds"])
  step = by["grpo_step_s"][0]
  parts = sum(by[f"grpo_{p}_s"][0]["value"] for p in ("generate", "reference", "update"))
  assert parts + step["breakdown_s"]["host"] == pytest.approx(step["value"], rel=1e-6, abs=1e-6)
  assert step["limit"] == pytest.approx(sum(by[f"grpo_{p}_s"][0]["limit"]
                                            for p in ("generate", "reference", "update")))
  with open(tmp_path / "summary.json") as f:
    summary = json.load(f)
  assert summary["quick"] and summary["figures"] == len(rows) and summary["platform"] == "cpu"
