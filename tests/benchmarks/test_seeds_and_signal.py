"""The seeds summary (benchmarks/main_job_seeds.py) and the signal table
(benchmarks/rl_signal.py) on runs and results written here."""

import json
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import main_job_seeds  # noqa: E402
import rl_signal  # noqa: E402

DOMAINS = ("rlpt/math-mul-easy-v0", "rlpt/code-linear-easy-v0")


def _run(workdir, start, end):
  os.makedirs(workdir)
  rows = []
  for step, values in ((0, start), (10, end)):
    row = {"kind": "eval", "step": step}
    for kind, scale in (("sampled_success", 1.0), ("success", 0.5)):
      for d, v in zip(DOMAINS, values):
        row[f"{kind}/{d}"] = v * scale
      row[f"{kind}/mean"] = sum(values) * scale / len(values)
    rows.append(row)
  rows += [{"kind": "train", "step": s, "time/step": 2.0 + s, f"success/{DOMAINS[0]}": 0.5} for s in (1, 2, 3)]
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)


def test_seeds_table_reads_base_warmup_and_rl_with_spread(tmp_path):
  runs = {0: str(tmp_path / "seed0"), 1: str(tmp_path / "seed1")}
  _run(runs[0], (0.2, 0.4), (0.5, 0.4))
  _run(runs[1], (0.2, 0.4), (0.3, 0.6))
  before = {f"{k}/{d}": 0.0 for k in ("sampled_success", "success") for d in DOMAINS + ("mean",)}
  text = main_job_seeds.table(runs, before)
  line = next(x for x in text.splitlines() if x.startswith("| math-mul-easy-v0"))
  cells = [c.strip() for c in line.strip("|").split("|")]
  # sampled: before warm-up, base (start of RL), final, change; then greedy the same
  assert cells[1:5] == ["0.000", "0.200 [0.200-0.200]", "0.400 [0.300-0.500]", "0.200 [0.100-0.300]"]
  assert cells[5:9] == ["0.000", "0.100 [0.100-0.100]", "0.200 [0.150-0.250]", "0.100 [0.050-0.150]"]
  assert "before warm-up" in text.splitlines()[2]
  assert "median step time (s): seed 0 4.00, seed 1 4.00" in text
  main_job_seeds.plot(runs, before, str(tmp_path / "seeds.png"))
  assert os.path.getsize(tmp_path / "seeds.png") > 1000
  # Without the before-warm-up measure the columns are the run's own.
  assert "before warm-up" not in main_job_seeds.table(runs)


def test_signal_marks_five_to_ninety_percent_and_counts_masked():
  assert [rl_signal.has_signal(p) for p in (0.0, 0.04, 0.05, 0.5, 0.9, 0.95, 1.0)] == [
      False, False, True, True, True, False, False]
  rows = {"rlpt/a-v0": {"greedy": 0.25, "sampled": 0.5, "greedy_masked": 0.0, "sampled_masked": 2.0},
          "rlpt/b-v0": {"greedy": 0.0, "sampled": 0.0, "greedy_masked": 0.0, "sampled_masked": 0.0}}
  result = {"rows": rows, "seconds": {"128+64": 60.0}}
  text = rl_signal.table([result, result], ["base", "warm"])
  assert "| a |  25.0 |  50.0 * (2 masked) |  25.0 |  50.0 * (2 masked) |" in text
  assert "| b |   0.0 |   0.0 |   0.0 |   0.0 |" in text
  assert "base: 1 of 2 domains with signal (*), mean sampled success 25.0%, 1.0 min" in text


class _Pool:
  def __init__(self, prompt_chars, demo_chars):
    self.prompt_chars, self.demo_chars = prompt_chars, demo_chars

  def reset(self, tasks):
    import types
    return [types.SimpleNamespace(text="p" * self.prompt_chars, info={"demonstration": "d" * self.demo_chars})
            for _ in tasks]


def test_budget_rounds_prompt_and_answer_up_to_their_rungs():
  from rlpt.tokenizers import ByteTokenizer
  from rlpt.tokenizers.prompts import PromptFormat
  import types
  fmt = PromptFormat(ByteTokenizer())
  tasks = [types.SimpleNamespace(domain="rlpt/x-v0")]
  assert rl_signal.budget(fmt, _Pool(100, 30), tasks) == (128, 64)  # BOS + 100; 1.5 x 30 + 8 = 53
  assert rl_signal.budget(fmt, _Pool(150, 100), tasks) == (192, 256)  # 158 -> 256
  assert rl_signal.budget(fmt, _Pool(150, 400), tasks) == (192, 512)  # 608 > 512: the demo + 8 fits
  with pytest.raises(ValueError, match="rlpt/x-v0 needs 2001 prompt tokens; the longest rung is 1024"):
    rl_signal.budget(fmt, _Pool(2000, 4), tasks)


def test_an_interrupted_signal_run_keeps_the_groups_it_finished(tmp_path, monkeypatch, capsys):
  row = {"greedy": 0.5, "sampled": 0.25, "greedy_masked": 0.0, "sampled_masked": 0.0}

  def measure(model, domains, tasks, samples, batch, seed, on_group, **kw):
    on_group({"model": model, "rows": {domains[0]: row}, "seconds": {"128+64": 6.0},
              "pending": list(domains[1:])})
    raise KeyboardInterrupt  # stopped during the second group

  monkeypatch.setattr(rl_signal, "measure", measure)
  out = tmp_path / "signal.json"
  with pytest.raises(KeyboardInterrupt):
    rl_signal.main(["--model=m", "--domains=rlpt/a-v0,rlpt/b-v0", f"--out={out}", "--label=warm"])
  kept = json.loads(out.read_text())
  assert kept["rows"] == {"rlpt/a-v0": row} and kept["pending"] == ["rlpt/b-v0"]
  assert kept["label"] == "warm" and not (tmp_path / "signal.json.tmp").exists()
  rl_signal.main([f"--compare={out}"])
  text = capsys.readouterr().out
  assert "| a |  50.0 |  25.0 * |" in text and "warm: interrupted, not measured: b" in text


class _SeedPool:
  """Prompts whose length follows the task's seed: 110 characters, or 180 for
  one seed in 16 (a long task)."""

  def reset(self, tasks):
    import types
    return [types.SimpleNamespace(text="p" * (180 if t.seed % 16 == 0 else 110),
                                  info={"demonstration": "d" * 30}) for t in tasks]


def test_each_group_is_budgeted_for_the_tasks_its_run_evaluates():
  from rlpt.data import eval_tasks
  from rlpt.tokenizers import ByteTokenizer
  from rlpt.tokenizers.prompts import PromptFormat
  fmt, pool = PromptFormat(ByteTokenizer()), _SeedPool()
  domains = [f"rlpt/d{i}-v0" for i in range(12)]
  long = lambda ts: any(t.seed % 16 == 0 for t in ts)  # noqa: E731
  # No domain's own 4 held-out tasks hold a long prompt, so all 12 form one
  # group at 128 tokens; the run of the 12 draws other tasks, one of them long.
  assert not any(long(eval_tasks([d], 4, seed=1)) for d in domains)
  assert long(eval_tasks(domains, 4, seed=1))
  assert rl_signal.plan(fmt, pool, domains, 4, seed=1) == [((192, 64), domains)]


def _fake_groups(monkeypatch, runs):
  """rl_signal with a fixed plan and an evaluation that records the groups it
  is asked for (no model, no environments)."""
  evaluated = []

  def evaluate(config):
    ds = list(config.domains.ids)
    evaluated.append(ds)
    out = {}
    for i, d in enumerate(ds):
      for kind in ("success", "sampled_success"):
        out[f"{kind}/{d}"], out[f"{kind}_masked/{d}"] = 0.25 * (i + 1), 0.0
    return out

  monkeypatch.setattr(rl_signal, "_plan_for", lambda *a: runs)
  monkeypatch.setattr(rl_signal, "_config", lambda model, ds, *a: types.SimpleNamespace(
      domains=types.SimpleNamespace(ids=ds)))
  monkeypatch.setattr(rl_signal, "_evaluate", evaluate)
  return evaluated


def test_a_signal_run_resumes_where_it_stopped_with_its_plan(tmp_path, monkeypatch):
  a, b, c = "rlpt/a-v0", "rlpt/b-v0", "rlpt/c-v0"
  runs = [((128, 64), [a, b]), ((256, 128), [c])]
  evaluated = _fake_groups(monkeypatch, runs)
  out = tmp_path / "signal.json"
  flags = ["--model=m", f"--domains={a},{b},{c}", f"--out={out}", "--resume", "--max-runs=1"]
  with pytest.raises(SystemExit) as stop:  # one group of two: the rest pending
    rl_signal.main(flags)
  assert stop.value.code == rl_signal.PENDING and evaluated == [[a, b]]
  first = json.loads(out.read_text())
  assert first["pending"] == [c] and first["domains"] == [a, b, c]
  rl_signal.main(flags)  # the second process measures only what is pending
  assert evaluated == [[a, b], [c]]
  done = json.loads(out.read_text())
  assert done["pending"] == [] and done["rows"][a] == first["rows"][a]
  assert done["rows"][b]["sampled"] == 0.5 and done["rows"][c]["new_tokens"] == 128
  assert set(done["seconds"]) == {"128+64", "256+128"}
  rl_signal.main(flags)  # nothing left: nothing evaluated again
  assert evaluated == [[a, b], [c]]


def test_resume_refuses_another_measurement(tmp_path, monkeypatch):
  _fake_groups(monkeypatch, [((128, 64), ["rlpt/a-v0"])])
  out = tmp_path / "signal.json"
  rl_signal.main(["--model=m", "--domains=rlpt/a-v0", f"--out={out}"])
  with pytest.raises(SystemExit, match=r"another measurement \(tasks: 16 there, 8 here\)"):
    rl_signal.main(["--model=m", "--domains=rlpt/a-v0", f"--out={out}", "--resume", "--tasks=8"])
  with pytest.raises(SystemExit, match="--resume needs --out"):
    rl_signal.main(["--model=m", "--domains=rlpt/a-v0", "--resume"])
