"""The main job (or another experiment) over several seeds: per-domain mean and
spread, and a bit-identity check.

    python benchmarks/main_job_seeds.py                      # seeds 0,1,2 (sequentially)
    python benchmarks/main_job_seeds.py --parallel=3 --one_core_replica
    python benchmarks/main_job_seeds.py --reuse              # only aggregate finished runs
    python benchmarks/main_job_seeds.py --config=experiments/grpo_mixed.py --root=runs/grpo_mixed_seeds
    python benchmarks/main_job_seeds.py --set=engine.enabled=True --root=runs/main_engine
    python benchmarks/main_job_seeds.py --config=experiments/grpo_smollm2.py --root=runs/smollm2_seeds --before_warmup

Runs `launch.train --config=CONFIG --config.seed=S` for
each seed into ROOT/seed<S> (the cached base is shared: its pre-training has
its own seed), then prints, per domain, held-out success of the base and after
the last step (sampled pass@1 and greedy) as the mean over seeds with
[min-max], and the median step time of each run. Every seed is evaluated on
the same held-out tasks (``eval.seed``), so the spread is the training's.

--before_warmup (a run whose base is warmed up by ``base.experiment``, e.g.
experiments/grpo_smollm2.py): also measures the imported model before its
warm-up on the same held-out tasks, so the table reads base -> warm-up -> RL.
ROOT/summary.md holds the table and ROOT/seeds.png plots each domain's sampled
success at the three points (mean over seeds, min-max bars).

--one_core_replica runs seed 0 a second time restricted to one core (taskset)
and checks that every metric that is not a timing equals the two-core run's
bit for bit: launch.train pins XLA's CPU thread pool (--cpu_threads=2), which
is what makes the core count irrelevant.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NON_DETERMINISTIC = ("time/", "throughput/", "accelerator/", "env_latency", "env/queue_depth",
                     "checkpoint/")  # timings and the checkpoint writer's seconds


def _rows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()]


def _evals(rows: list[dict]) -> tuple[dict, dict]:
  evals = [r for r in rows if r["kind"] == "eval"]
  return evals[0], evals[-1]


def _step_time(rows: list[dict]) -> float:
  return statistics.median(r["time/step"] for r in rows if r["kind"] == "train" and "time/step" in r)


def _deterministic(rows: list[dict]) -> list[dict]:
  """The train and eval rows without their timings (checkpoint rows are save
  timings only, and a run killed after a save and resumed lacks that save's row)."""
  return [{k: v for k, v in r.items() if not k.startswith(NON_DETERMINISTIC)} for r in rows
          if r["kind"] in ("train", "eval")]


TRAIN_TAIL = 50


def _train_success(rows: list[dict], domain: str) -> float:
  """Success on the training batches' tasks over the last TRAIN_TAIL steps
  (a domain absent from a step's batch does not count for that step)."""
  train = [r for r in rows if r["kind"] == "train"][-TRAIN_TAIL:]
  values = [r[f"success/{domain}"] for r in train if r.get(f"success/{domain}") is not None]
  return sum(values) / len(values) if values else float("nan")


def _fmt(values: list[float]) -> str:
  mean = sum(values) / len(values)
  return f"{mean:.3f} [{min(values):.3f}-{max(values):.3f}]" if len(values) > 1 else f"{mean:.3f}"


def before_warmup(config: str, root: str, overrides: list[str]) -> dict:
  """Held-out success of the run's imported model before its warm-up: the
  run's config (its domains, eval tasks, sampling) with ``base`` set to the
  warm-up's own base, evaluated before any step (ROOT/before_warmup.json)."""
  path = os.path.join(root, "before_warmup.json")
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  cfg = _load_train_config(config, overrides)
  from rlpt.bases import built_base
  built = built_base(cfg.base)
  if built.runner != "warmup":
    sys.exit(f"--before_warmup: {config}'s base is built by a {built.runner!r} config, not a warm-up.")
  import dataclasses
  cfg = dataclasses.replace(cfg, base=dataclasses.replace(built.config.base, cache_dir=cfg.base.cache_dir),
                            checkpoint=dataclasses.replace(cfg.checkpoint, every=0), progress=False)
  from rlpt.trainer import Trainer
  trainer = Trainer(cfg, os.path.join(root, "before_warmup"))
  try:
    out = trainer.evaluate()
  finally:
    trainer.close()
  with open(path, "w") as f:
    json.dump(out, f)
  return out


def _load_train_config(config: str, overrides: list[str]):
  from rlpt.config import TrainConfig, from_config_dict
  from rlpt.bases import load_experiment_config
  path, _, arg = config.partition(":")
  cd = load_experiment_config(path, arg)
  for o in overrides:
    key, _, value = o.partition("=")
    node = cd
    *parents, leaf = key.split(".")
    for k in parents:
      node = node[k]
    node[leaf] = type(node[leaf])(value) if not isinstance(node[leaf], bool) else value.lower() == "true"
  return from_config_dict(TrainConfig, cd)


def plot(workdirs: dict[int, str], before: dict | None, path: str) -> None:
  """Each domain's sampled success: before the warm-up (if measured), at the
  run's start and after its last step; bars are the mean over seeds, whiskers min-max."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  per = {s: _evals(_rows(w)) for s, w in workdirs.items()}
  first = next(iter(per.values()))[0]
  domains = [k.split("/", 1)[1] for k in first if k.startswith("sampled_success/") and "_masked" not in k]
  points = ([("before warm-up", lambda s, d: before[f"sampled_success/{d}"])] if before else []) + [
      ("start of RL", lambda s, d: per[s][0][f"sampled_success/{d}"]),
      ("after RL", lambda s, d: per[s][1][f"sampled_success/{d}"])]
  fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(domains)), 4))
  width = 0.8 / len(points)
  for i, (label, get) in enumerate(points):
    values = np.array([[get(s, d) for s in per] for d in domains])
    mean = values.mean(1)
    x = np.arange(len(domains)) + (i - (len(points) - 1) / 2) * width
    ax.bar(x, mean, width, label=label,
           yerr=np.stack([mean - values.min(1), values.max(1) - mean]))
  ax.set_xticks(np.arange(len(domains)))
  ax.set_xticklabels([d.split("/")[-1].removesuffix("-v0") for d in domains], rotation=30, ha="right",
                     fontsize=8)
  ax.set_ylabel("held-out sampled success")
  ax.set_title(f"seeds {sorted(per)}: mean, min-max")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def table(workdirs: dict[int, str], before: dict | None = None) -> str:
  per = {s: _evals(_rows(w)) for s, w in workdirs.items()}
  first = next(iter(per.values()))[0]
  domains = [k.split("/", 1)[1] for k in first if k.startswith("sampled_success/")]
  rows = {s: _rows(w) for s, w in workdirs.items()}
  pre = ("before warm-up | ", "---:|") if before else ("", "")
  lines = [f"seeds {sorted(workdirs)}: mean [min-max]; held-out tasks, and the training "
           f"batches' success over the last {TRAIN_TAIL} steps" + (
               "; base: the run's start (after the warm-up)" if before else ""), "",
           f"| domain | sampled: {pre[0]}base | final | change | greedy: {pre[0]}base | final | change "
           "| training batches |",
           f"|---|{pre[1]}---:|---:|---:|{pre[1]}---:|---:|---:|---:|"]
  for d in domains:
    cells = []
    for kind in ("sampled_success", "success"):
      base = [per[s][0][f"{kind}/{d}"] for s in per]
      final = [per[s][1][f"{kind}/{d}"] for s in per]
      if before:
        cells.append(_fmt([before[f"{kind}/{d}"]]))
      cells += [_fmt(base), _fmt(final), _fmt([f - b for b, f in zip(base, final)])]
    cells.append(_fmt([_train_success(rows[s], d) for s in per]))
    name = d.split("/")[-1]
    lines.append(f"| {'**mean**' if d == 'mean' else name} | " + " | ".join(cells) + " |")
  times = {s: _step_time(_rows(w)) for s, w in workdirs.items()}
  lines += ["", "median step time (s): " + ", ".join(f"seed {s} {t:.2f}" for s, t in times.items())]
  return "\n".join(lines)


def _command(seed: int, workdir: str, one_core: bool, config: str,
             overrides: list[str]) -> list[str]:
  cmd = [sys.executable, "-m", "launch.train", f"--config={config}",
         f"--workdir={workdir}", f"--config.seed={seed}", "--config.progress=false"]
  cmd += [f"--config.{o}" for o in overrides]
  if one_core:
    cmd = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] + cmd
  return cmd


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", default="experiments/grpo_default.py", help="the experiment (and :arg)")
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--root", default="runs/main_job_seeds")
  p.add_argument("--parallel", type=int, default=1, help="runs at once (timings then share cores)")
  p.add_argument("--one_core_replica", action="store_true")
  p.add_argument("--reuse", action="store_true", help="aggregate existing runs, start none")
  p.add_argument("--before_warmup", action="store_true",
                 help="also evaluate the imported model before its warm-up (see above)")
  p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                 help="a config override for every run, e.g. --set=engine.enabled=True")
  a = p.parse_args()
  seeds = [int(s) for s in a.seeds.split(",")]
  workdirs = {s: os.path.join(a.root, f"seed{s}") for s in seeds}
  jobs = [(_command(s, w, False, a.config, a.set), w) for s, w in workdirs.items()]
  replica = os.path.join(a.root, "seed0-one-core")
  if a.one_core_replica:
    jobs.append((_command(0, replica, True, a.config, a.set), replica))
  if not a.reuse:
    running: list[subprocess.Popen] = []
    for cmd, workdir in jobs:
      os.makedirs(workdir, exist_ok=True)
      log = open(os.path.join(workdir, "stdout.log"), "w")
      running.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
      while len([r for r in running if r.poll() is None]) >= a.parallel:
        running[[r.poll() for r in running].index(None)].wait()
    for r in running:
      if r.wait():
        sys.exit(f"{' '.join(r.args)} failed (exit {r.returncode}); see its stdout.log")
  before = before_warmup(a.config, a.root, a.set) if a.before_warmup else None
  text = table(workdirs, before)
  print(text)
  with open(os.path.join(a.root, "summary.md"), "w") as f:
    f.write(f"# {a.config}, seeds {a.seeds}\n\n{text}\n\n![sampled success](seeds.png)\n")
  plot(workdirs, before, os.path.join(a.root, "seeds.png"))
  if a.one_core_replica:
    two = _deterministic(_rows(os.path.join(a.root, "seed0")))
    one = _deterministic(_rows(replica))
    same = two == one
    diff = next((f"step {x['step']} {x['kind']}: {k}" for x, y in zip(two, one)
                 for k in x if x[k] != y.get(k)), "row count") if not same else ""
    n = sum(len(r) - 2 for r in two)
    print(f"\nseed 0 on one core vs two: {'bit-identical' if same else 'DIFFERENT at ' + diff} "
          f"({len(two)} rows, {n} values that are not timings)")
    if not same:
      sys.exit(1)


if __name__ == "__main__":
  main()
