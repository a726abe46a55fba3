"""rlpt.evaluation.Evaluator against a scripted ``play``: chunking and padding to
the compiled batch, the keys of each chunk and mode, infra failures left out of
the means, answers decoded from the episode tokens."""

import types

import jax
import numpy as np
import pytest

from rlpt.config import EvalConfig
from rlpt.evaluation import Evaluator
from rlpt.keys import run_key
from rlpt.rollout.records import Outcome
from rlpt.sampling import SamplingParams
from rlpt.tokenizers import ByteTokenizer
from rlpt.tokenizers.prompts import PromptFormat

DOMAINS = ("rlpt/math-add-easy-v0", "rlpt/strings-reverse-easy-v0")
GREEDY, SAMPLED = SamplingParams(0.0, 0, 1.0), SamplingParams(1.0, 0, 1.0)


class Script:
  """A ``play`` that records its calls; a task passes iff its seed is even, and
  tasks of the second domain with seed % 3 == 0 are infrastructure failures."""

  def __init__(self):
    self.calls = []

  def __call__(self, tasks, sampling, key):
    self.calls.append((len(tasks), sampling, jax.random.key_data(key).tolist()))
    final = [Outcome(float(t.seed % 2 == 0), t.seed % 2 == 0, "PASS" if t.seed % 2 == 0 else "FAIL",
                    t.domain == DOMAINS[1] and t.seed % 3 == 0, {}) for t in tasks]
    tok = ByteTokenizer()
    rows = [[tok.bos_id] + tok.encode("q?") + tok.encode(f"a{t.seed % 10}") + [tok.eos_id] for t in tasks]
    width = max(map(len, rows))
    tokens = np.full((len(rows), width), tok.pad_id, np.int32)
    mask = np.zeros((len(rows), width - 1), np.float32)
    for i, r in enumerate(rows):
      tokens[i, :len(r)] = r
      mask[i, 2:len(r) - 1] = 1.0  # targets "a<d>" and EOS
    return types.SimpleNamespace(final=final, seq=types.SimpleNamespace(tokens=tokens, loss_mask=mask))


def _evaluator(tasks_per_domain=5, sampled=True):
  return Evaluator(EvalConfig(every=10, tasks_per_domain=tasks_per_domain, sampled=sampled),
                   DOMAINS, seed=3, batch_size=4, modes=(GREEDY, SAMPLED),
                   prompt_format=PromptFormat(ByteTokenizer()))


def test_success_means_chunks_and_keys():
  ev, play = _evaluator(), Script()
  out = ev.run(play, step=7)
  # 10 tasks in chunks of 4 (the last padded), once greedy and once sampled.
  assert [c[0] for c in play.calls] == [4] * 6
  assert [c[1] for c in play.calls] == [GREEDY] * 3 + [SAMPLED] * 3
  keys = [jax.random.key_data(run_key(3, "eval", 7, mode, chunk)).tolist()
          for mode in (0, 1) for chunk in range(3)]
  assert [c[2] for c in play.calls] == keys
  for prefix in ("success", "sampled_success"):
    per = {}
    for d in DOMAINS:
      graded = [t for t in ev.tasks if t.domain == d and not (d == DOMAINS[1] and t.seed % 3 == 0)]
      per[d] = np.mean([t.seed % 2 == 0 for t in graded]) if graded else np.nan
      np.testing.assert_allclose(out[f"{prefix}/{d}"], per[d])
    np.testing.assert_allclose(out[f"{prefix}/mean"], np.nanmean(list(per.values())))
    for d in DOMAINS:  # each domain is its own family here
      np.testing.assert_allclose(out[f"family_{prefix}/{d.split('/')[1].split('-')[0]}"], per[d])
    # The masked samples are counted beside the success they left out of.
    masked = {d: sum(d == DOMAINS[1] and t.domain == d and t.seed % 3 == 0 for t in ev.tasks) for d in DOMAINS}
    assert masked[DOMAINS[1]] > 0
    assert {d: out[f"{prefix}_masked/{d}"] for d in DOMAINS} == masked
    assert out[f"{prefix}_masked/total"] == sum(masked.values())
  assert out["eval/domains"] == 2 and out["eval/tasks"] == 10
  assert set(_evaluator(sampled=False).run(Script(), 7)) == (
      {f"success/{d}" for d in DOMAINS} | {f"success_masked/{d}" for d in DOMAINS}
      | {"success/mean", "success_masked/total", "family_success/math",
         "family_success/strings", "eval/domains", "eval/tasks"})


def test_the_success_table_shows_masked_samples_beside_success():
  from rlpt.metrics.report import success_table

  base = {"success/mean": 0.5, "success/rlpt/a-v0": 0.5, "success_masked/rlpt/a-v0": 0.0, "success_masked/total": 0.0}
  final = {"success/mean": 0.9, "success/rlpt/a-v0": 0.9, "success_masked/rlpt/a-v0": 7.0, "success_masked/total": 7.0}
  table = success_table(base, final, ["rlpt/a-v0"])
  assert "greedy: masked" in table.splitlines()[0]
  assert "| a-v0 | 0.500 | 0.900 | +0.400 | 0 / 7 |" in table and "| mean | 0.500 | 0.900 | +0.400 | 0 / 7 |" in table


def test_rotating_subsets_cover_every_domain_in_turn():
  domains = tuple(f"rlpt/f{i % 2}-d{i}-easy-v0" for i in range(5))
  ev = Evaluator(EvalConfig(every=10, tasks_per_domain=2, domains_per_eval=2), domains, seed=0,
                 batch_size=4, modes=(GREEDY, SAMPLED), prompt_format=PromptFormat(ByteTokenizer()))
  # Full passes before training and after the last step; pairs in turn between.
  assert ev.domains_at(0, 60) == domains and ev.domains_at(60, 60) == domains
  assert [ev.domains_at(s, 60) for s in (10, 20, 30, 40, 50)] == [
      domains[0:2], domains[2:4], (domains[4], domains[0]), domains[1:3], domains[3:5]]
  assert ev.domains_at(55, 55) == domains  # the last step, off the schedule: full
  play = Script()
  out = ev.run(play, 20, ev.domains_at(20, 60))
  assert out["eval/domains"] == 2 and out["eval/tasks"] == 4
  assert {k for k in out if k.startswith("success/")} == {
      "success/rlpt/f0-d2-easy-v0", "success/rlpt/f1-d3-easy-v0", "success/mean"}
  assert {k for k in out if k.startswith("family_success/")} == {"family_success/f0",
                                                                 "family_success/f1"}
  assert sum(c[0] for c in play.calls) == 2 * 4  # one padded chunk per measure
  with pytest.raises(ValueError, match=r"cannot evaluate \['x'\]"):
    ev.run(play, 20, ["x"])
  # Off by default: every evaluation covers every domain.
  assert _evaluator().domains_at(10, 60) == DOMAINS


def test_fixed_tasks_and_schedule():
  a, b = _evaluator(), _evaluator()
  assert a.tasks == b.tasks and len(a.tasks) == 10 and {t.split for t in a.tasks} == {"eval"}
  assert [s for s in range(1, 28) if a.due(s, last_step=27)] == [10, 20, 27]


def test_answers_are_decoded_with_their_verdicts():
  ev, play = _evaluator(), Script()
  tasks = ev.tasks[:5]
  out = ev.answers(play, tasks, step=2, sampled=True)
  assert [c[1] for c in play.calls] == [SAMPLED, SAMPLED]
  assert play.calls[0][2] == jax.random.key_data(run_key(3, "answers", 2, 1, 0)).tolist()
  assert [(o["domain"], o["prompt"], o["answer"], o["verdict"]) for o in out] == [
      (t.domain, "q?", f"a{t.seed % 10}", "PASS" if t.seed % 2 == 0 else "FAIL") for t in tasks]
  with pytest.raises(ValueError, match="unknown key purpose"):
    run_key(3, "answer", 0)


def test_the_held_out_set_is_the_same_for_every_training_seed():
  """eval.seed draws the tasks (fixed by default), the run's seed only the keys."""
  def tasks(run_seed, eval_seed=1):
    ev = Evaluator(EvalConfig(tasks_per_domain=6, seed=eval_seed), DOMAINS, seed=run_seed,
                   batch_size=4, modes=(GREEDY, SAMPLED), prompt_format=PromptFormat(ByteTokenizer()))
    return [(t.domain, t.seed, t.split) for t in ev.tasks]
  assert tasks(0) == tasks(1) == tasks(7)
  assert tasks(0) != tasks(0, eval_seed=2)
  assert {split for _, _, split in tasks(0)} == {"eval"}


class RecordTasks(Script):
  """A ``play`` that also records the tasks of each call."""

  def __init__(self):
    super().__init__()
    self.tasks = []

  def __call__(self, tasks, sampling, key):
    self.tasks.append([(t.domain, t.seed) for t in tasks])
    return super().__call__(tasks, sampling, key)


def test_samples_play_each_task_k_times_in_the_sampled_measure_only():
  k = 3
  ev = Evaluator(EvalConfig(every=10, tasks_per_domain=5, samples=k), DOMAINS, seed=3,
                 batch_size=4, modes=(GREEDY, SAMPLED), prompt_format=PromptFormat(ByteTokenizer()))
  play = RecordTasks()
  out = ev.run(play, step=0)
  greedy_calls = [c for c in play.calls if c[1] == GREEDY]
  sampled_calls = [c for c in play.calls if c[1] == SAMPLED]
  assert len(greedy_calls) == 3  # 10 tasks, chunks of 4: greedy plays each once
  assert len(sampled_calls) == 8  # 30 plays, chunks of 4 (the last padded)
  played = [t for call in play.tasks[3:] for t in call][:10 * k]
  expected = [(t.domain, t.seed) for t in ev.tasks for _ in range(k)]
  assert played == expected
  # Every sampled chunk has its own key, so the k plays of a task are k draws.
  keys = [c[2] for c in sampled_calls]
  assert len({str(x) for x in keys}) == len(keys)
  # The scripted verdict is a function of the task: the mean equals the greedy
  # one, and masked plays count k times.
  for d in DOMAINS:
    np.testing.assert_allclose(out[f"sampled_success/{d}"], out[f"success/{d}"])
    assert out[f"sampled_success_masked/{d}"] == k * out[f"success_masked/{d}"]
  assert out["eval/tasks"] == 10 and out["eval/sampled_episodes"] == 10 * k


def test_samples_must_be_positive():
  with pytest.raises(ValueError, match="eval.samples must be > 0, got 0"):
    EvalConfig(samples=0)
