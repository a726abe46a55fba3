r"""Curricula compared on the all-domains job: the same base, steps and batch.

    python benchmarks/curriculum.py [--seeds=0,1] [--steps=200] [--out=runs/curriculum]
    python benchmarks/curriculum.py --strategies=uniform --seeds=0 --steps=4 --arg=smoke  # tiny

For each strategy (``uniform``, ``success_band``, ``learning_progress``, and
``<best>+adaptive``: adaptive difficulty on top of the best of those three by
mean held-out success) and seed, runs experiments/grpo_all_domains.py
(``launch.train``, one run at a time) and reports, mean over seeds [min-max]:

* held-out sampled pass@1 after the last step, mean over all domains and over
  the domains any strategy learned (a run's gain, final - base, at least
  ``--learned`` on that domain, in any run);
* the informative-group share (groups with reward variance) over all steps;
* compute wasted on groups without signal: the share of sampled tokens, and of
  environment seconds;
* the run's wall time.

Writes OUT/result.json and prints a markdown table; each run's folder keeps its
report (summary.md, domains.csv, domain_shares.png, eval_success.png).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "experiments", "grpo_all_domains.py")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1"], "Training seeds of every strategy.")
_STEPS = flags.DEFINE_integer("steps", 200, "RL steps of every run.")
_STRATEGIES = flags.DEFINE_list("strategies", ["uniform", "success_band", "learning_progress"],
                                "The strategies; adaptive difficulty is added on the best.")
_ADAPTIVE = flags.DEFINE_bool("adaptive", True, "Also run adaptive difficulty on the best.")
_ARG = flags.DEFINE_string("arg", "", "Extra grpo_all_domains argument items (e.g. smoke).")
_LEARNED = flags.DEFINE_float("learned", 0.25, "A domain is learned when a run gains this much.")
_OUT = flags.DEFINE_string("out", os.path.join(ROOT, "runs", "curriculum"), "Output folder.")
_REUSE = flags.DEFINE_bool("reuse", True, "Keep runs that already finished in OUT.")


def run(name: str, arg: str, seed: int) -> dict:
  workdir = os.path.join(_OUT.value, f"{name}-seed{seed}")
  done = os.path.join(workdir, "wall.json")
  if not (_REUSE.value and os.path.exists(done)):
    subprocess.run(["rm", "-rf", workdir], check=True)
    os.makedirs(workdir)
    cmd = [sys.executable, "-m", "launch.train", f"--config={CONFIG}:{arg}", f"--workdir={workdir}",
           f"--config.seed={seed}", f"--config.steps={_STEPS.value}", "--config.progress=False",
           "--config.checkpoint.every=0"]
    print(" ".join(cmd[1:]), flush=True)
    t = time.perf_counter()
    with open(os.path.join(workdir, "train.log"), "w") as log:
      subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=True)
    with open(done, "w") as f:
      json.dump({"wall_s": time.perf_counter() - t}, f)
  with open(done) as f:
    wall = json.load(f)["wall_s"]
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  with open(os.path.join(workdir, "domains.csv")) as f:
    domains = {r["domain"]: r for r in csv.DictReader(f)}
  train = [r for r in rows if r["kind"] == "train"]
  evals = [r for r in rows if r["kind"] == "eval"]
  tokens = sum(r["signal/tokens"] for r in train)
  seconds = sum(r["env_seconds/total"] for r in train)
  rss = [r["host/rss_mib"] for r in train]
  return {
      "name": name, "seed": seed, "wall_s": wall, "workdir": workdir,
      "step_s": statistics.median(r["time/step"] for r in train),
      "rss_mib": {"first": rss[0], "last": rss[-1], "max": max(rss),
                  "median_second_half": statistics.median(rss[len(rss) // 2:])},
      "compiles": {"step_1": train[0]["host/compiles"], "half": train[len(train) // 2]["host/compiles"],
                   "last": train[-1]["host/compiles"]},
      "final": evals[-1]["sampled_success/mean"], "base": evals[0]["sampled_success/mean"],
      "gain": {d: float(r["sampled_success_gain"]) for d, r in domains.items()},
      "final_by_domain": {d: float(r["sampled_success_final"]) for d, r in domains.items()},
      "informative_share": (sum(r["signal/informative_share"] * r["signal/groups"] for r in train)
                            / sum(r["signal/groups"] for r in train)),
      "no_signal_token_share": sum(r["signal/no_signal_token_share"] * r["signal/tokens"]
                                   for r in train) / tokens,
      "no_signal_env_share": (sum(r["env_seconds/no_signal_share"] * r["env_seconds/total"]
                                  for r in train) / seconds if seconds else 0.0)}


def _spread(xs) -> str:
  return f"{statistics.mean(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def main(_):
  os.makedirs(_OUT.value, exist_ok=True)
  seeds = [int(s) for s in _SEEDS.value]
  extra = f",{_ARG.value}" if _ARG.value else ""
  results = {s: [run(s, f"strategy={s}{extra}", seed) for seed in seeds]
             for s in _STRATEGIES.value}
  best = max(results, key=lambda s: statistics.mean(r["final"] for r in results[s]))
  if _ADAPTIVE.value:
    results[f"{best}+adaptive"] = [run(f"{best}+adaptive", f"strategy={best},adaptive{extra}", seed)
                                   for seed in seeds]
  every = [r for rs in results.values() for r in rs]
  learned = sorted({d for r in every for d, g in r["gain"].items() if g >= _LEARNED.value})
  table = ["| curriculum | held-out, all domains | held-out, learned domains | informative "
           "groups | tokens on no-signal groups | env seconds on no-signal groups | wall time (s) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
  for name, rs in results.items():
    on_learned = [statistics.mean(r["final_by_domain"][d] for d in learned) if learned else 0.0
                  for r in rs]
    table.append(f"| {name} | {_spread([r['final'] for r in rs])} | {_spread(on_learned)} | "
                 f"{_spread([r['informative_share'] for r in rs])} | "
                 f"{_spread([r['no_signal_token_share'] for r in rs])} | "
                 f"{_spread([r['no_signal_env_share'] for r in rs])} | "
                 f"{statistics.mean(r['wall_s'] for r in rs):.0f} |")
  n = len(every[0]["gain"])
  print(f"\n{n} domains, {_STEPS.value} steps, seeds {seeds}; best by held-out: {best}; "
        f"{len(learned)} domains learned (gain >= {_LEARNED.value} in some run)\n")
  print("\n".join(table))
  print("\nper run: median step s, resident MiB first / last / max, XLA compiles at step 1 / "
        "half-way / last")
  for r in every:
    m, c = r["rss_mib"], r["compiles"]
    print(f"  {r['name']} seed {r['seed']}: {r['step_s']:.2f} s; {m['first']:.0f} / "
          f"{m['last']:.0f} / {m['max']:.0f} MiB; {c['step_1']:.0f} / {c['half']:.0f} / "
          f"{c['last']:.0f}")
  with open(os.path.join(_OUT.value, "result.json"), "w") as f:
    json.dump({"steps": _STEPS.value, "seeds": seeds, "best": best, "learned": learned,
               "table": table, "runs": every}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
