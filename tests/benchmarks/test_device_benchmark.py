"""benchmarks/device.py: the roofline accounting against direct counts; its
schedule (estimates, skips, the hard stop at the budget) and its profile
summary on synthetic input; and the script at its --quick shapes on CPU, in
four runs that share one compilation cache (each well under a minute on the
2-core machine): one cut short by a budget, then every part in three runs,
every figure checked against its own inputs."""

import gzip
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "device.py")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import device_profile  # noqa: E402
import roofline  # noqa: E402
from device_schedule import Case, Lines, Runner  # noqa: E402

from rlpt.models import ModelConfig  # noqa: E402

KEYS = {"figure", "value", "unit", "limit", "limit_unit", "of_limit", "limit_source", "device"}
# The budget run's budget: the --quick run takes about 95 s cold on the 2-core
# machine; limits and the model are done by about 10 s, the decode's first case
# and its profile by about 17 s.
BUDGET_S = 20
# Wall beyond the budget the run may take: the budget counts from device.py's
# first line, so Python's start before it, the stop (writing the last lines
# and summary.json) and the exit fall outside it. Measured: 0.1 s or less.
GRACE_S = 5.0


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
  proc = subprocess.run([sys.executable, SCRIPT, "--parts=train,decod", f"--out={tmp_path}"],
                        capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert proc.returncode != 0
  assert "decod" in proc.stderr and "speculative" in proc.stderr


# --- the schedule ---------------------------------------------------------------------


def sleeper(seconds: float, exec_s: float | None = None):
  def run():
    time.sleep(seconds)
    return exec_s
  return run


def read_lines(path) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_estimate_scales_the_executions_and_keeps_the_compile(tmp_path):
  lines = Lines(str(tmp_path / "lines.jsonl"))
  # "a" takes 0.3 s, 0.1 s of it executing; "b" does 4x the work: 0.2 + 4 * 0.1.
  cases = [Case("a", "p", sleeper(0.3, 0.1), work=1.0, prior_s=9.0),
           Case("b", "p", sleeper(0.0), work=4.0, prior_s=9.0),
           Case("c", "q", sleeper(0.0), prior_s=0.5)]
  runner = Runner(lines, None, log=lambda msg: None)
  runner.run(cases)
  got = {o.case: o for o in runner.outcomes}
  assert (got["a"].estimate_s, got["a"].estimate_from) == (9.0, "prior")
  assert got["b"].estimate_from == "a scaled"
  assert got["b"].estimate_s == pytest.approx(got["a"].seconds - 0.1 + 4 * 0.1)
  assert (got["c"].estimate_s, got["c"].estimate_from) == (0.5, "prior")  # another part
  assert [o.status for o in runner.outcomes] == ["done"] * 3 and not read_lines(lines.path)


def test_a_case_that_will_not_fit_is_skipped_and_named(tmp_path):
  lines = Lines(str(tmp_path / "lines.jsonl"))
  cases = [Case("big", "p", sleeper(0.0), prior_s=100.0),
           Case("small", "q", sleeper(0.0), prior_s=0.01),
           Case("needs big", "r", sleeper(0.0), prior_s=0.01, needs=("big",))]
  runner = Runner(lines, time.time() + 30, log=lambda msg: None)
  runner.run(cases)
  rows = read_lines(lines.path)
  assert rows[0]["case"] == "big" and rows[0]["skipped"] == "budget"
  assert rows[0]["estimate_s"] == 100.0 and 0 < rows[0]["left_s"] <= 30
  assert rows[1] == {"case": "needs big", "part": "r", "skipped": "needs big"}
  summary = runner.summary()
  assert summary["cases_done"] == ["small"] and not summary["stopped_by_budget"]
  assert summary["cases_skipped"] == ["big", "needs big"] and summary["parts_skipped"] == ["p", "r"]


def test_a_failed_case_is_written_and_the_run_goes_on(tmp_path):
  def broken():
    raise ValueError("out of memory, say")
  lines = Lines(str(tmp_path / "lines.jsonl"))
  runner = Runner(lines, None, log=lambda msg: None)
  runner.run([Case("broken", "p", broken), Case("after", "p", sleeper(0.0))])
  assert read_lines(lines.path) == [{"case": "broken", "part": "p",
                                     "error": "ValueError: out of memory, say"}]
  assert runner.summary()["cases_failed"] == ["broken"]
  assert runner.summary()["cases_done"] == ["after"]


def test_the_last_run_s_time_of_a_case_is_its_next_estimate(tmp_path):
  memory = str(tmp_path / "case_seconds.json")
  first = Runner(Lines(str(tmp_path / "1.jsonl")), None, memory, "cpu quick", log=lambda m: None)
  first.run([Case("a", "p", sleeper(0.2), prior_s=50.0)])
  second = Runner(Lines(str(tmp_path / "2.jsonl")), None, memory, "cpu quick", log=lambda m: None)
  assert second.estimate(Case("a", "p", sleeper(0.0), prior_s=50.0)) == (
      pytest.approx(first.outcomes[0].seconds), "last run")
  other = Runner(Lines(str(tmp_path / "3.jsonl")), None, memory, "cpu full", log=lambda m: None)
  assert other.estimate(Case("a", "p", sleeper(0.0), prior_s=50.0)) == (50.0, "prior")


# A case blocked in an XLA execution (a loop of a billion steps) when the
# deadline comes: the process must still write its stop and leave on time.
HARD_STOP = r"""
import json, os, sys, time
t0 = time.time()
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks"))
import jax, jax.numpy as jnp
from device_schedule import Case, Lines, Runner
lines = Lines(sys.argv[2])

def spin():
  loop = jax.jit(lambda x: jax.lax.fori_loop(0, 10**9, lambda i, y: jnp.sin(y), x))
  jax.block_until_ready(loop(jnp.ones((256,))))

runner = Runner(lines, t0 + float(sys.argv[3]))
finished = runner.run_until_deadline([
    Case("first", "a", lambda: lines.write({"figure": "first"}), prior_s=0.1),
    Case("spin", "b", spin, prior_s=0.1), Case("after", "c", lambda: None, prior_s=0.1)])
print(json.dumps({"finished": finished, **runner.summary()}), flush=True)
os._exit(0)
"""


def test_the_budget_stops_a_case_blocked_in_xla(tmp_path):
  budget = 6.0
  t = time.time()
  proc = subprocess.run([sys.executable, "-c", HARD_STOP, ROOT, str(tmp_path / "lines.jsonl"),
                         str(budget)], capture_output=True, text=True, cwd=ROOT, timeout=120)
  wall = time.time() - t
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert wall < budget + GRACE_S
  summary = json.loads(proc.stdout.splitlines()[-1])
  assert not summary["finished"] and summary["stopped_by_budget"]
  assert summary["cases_done"] == ["first"] and summary["cases_stopped"] == ["spin"]
  assert summary["cases_skipped"] == ["after"]
  rows = read_lines(tmp_path / "lines.jsonl")
  assert rows[0] == {"figure": "first"}
  assert rows[1]["stopped"] == "budget" and rows[1]["case"] == "spin"
  assert rows[1]["case_s"] > 0
  assert rows[2]["case"] == "after" and rows[2]["skipped"] == "budget"


# --- the profile summary ----------------------------------------------------------------


def test_top_ops_count_self_time_so_a_loop_is_not_counted_twice():
  meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}}]
  op = lambda name, ts, dur, tid=7: {"ph": "X", "pid": 1, "tid": tid, "ts": ts, "dur": dur,
                                     "name": name, "args": {"hlo_op": name}}
  events = meta + [op("while.1", 0.0, 100.0), op("dot.2", 10.0, 30.0), op("dot.2", 50.0, 30.0),
                   op("add.3", 85.0, 10.0), op("dot.2", 0.0, 40.0, tid=8),
                   {"ph": "X", "pid": 1, "tid": 9, "ts": 0.0, "dur": 500.0, "name": "$python"}]
  rows, total, source = device_profile.top_ops({"traceEvents": events}, top=2)
  assert rows == [("dot.2", 3, 100.0), ("while.1", 1, 30.0)]
  assert total == 140.0 and "host" in source


def test_top_ops_prefer_the_device_s_xla_ops_line():
  meta = [{"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 2, "tid": 1, "args": {"name": "XLA Ops"}},
          {"ph": "M", "name": "thread_name", "pid": 2, "tid": 2, "args": {"name": "Stream #7"}}]
  ev = lambda name, tid, dur, hlo: {"ph": "X", "pid": 2, "tid": tid, "ts": 0.0, "dur": dur,
                                    "name": name, "args": {"hlo_op": hlo}}
  trace = {"traceEvents": meta + [ev("fusion.1", 1, 50.0, "fusion.1"),
                                  ev("sm90_gemm_kernel", 2, 45.0, "fusion.1")]}
  rows, total, source = device_profile.top_ops(trace)
  assert rows == [("fusion.1", 1, 50.0)] and total == 50.0 and "XLA Ops" in source
  # Without that line: the stream's kernels, named by their XLA op.
  trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("tid") != 1]
  rows, _, source = device_profile.top_ops(trace)
  assert rows == [("fusion.1", 1, 45.0)] and "kernels" in source


def test_a_profile_that_cannot_be_read_writes_why_and_returns(tmp_path, monkeypatch):
  monkeypatch.setattr(device_profile, "find_trace", lambda log_dir: str(tmp_path / "bad.json.gz"))
  with gzip.open(tmp_path / "bad.json.gz", "wt") as f:
    f.write("{not json")
  result = device_profile.profile(lambda: np.zeros(3), str(tmp_path), "x", "a test")
  assert not result["ok"] and result["reason"].startswith("parse failed: JSONDecodeError")
  assert result["reason"] in (tmp_path / "x_top_ops.txt").read_text()


# --- the script, --quick, on CPU ----------------------------------------------------------


def run_device(out, *args) -> tuple[subprocess.CompletedProcess, float]:
  t = time.time()
  proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--reps=1", f"--out={out}", *args],
                        capture_output=True, text=True, cwd=ROOT, timeout=600,
                        env={**os.environ, "JAX_PLATFORMS": "cpu"})
  return proc, time.time() - t


def outputs(out, proc) -> tuple[list[dict], dict[str, list[dict]], dict]:
  printed = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
  rows = read_lines(os.path.join(out, "device.jsonl"))
  assert rows == printed  # every line written as it was printed
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  by = {}
  for r in rows:
    if "figure" in r:
      by.setdefault(r["figure"], []).append(r)
  return rows, by, summary


def check_figures(by: dict[str, list[dict]]):
  """Each figure well formed and consistent with its own inputs."""
  for r in (r for rs in by.values() for r in rs):
    assert KEYS <= set(r), r
    assert r["value"] > 0 and r["limit"] > 0 and math.isfinite(r["of_limit"]), r
  # No table entry for a CPU: the limits are this run's own measurements.
  flops, bw = by["matmul"][0]["value"], by["memory_bandwidth"][0]["value"]
  for r in by.get("train_step_mfu", []):
    assert r["limit"] == flops and r["of_limit"] == pytest.approx(r["value"] / flops)
  for r in by.get("decode_tokens_per_s", []):  # the limit is the roofline of the bytes it reports
    tokens = r["batch"] * r["new_tokens"]
    assert r["value"] == pytest.approx(tokens / r["decode_s"])
    assert r["decode_step_s"] == pytest.approx(r["decode_s"] / r["new_tokens"])
    if r["binding"] == "memory":
      assert r["limit"] == pytest.approx(tokens / (r["bytes_read"] / bw))
  for r in by.get("engine_tokens_per_s", []):
    assert r["slots"] == 16 and 0 <= r["host_share"] < 1
    assert r["value"] == pytest.approx(r["slots"] * r["new_tokens"] / r["seconds"])
  for r in by.get("speculative_speedup", []):
    a, g = r["acceptance"], r["gamma"]
    assert 0 <= a <= 1 and r["limit"] == pytest.approx((1 - a ** (g + 1)) / (1 - a))
  for r in by.get("attention_fwd_bwd", []):
    assert r["peak_bytes"] > 0 and r["value"] == pytest.approx(r["model_flops"] / r["seconds"])
  for step in by.get("grpo_step_s", []):
    parts = sum(by[f"grpo_{p}_s"][0]["value"] for p in ("generate", "reference", "update"))
    assert parts + step["breakdown_s"]["host"] == pytest.approx(step["value"], rel=1e-6, abs=1e-6)
    assert step["limit"] == pytest.approx(sum(by[f"grpo_{p}_s"][0]["limit"]
                                              for p in ("generate", "reference", "update")))


def check_profile(path: str, what: str):
  text = open(path).read()
  assert text.startswith(f"profile: {what}"), text[:500]
  assert "XLA ops on the host's threads" in text  # XLA:CPU's thunks, not Python events
  ops = re.findall(r"^\s+\d+\s+([\d.]+)\s+([\d.]+)%\s+(\d+)\s+(\S+)$", text, re.M)
  assert 5 <= len(ops) <= 20, text
  ms = [float(o[0]) for o in ops]
  assert ms == sorted(ms, reverse=True) and 0 < sum(float(o[1]) for o in ops) <= 100.5


# Every case of the --quick run, in the order of value it runs them.
CASES = ["limits", "model", "decode/float32/b16", "decode/profile", "decode/float32/b8",
         "decode/int8/b8", "decode/int8/b16", "train", "engine", "grpo", "speculative",
         "attention/causal/1K", "attention/causal/2K", "attention/sparse/1K", "attention/sparse/2K",
         "attention/sparse/8K"]


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
  out = tmp_path_factory.mktemp("device_budget")
  # The run estimates each case from its last time in the cache folder
  # (OUT/xla_cache by default). Written as 0 s, every case fits while any time
  # is left, so the deadline (not an estimate just over the time left) ends the
  # run, stopping one case mid-way; one written huge is skipped first.
  os.makedirs(out / "xla_cache")
  key = "cpu quick float32 reps 1/1"  # device kind, shapes, dtype, --reps/--long_reps
  last = {f"{key} {c}": 0.0 for c in CASES} | {f"{key} decode/float32/b8": 1e3}
  (out / "xla_cache" / "case_seconds.json").write_text(json.dumps(last))
  proc, wall = run_device(out, f"--budget_s={BUDGET_S}")
  return out, proc, wall


def test_a_budget_run_stops_cleanly_at_its_budget(budget_run):
  out, proc, wall = budget_run
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert BUDGET_S <= wall <= BUDGET_S + GRACE_S, proc.stderr[-3000:]
  rows, by, summary = outputs(out, proc)
  assert summary["budget_s"] == BUDGET_S and BUDGET_S <= summary["wall_s"] <= BUDGET_S + 1
  assert summary["stopped_by_budget"] and summary["figures"] == sum(map(len, by.values()))
  assert {"matmul", "memory_bandwidth"} <= set(by) and "limits" in summary["parts_run"]
  check_figures(by)
  # In order of value: done (one skipped) up to the case the deadline stopped, none after it.
  assert [c["case"] for c in summary["cases"]] == CASES
  statuses = [c["status"] for c in summary["cases"]]
  i = statuses.index("stopped")
  expect = ["skipped" if c == "decode/float32/b8" else "done" for c in CASES[:i]]
  assert statuses == expect + ["stopped"] + ["not reached"] * (len(CASES) - i - 1)
  assert "limits" in summary["cases_done"] and summary["cases_stopped"] == [CASES[i]]
  # Each case that did not run is named in the output, with its estimate and the time left.
  skipped = {r["case"]: r for r in rows if r.get("skipped") == "budget"}
  assert list(skipped) == summary["cases_skipped"] == [
      c for c, st in zip(CASES, statuses) if st in ("skipped", "not reached")]
  assert [r["case"] for r in rows if "stopped" in r] == [CASES[i]]
  assert skipped["decode/float32/b8"]["estimate_s"] == 1e3
  assert skipped["decode/float32/b8"]["estimate_from"] == "last run"
  for r in skipped.values():
    assert r["estimate_s"] >= r["left_s"] >= 0
  statuses = dict(zip(CASES, statuses))
  if statuses["decode/profile"] == "done":
    check_profile(out / "profile" / "decode_top_ops.txt", "one FastSampler generate, batch 16")
  cache = os.listdir(out / "xla_cache")
  assert summary["compilation_cache"] == str(out / "xla_cache") and len(cache) > 1, cache


def run_parts(budget_run, tmp_path_factory, parts: str):
  out = tmp_path_factory.mktemp("device_" + parts.replace(",", "_"))
  # The budget run's cache: what it compiled, this run loads.
  proc, _ = run_device(out, f"--parts={parts}", f"--compilation_cache={budget_run[0] / 'xla_cache'}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out, proc


@pytest.fixture(scope="module")
def every_part(budget_run, tmp_path_factory):
  """One run of every part (one process: one start-up, one model build)."""
  out, proc = run_parts(budget_run, tmp_path_factory, "attention,train,decode,engine,grpo,speculative")
  return (out, proc, *outputs(out, proc))


def test_every_part_runs_in_order_of_value(every_part):
  out, proc, rows, by, summary = every_part
  assert {k: len(v) for k, v in by.items()} == {
      "matmul": 1, "memory_bandwidth": 1, "decode_tokens_per_s": 4, "train_step_mfu": 1,
      "engine_tokens_per_s": 1, "grpo_generate_s": 1, "grpo_reference_s": 1, "grpo_update_s": 1,
      "grpo_step_s": 1, "speculative_speedup": 1, "attention_fwd_bwd": 5}
  assert len(rows) == summary["figures"] == 18  # figures only: nothing skipped, stopped or failed
  check_figures(by)
  # In order of value, whatever --parts's order.
  assert summary["parts_run"] == ["limits", "model", "decode", "train", "engine", "grpo",
                                  "speculative", "attention"]
  assert summary["quick"] and summary["platform"] == "cpu" and not summary["stopped_by_budget"]
  assert summary["budget_s"] is None and not summary["cases_skipped"]


def test_quick_decode_train_and_attention_figures(every_part):
  out, _, _, by, summary = every_part
  decode = by["decode_tokens_per_s"]
  assert [(r["batch"], r["kv_cache"]) for r in decode] == [
      (16, "float32"), (8, "float32"), (8, "int8"), (16, "int8")]
  kv = {r["kv_cache"]: r["kv_bytes_per_token"] for r in decode}
  assert kv["int8"] < kv["float32"]
  assert [(r["kind"], r["tokens"]) for r in by["attention_fwd_bwd"]] == [
      ("blockwise causal", 1024), ("blockwise causal", 2048), ("sparse", 1024), ("sparse", 2048),
      ("sparse", 8192)]
  check_profile(out / "profile" / "decode_top_ops.txt", "one FastSampler generate, batch 16")
  check_profile(out / "profile" / "train_top_ops.txt", "one train step")
  assert all(p["ok"] for p in summary["profiles"].values()) and set(summary["profiles"]) == {
      "decode", "train"}


@pytest.mark.parametrize("platform", ["gpu", "tpu", "cpu"])
def test_the_kernel_decode_case_follows_the_xla_one_on_an_accelerator(tmp_path, platform):
  import types

  import device
  chip = types.SimpleNamespace(platform=platform, device_kind="a chip")
  parts = device.Parts(device.FULL, None, chip, "bfloat16", 1, 1, str(tmp_path))
  names = [c.name for c in parts.cases(["decode"])]
  kernel = ["decode/bfloat16/b256/pallas"] if platform != "cpu" else []
  assert names == ["limits", "model", "decode/bfloat16/b256", *kernel, "decode/profile",
                   "decode/bfloat16/b64", "decode/int8/b64", "decode/int8/b256"]
