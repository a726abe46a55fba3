"""GRPO over every registered domain at once (or those matching a filter).

    python -m launch.train --config=experiments/grpo_all_domains.py --workdir=runs/all_domains
    python -m launch.train --config=experiments/grpo_all_domains.py:family=rg,difficulty=easy --workdir=W
    python -m launch.train --config=experiments/grpo_all_domains.py:smoke --workdir=/tmp/all

Every registered domain (built-in generators, the shipped dataset files and
terminal task folders, every reasoning-gym generator), each cut to the tasks
whose prompt has at most 256 characters and whose demonstration at most 63
(experiments/domains.py `every_domain`; environments.bounded): the tiny base's
context. 232 of the 555 registered domains qualify; the others (long-context,
document and CAD prompts, most tool and Terminal-Bench tasks) are left out with
the reason (`python -c "from experiments import domains; print(domains.every_domain()[1])"`).
The base (experiments/pretrain_base.py:all) is pre-trained on the
demonstrations of all of them, from the same imperfect teacher as the main
job's.

At this scale: evaluations between the first and the last cover 24 domains
each, in turn (``eval.domains_per_eval``), the first and last cover all;
metrics.jsonl logs per-domain and per-family figures (``family_*``), and
TensorBoard groups the per-domain charts by family; the end-of-run report
(WORKDIR/summary.md, domains.csv, domain_shares.png, eval_success.png) sorts
domains by gain. The argument is a comma-separated list of ``smoke`` and
filters ``family=``, ``difficulty=``, ``tag=`` (environments.registry.list_domains),
``strategy=`` (the curriculum: uniform, success_band, learning_progress; default
success_band, the best of the three in benchmarks/curriculum.py) ``adaptive`` (adaptive difficulty over each family's easy / medium / hard
ladders, rlpt.curriculum.difficulty) and ``prompt=`` / ``answer=`` (the bounds,
in characters; the base is pre-trained for the same bounds).
"""

import ml_collections

from experiments import domains
from experiments import grpo_default

RUNNER = "train"
STRATEGIES = ("uniform", "success_band", "learning_progress")


def parse_arg(arg: str) -> dict:
  """The config argument's items: smoke, domain filter, strategy, adaptive
  difficulty, prompt and answer bounds (characters)."""
  out = dict(smoke=False, strategy="success_band", adaptive=False,
             prompt=domains.ALL_PROMPT_CHARS, answer=domains.ALL_DEMO_CHARS)
  keep = []
  for item in filter(None, (x.strip() for x in arg.split(","))):
    if item in ("smoke", "adaptive"):
      out[item] = True
    elif item.startswith(("prompt=", "answer=")):
      key, _, value = item.partition("=")
      if not value.isdigit() or int(value) < 1:
        raise ValueError(f"grpo_all_domains {item!r}: {key} must be a positive number of "
                         "characters")
      out[key] = int(value)
    elif item.startswith("strategy="):
      out["strategy"] = item.partition("=")[2]
      if out["strategy"] not in STRATEGIES:
        raise ValueError(f"grpo_all_domains strategy={out['strategy']!r}; expected one of "
                         f"{STRATEGIES}")
    else:
      keep.append(item)
  spec_filter = ",".join(keep)
  try:
    domains.parse_filter(spec_filter)
  except ValueError as e:
    raise ValueError(f"grpo_all_domains argument {arg!r}: {e}; or 'smoke', 'adaptive', "
                     "'strategy=<name>', 'prompt=<chars>', 'answer=<chars>'") from None
  out["filter"] = spec_filter
  return out


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  a = parse_arg(arg)
  strategy = a["strategy"]
  c = grpo_default.get_config("smoke" if a["smoke"] else "")
  ids, _ = domains.every_domain(a["filter"], a["prompt"], a["answer"])
  c.domains.ids = list(ids)
  c.rollout.update(max_prompt_len=a["prompt"] + 2, max_new_tokens=a["answer"] + 1)
  c.curriculum.strategy = strategy
  c.curriculum.adaptive_difficulty = a["adaptive"]
  # Every domain keeps a floor of a tenth of its uniform share, so none is
  # never seen again; none takes more than 20x its uniform share.
  c.curriculum.update(min_share=0.1 / len(ids), max_share=min(1.0, 20.0 / len(ids)))
  if strategy == "success_band":
    c.curriculum.params = {"low": 0.05, "high": 0.95, "outside_weight": 0.1}
  elif strategy == "learning_progress":
    c.curriculum.params = {"floor": 0.02}
  c.steps = 300
  c.eval.update(every=50, tasks_per_domain=8, domains_per_eval=24)
  c.checkpoint.every = 50
  # The base learnt every domain of the same bounds (whatever the filter).
  bounds = (a["prompt"], a["answer"])
  c.base.arg = "all" + ("" if bounds == (domains.ALL_PROMPT_CHARS, domains.ALL_DEMO_CHARS)
                        else f",prompt={a['prompt']},answer={a['answer']}")
  if a["smoke"]:
    c.steps = 2
    c.base.arg = "smoke"
    # Seconds, not minutes: greedy evaluation only and one decode phase, so the
    # run compiles half the sampler programs, each smaller.
    c.eval.update(every=1, tasks_per_domain=1, domains_per_eval=8, sampled=False)
    c.rollout.decode_phases = 1
    c.checkpoint.every = 1
  return c
