"""Where RL has signal: held-out success of an imported model on many domains,
greedy and sampled, with the domains whose sampled success lies in 5-90% marked.

    python benchmarks/rl_signal.py --model=smollm2-135m-instruct --out=runs/signal/smollm2_base.json
    python benchmarks/rl_signal.py --model=runs/warmup_smollm2/model --out=runs/signal/smollm2_warm.json
    python benchmarks/rl_signal.py --compare=runs/signal/smollm2_base.json,runs/signal/smollm2_warm.json

GRPO learns from a group only when its samples disagree: a domain the policy
always fails (or always solves) gives every sample the same advantage, 0. The
sampled pass@1 p of a domain says how often a group of G has signal
(1 - p^G - (1-p)^G); 5-90% is where a group of 8 disagrees at least a third
of the time, and ``*`` marks it.

``--model``: a model name (``smollm2-135m-instruct``, ``gemma3-270m``), a .gguf
file or a Hugging Face directory (a warm-up's ``WORKDIR/model``), laid out as
experiments/grpo_hf_import.py lays it out (instruct prompts in the model's
chat template, or plain text for a base model without one). Each domain is
measured on held-out tasks (the eval split, ``eval.seed``; which ones depends
on the run's list of domains, here its budget group's): ``--tasks`` of them,
once greedy and ``--samples`` times sampled at the rollout's temperature
(1.0). Domains are grouped by the token budget their prompts and
demonstrations need (`budget`, `plan`), one compiled shape per group, so
short-answer domains do not pay for CAD's scripts. ``--groups`` picks among
GROUPS; ``--domains`` lists ids instead. The JSON written to ``--out`` holds
every domain's counts, the budgets and the seconds each group took; it is
rewritten after each group, so an interrupted run keeps what it finished
(``pending``: the domains it did not reach), and ``--resume`` goes on with it,
its held-out tasks unchanged (without an earlier file it starts one).
``--max-runs=N`` stops after N groups, with exit status 3 while domains are
pending: a loop of fresh processes keeps a large model's memory down:

    while python benchmarks/rl_signal.py --model=gemma3-270m --batch=64 --max-runs=2 \
        --resume --out=runs/signal/gemma_base.json; [ $? = 3 ]; do :; done
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from experiments.domains import DEFAULT, MIXED_BUILTIN, MIXED_DATASETS, MIXED_REAL  # noqa: E402

# The default and mixed jobs' domains (the mixed job's reasoning-gym
# generators unbounded: instruct prompts have their own bounds), reasoning-gym's
# arithmetic and GSM-style generators, HumanEval-style and generated code
# graded by hidden tests, and the mission's full rungs: build123d parts and an
# assembly, PDF financial reports, a shell task graded on its workspace.
GROUPS = {
    "default": DEFAULT,
    "mixed": tuple(d for d in MIXED_BUILTIN + MIXED_DATASETS if d not in DEFAULT) + (
        "rlpt/rg-basic-arithmetic-easy-v0", "rlpt/rg-chain-sum-easy-v0", "rlpt/rg-products-easy-v0",
        "rlpt/rg-spell-backward-easy-v0", "rlpt/rg-count-bits-easy-v0") + MIXED_REAL,
    "arithmetic": ("rlpt/math-add-easy-v0", "rlpt/rg-basic-arithmetic-medium-v0",
                   "rlpt/rg-decimal-arithmetic-easy-v0", "rlpt/rg-gsm-symbolic-medium-v0"),
    "code": ("rlpt/code-quadratic-medium-v0", "rlpt/code-humaneval-hard-v0"),
    "mission": ("rlpt/cad-plate-easy-v0", "rlpt/cad-bracket-medium-v0", "rlpt/cad-assembly-pin-medium-v0",
                "rlpt/finance-report-cell-easy-v0", "rlpt/finance-report-compute-easy-v0",
                "rlpt/terminal-grep-medium-v0"),
}
LOW, HIGH = 0.05, 0.90
PROMPT_LADDER = (128, 192, 256, 384, 640, 1024)
ANSWER_LADDER = (64, 128, 256, 512)
PENDING = 3  # the exit status of a run that stopped at --max-runs with domains left


def has_signal(p: float) -> bool:
  return LOW <= p <= HIGH


def _rung(ladder, need: int, what: str, domain: str) -> int:
  for x in ladder:
    if x >= need:
      return x
  raise ValueError(f"{domain} needs {need} {what} tokens; the longest rung is {ladder[-1]}.")


def budget(fmt, pool, tasks) -> tuple[int, int]:
  """(prompt tokens, new tokens) for held-out ``tasks``: the longest templated
  prompt, and room for 1.5x the longest demonstration (an instruct model says
  more than the demonstration; at most the longest rung), each rounded up to a
  rung of its ladder."""
  prompts = pool.reset(tasks)
  prompt, p_domain = max((len(fmt.prompt_ids(p.text)), t.domain) for p, t in zip(prompts, tasks))
  demo, d_domain = max((len(fmt.tokenizer.encode(p.info["demonstration"])), t.domain)
                       for p, t in zip(prompts, tasks))
  room = math.ceil(1.5 * demo) + 8
  if room > ANSWER_LADDER[-1]:  # the longest rung, if the demonstration itself fits
    room = demo + 8
  return (_rung(PROMPT_LADDER, prompt, "prompt", p_domain), _rung(ANSWER_LADDER, room, "answer", d_domain))


def plan(fmt, pool, domains, tasks: int, seed: int) -> list[tuple[tuple[int, int], list[str]]]:
  """The evaluation runs: ((prompt tokens, new tokens), domains) each. Domains
  are grouped by the budget of their own held-out tasks; as a run's held-out
  tasks depend on its list of domains (one stream draws them in turn), each
  group's budget is then raised to fit the tasks its run will evaluate."""
  from rlpt.data import eval_tasks
  groups = collections.defaultdict(list)
  for d in domains:
    groups[budget(fmt, pool, eval_tasks([d], tasks, seed=seed))].append(d)
  runs = []
  for key, ds in sorted(groups.items()):
    need = budget(fmt, pool, eval_tasks(ds, tasks, seed=seed))
    runs.append(((max(key[0], need[0]), max(key[1], need[1])), ds))
  return runs


def _config(model: str, domains, prompt_len: int, new_tokens: int, tasks: int, samples: int,
            batch: int, seed: int):
  from experiments import grpo_hf_import
  c = grpo_hf_import.get_config(model)
  c.seed = seed
  c.domains.ids = list(domains)
  c.rollout.update(batch_size=batch, max_prompt_len=prompt_len, max_new_tokens=new_tokens)
  c.eval.update(tasks_per_domain=tasks, samples=samples, sampled=True)
  c.checkpoint.every = 0
  c.progress = False
  return c


def _plan_for(model: str, domains, tasks: int, samples: int, batch: int, seed: int):
  """`plan` with the model's prompt format and the domains' environments."""
  from rlpt.bases import resolve_tokenizer
  from rlpt.config import EnvConfig, TrainConfig, from_config_dict
  from rlpt.rollout.envs import EnvPool
  from rlpt.tokenizers.prompts import prompt_format
  probe = from_config_dict(TrainConfig, _config(model, domains, 128, 64, tasks, samples, batch, seed))
  fmt = prompt_format(resolve_tokenizer(probe.base), probe.rollout.chat_template, probe.rollout.system_prompt)
  pool = EnvPool(tuple(domains), EnvConfig(workers=2, prompt_style=probe.env.prompt_style))
  try:
    return plan(fmt, pool, domains, tasks, probe.eval.seed)
  finally:
    pool.close()


def _evaluate(config) -> dict:
  """One budget group's held-out metrics, from a Trainer built for it."""
  from rlpt.config import TrainConfig, from_config_dict
  from rlpt.trainer import Trainer
  with tempfile.TemporaryDirectory() as workdir:
    trainer = Trainer(from_config_dict(TrainConfig, config), workdir)
    try:
      return trainer.evaluate()
    finally:
      trainer.close()


def measure(model: str, domains, tasks: int, samples: int, batch: int, seed: int = 0,
            on_group=None, done: dict | None = None, max_runs: int | None = None) -> dict:
  """Every domain's greedy and sampled counts (see the module docstring).
  ``on_group(result)``, if given, receives the result so far after each budget
  group (``pending`` lists the domains still to measure), so an interrupted
  table keeps the groups it finished. ``done``: an earlier result of the same
  measurement, whose finished groups are kept, not run again (the plan, and so
  every group's held-out tasks, is the same). ``max_runs``: measure at most
  this many groups here, leaving the rest ``pending``."""
  runs = _plan_for(model, domains, tasks, samples, batch, seed)
  rows, seconds = dict((done or {}).get("rows", {})), dict((done or {}).get("seconds", {}))

  def result():
    return {"model": model, "domains": list(domains), "tasks": tasks, "samples": samples,
            "batch": batch, "seed": seed, "rows": dict(rows), "seconds": dict(seconds),
            "pending": [d for d in domains if d not in rows]}

  todo = [(key, ds) for key, ds in runs if not all(d in rows for d in ds)]
  for (prompt_len, new_tokens), ds in todo[:max_runs]:
    start = time.perf_counter()
    out = _evaluate(_config(model, ds, prompt_len, new_tokens, tasks, samples, batch, seed))
    elapsed, key = time.perf_counter() - start, f"{prompt_len}+{new_tokens}"
    seconds[key] = seconds.get(key, 0.0) + elapsed  # two groups may end with one budget
    for d in ds:
      rows[d] = {"greedy": out[f"success/{d}"], "sampled": out[f"sampled_success/{d}"],
                 "greedy_masked": out[f"success_masked/{d}"],
                 "sampled_masked": out[f"sampled_success_masked/{d}"],
                 "prompt_tokens": prompt_len, "new_tokens": new_tokens}
    print(f"# {key} tokens: {len(ds)} domains in {elapsed:.0f} s", flush=True)
    if on_group is not None:
      on_group(result())
  return result()


def _pct(x: float) -> str:
  return "  -" if x != x else f"{100 * x:5.1f}"  # one decimal: 3 of 64 is 4.7, not "5"


def table(results: list[dict], labels: list[str]) -> str:
  """A markdown table: per domain, greedy and sampled success (%) of each
  result, ``*`` where the sampled success lies in 5-90%."""
  head = "| domain | " + " | ".join(f"{lab} greedy | {lab} sampled" for lab in labels) + " |"
  lines = [head, "|---" * (1 + 2 * len(labels)) + "|"]
  domains = list(dict.fromkeys(d for r in results for d in r["rows"]))
  for d in domains:
    cells = []
    for r in results:
      row = r["rows"].get(d)
      if row is None:
        cells += ["", ""]
        continue
      masked = row["greedy_masked"] + row["sampled_masked"]
      star = " *" if has_signal(row["sampled"]) else ""
      cells += [_pct(row["greedy"]), _pct(row["sampled"]) + star + (f" ({masked:.0f} masked)" if masked else "")]
    lines.append(f"| {d.removeprefix('rlpt/').removesuffix('-v0')} | " + " | ".join(cells) + " |")
  for r, lab in zip(results, labels):
    marked = sum(has_signal(x["sampled"]) for x in r["rows"].values())
    mean = sum(x["sampled"] for x in r["rows"].values() if x["sampled"] == x["sampled"]) / max(1, len(r["rows"]))
    lines.append(f"\n{lab}: {marked} of {len(r['rows'])} domains with signal (*), mean sampled success "
                 f"{100 * mean:.1f}%, {sum(r['seconds'].values()) / 60:.1f} min")
    if r.get("pending"):
      lines.append(f"{lab}: interrupted, not measured: "
                   + ", ".join(d.removeprefix("rlpt/").removesuffix("-v0") for d in r["pending"]))
  return "\n".join(lines)


def _resumable(args, domains) -> dict:
  """The earlier result in ``--out``, checked to be the same measurement: a
  resumed run must evaluate the tasks the first one planned."""
  if not args.out:
    raise SystemExit("--resume needs --out: the JSON to go on with (or to start).")
  if not os.path.exists(args.out):
    print(f"# --resume: {args.out} does not exist yet; starting it", flush=True)
    return {}
  with open(args.out) as f:
    done = json.load(f)
  asked = {"model": args.model, "domains": list(domains), "tasks": args.tasks, "samples": args.samples,
           "batch": args.batch, "seed": args.seed}
  differ = [f"{k}: {done.get(k)!r} there, {v!r} here" for k, v in asked.items() if done.get(k) != v]
  if differ:
    raise SystemExit(f"--resume: {args.out} is another measurement ({'; '.join(differ)}); "
                     "resume it with its own flags, or write a new --out.")
  return done


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", help="a model name, .gguf file or Hugging Face directory")
  parser.add_argument("--groups", default=",".join(GROUPS), help=f"some of {list(GROUPS)}")
  parser.add_argument("--domains", default="", help="domain ids, comma-separated (instead of --groups)")
  parser.add_argument("--tasks", type=int, default=16, help="held-out tasks per domain")
  parser.add_argument("--samples", type=int, default=4, help="sampled plays per task")
  parser.add_argument("--batch", type=int, default=32, help="episodes per compiled batch")
  parser.add_argument("--seed", type=int, default=0, help="the sampling keys' seed")
  parser.add_argument("--out", help="write the JSON result here")
  parser.add_argument("--label", default="", help="the column's name (default: the model)")
  parser.add_argument("--compare", help="JSON results to tabulate side by side, comma-separated")
  parser.add_argument("--resume", action="store_true",
                      help="go on with the run in --out (or start it): keep its finished groups, measure the rest")
  parser.add_argument("--max-runs", type=int, default=None,
                      help="measure at most this many budget groups in this process (a fresh process "
                           "per few groups keeps a large model's memory down; go on with --resume)")
  args = parser.parse_args(argv)
  if args.compare:
    paths = args.compare.split(",")
    results = []
    for p in paths:
      with open(p) as f:
        results.append(json.load(f))
    print(table(results, [r.get("label") or os.path.basename(p).removesuffix(".json")
                          for r, p in zip(results, paths)]))
    return
  if not args.model:
    parser.error("--model is required (or --compare).")
  if args.domains:
    domains = tuple(args.domains.split(","))
  else:
    names = [g for g in args.groups.split(",") if g]
    unknown = sorted(set(names) - set(GROUPS))
    if unknown:
      parser.error(f"--groups has {unknown}; expected some of {list(GROUPS)}.")
    domains = tuple(dict.fromkeys(d for g in names for d in GROUPS[g]))
  done = _resumable(args, domains) if args.resume else None
  print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {args.model}: "
        f"{len(domains)} domains x {args.tasks} tasks, greedy + {args.samples} sampled", flush=True)

  def write(result):
    result["label"] = args.label
    if args.out:
      os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
      with open(args.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
      os.replace(args.out + ".tmp", args.out)  # never a half-written file

  result = measure(args.model, domains, args.tasks, args.samples, args.batch, args.seed, on_group=write,
                   done=done, max_runs=args.max_runs)
  write(result)
  print(table([result], [args.label or os.path.basename(args.model.rstrip("/"))]))
  if result["pending"]:
    sys.exit(PENDING)


if __name__ == "__main__":
  main()
