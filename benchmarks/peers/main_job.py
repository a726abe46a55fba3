r"""An rlpt GRPO job run by rlpt and by Hugging Face TRL side by side.

    make bench-peers-main            # installs TRL's environment, then runs the tiny job
    make bench-peers-smollm2         # the same for SmolLM2 (--job=smollm2 --steps=50 --eval_every=25)
    python benchmarks/peers/main_job.py [--job=tiny|smollm2 --steps=200 --eval_every=25 --seeds=0,1,2]
    python benchmarks/peers/main_job.py --steps=6 --eval_every=3 --eval_tasks_per_domain=4  # tiny

The jobs (``--job``):

* ``tiny``: experiments/grpo_default.py, GRPO on the tiny pre-trained base
  (experiments/pretrain_base.py, cached under .cache/rlpt/bases), 8 domains,
  16 prompts x 8 completions = 128 per step, up to 24 new tokens at
  temperature 1, bare prompts (BOS + bytes), full training, lr 1e-4.
* ``smollm2``: experiments/grpo_smollm2.py, GRPO on SmolLM2-135M-Instruct
  after its warm-up (experiments/warmup_hf.py, cached; it is a Hugging Face
  checkpoint directory, which both systems load), 7 domains, 4 prompts x 8
  completions = 32 per step, up to 80 new tokens at temperature 1, every
  prompt a user turn of SmolLM2's chat template (its default system turn
  first), generation stopped at ``<|im_end|>``, rank-16 LoRA (alpha 32) on
  the attention and MLP projections with the frozen warm-up as the
  reference, lr 2e-4.

Both: the clipped surrogate (0.2), a k3 KL to the reference (beta 0.01) in
the loss, token-mean aggregation, one AdamW update per batch after 5 linear
warm-up steps. TRL is given every one of these from the rlpt config
(``trl_settings``), which raises where TRL's GRPO has no equal. For each seed
S this script

1. (tiny) exports the base as a Hugging Face checkpoint with its tokenizer
   (``save_hf_checkpoint(..., tokenizer=ByteTokenizer())``: rlpt's scaled tied
   head written as the equal untied Llama head);
2. runs rlpt (``python -m launch.train --config=<the job> --config.seed=S``,
   evaluating every ``--eval_every`` steps; on the tiny job with
   ``--config.base.hf_checkpoint=<the export>``, the very parameters TRL
   trains, unless ``--rlpt_model=native``), which writes the tasks it trained
   on (tasks.jsonl) and its metrics;
3. runs TRL in its own virtual environment (``main_job_trl.py``) on the same
   weights, the same task draws with the same prompt ids (checked), rewards
   from the same environments (rlpt's own interpreter grades them:
   grading.py), and the same held-out tasks;
4. prints and writes (``--out``) the step times, training success, held-out
   success at equal steps and at equal wall time, and a PNG of held-out
   sampled success against training seconds.

What TRL had to be told to do the same work (main_job_trl.py, GRPOConfig):

* model and tokenizer: the base export, loaded by ``AutoModelForCausalLM`` /
  ``AutoTokenizer`` (bytes 0..255 = ids 0..255, PAD 256, BOS 257 prepended on
  encode, EOS 258). The script checks that transformers' last-position logits
  equal rlpt's on 4 prompts (max |diff| < 1e-3) and that every prompt encodes
  to rlpt's ids (BOS + its UTF-8 bytes). The reference model is TRL's own
  frozen copy of the same export (rlpt's is the base). SmolLM2: its warm-up
  directory on both sides; every prompt's ids from TRL's own
  ``apply_chat_template`` of the user turn must equal rlpt's (checked for
  every training and held-out prompt); with LoRA (``peft_config``) TRL's
  reference is the model with its adapters off, as rlpt's is.
* tasks: the text prompts are the observations ``env.reset(seed, split)``
  returns for the tasks of rlpt's tasks.jsonl, in rlpt's order
  (``shuffle_dataset=False``, ``num_generations=group``,
  ``per_device_train_batch_size=batch``, ``steps_per_generation=1``,
  ``num_iterations=1``, ``gradient_accumulation_steps=1``,
  ``max_steps=steps``); the reward function receives each row's index and
  asserts that every step's rows are tasks.jsonl's, each repeated group times.
* rewards: ``gymnasium.make(domain, **rlpt's options)`` in a grading server
  run by rlpt's interpreter (grading.py), ``reset(seed=seed, options={"split":
  split})``, ``step(answer)``'s reward, as rlpt's EnvPool takes it; success is
  ``info["success"]``. The answer is the completion before its stop token,
  decoded as rlpt decodes (bytes; SmolLM2: the tokenizer without special
  tokens), from TRL's ``completion_ids``. 4 threads grade the
  completions, as rlpt's pool has 4 workers per resource class; an
  infrastructure failure is retried twice on a fresh environment, then the
  completion gets reward None (TRL: advantage 0).
* sampling: ``max_completion_length`` = the job's max_new_tokens, its
  temperature, ``top_k=0``, ``top_p=1`` (stop at the job's stop ids:
  TRL's ``eos_token_ids`` are checked against them).
* loss: ``loss_type="dapo"`` (sum over all completion tokens of the batch /
  their number: rlpt's token-mean; "bnpo" is the same with one process and no
  accumulation), ``epsilon=epsilon_high=0.2``, ``beta=0.01`` (TRL's k3
  estimator), ``use_bias_correction_kl=False`` (TRL 1.16 multiplies the KL by
  the importance ratio by default, which changes its gradient; rlpt does not),
  ``scale_rewards="group"``.
* optimizer: rlpt's OptimConfig defaults: AdamW betas (0.9, 0.99), eps 1e-8,
  weight decay 0, global-norm clip 1.0; the job's lr with
  ``lr_scheduler_type="constant_with_warmup"``, ``warmup_steps=5`` (0, 0.2,
  ..., 0.8 of the lr for steps 1-5, as optax's linear warm-up; TRL's rates are
  recorded per step).
* fp32, ``use_cpu``, ``activation_checkpointing=False`` (TRL's default is on),
  torch threads = ``--threads`` (2), no logging, reporting or checkpoints, seed S.
* held-out evaluation: ``model.generate`` on rlpt's eval tasks
  (``rlpt.data.eval_tasks(domains, 64, seed)``) from rlpt's prompt ids,
  left-padded, batches of 128, greedy and sampled (the job's temperature,
  top-k 0, top-p 1) and max_new_tokens; success is the
  environment's flag, infrastructure failures excluded, per-domain mean then
  the mean over domains; before training and after the steps rlpt evaluated
  at. It runs in a callback after the step timer, so (as in rlpt) no step time
  includes it, and it restores torch's random state afterwards.

Why rlpt trains the export on the tiny job: the export computes rlpt's function exactly (the
same held-out figures before training, greedy and sampled), but it holds the
head as a matrix of its own, where rlpt's base ties it to the embedding
(scaled). Adam then moves the two matrices separately, which is a different
optimisation of the same function; trained side by side, the untied model
learnt a little more per step than the tied one (the README's TRL section).
Training the same parameters on both sides leaves the frameworks as the only
difference.

What is not equal, and cannot be made so through TRL's public options:

* the random streams: each system draws its own samples (JAX vs torch), so
  the completions, and with them the training trajectories, differ; the
  tasks, rewards and held-out tasks are the same.
* the advantage's std: rlpt divides by the population std of the group + 1e-6,
  TRL by the Bessel-corrected std + 1e-4, so TRL's advantages are
  sqrt(7/8) = 0.935 of rlpt's (AdamW removes most of a uniform scale; the KL
  term weighs ~7% more against the policy gradient in TRL).
* LoRA's A: both draw it uniform in +-1/sqrt(fan_in) (B zero), from their own
  random streams.
* masked samples: rlpt drops an infrastructure-failed sample from the loss;
  TRL gives it advantage 0 but keeps its tokens in the KL term and the count.
* the old log-probs: rlpt uses the sampler's, TRL the policy's own
  (``num_iterations=1``), equal up to rounding; TRL also computes the entropy
  in the update's forward (its cost, not asked for).
* the numerics: XLA vs PyTorch eager, rlpt's shared-prefix sampler and packed
  update vs transformers' left-padded ``generate`` and padded update.
* what a step time covers: rlpt's ``time/step`` (rollout with environment
  resets, reference, update, weight publish); TRL's optimizer step from
  ``on_step_begin`` to ``on_step_end`` (generation, reference, rewards with
  the resets, update). rlpt's first steps include its compilation; both
  systems' wall time is the sum of all their step times (warm-ups included),
  evaluation excluded.

Printed, per system: the median step time [min-max over the steps after 2
warm-ups] and its breakdown (rlpt: its time/* keys; TRL: generation +
reference, environments, the rest), steps per second, training success per 50
steps, held-out success (sampled and greedy) at every evaluation, and at equal
wall time: each system's last evaluation within the other's total training
time. With several seeds, mean [min-max] over seeds.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from absl import app, flags  # noqa: E402

JOBS = {"tiny": "experiments/grpo_default.py", "smollm2": "experiments/grpo_smollm2.py"}

_STEPS = flags.DEFINE_integer("steps", 200, "Training steps of each system.")
_TRL_STEPS = flags.DEFINE_integer(
    "trl_steps", None, "TRL's training steps, the first of rlpt's task draws (default --steps): "
    "fewer where TRL's steps are so much slower that its run would not fit; TRL is evaluated "
    "at rlpt's evaluation steps up to it, and after its last step.")
_TRL_EVAL_EVERY = flags.DEFINE_integer(
    "trl_eval_every", None, "TRL's held-out evaluation every this many steps, besides rlpt's "
    "(default: rlpt's steps only), for the comparison at equal wall time.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 25, "Held-out evaluation every this many steps.")
_EVAL_TASKS = flags.DEFINE_integer("eval_tasks_per_domain", 64, "Held-out tasks per domain.")
_SEEDS = flags.DEFINE_list("seeds", ["0"], "Training seeds; each runs both systems once.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where the export, the runs and the results go "
                               "(default .cache/peers/main_job, main_job_smollm2 for that job).")
_OUT = flags.DEFINE_string("out", None, "JSON of all figures (default WORKDIR/result.json); the "
                           "PNG goes next to it.")
_VENV = flags.DEFINE_string("trl_venv", os.path.join(ROOT, ".peers", "trl"),
                            "TRL's virtual environment (bin/python).")
_THREADS = flags.DEFINE_integer("threads", 2, "torch threads of the TRL run.")
_TIMEOUT = flags.DEFINE_integer("timeout_s", 7200, "Limit for one system's run.")
_REUSE = flags.DEFINE_bool("reuse", False, "Reuse a seed's finished runs in WORKDIR when they "
                           "were made with the same settings.")
_JOB = flags.DEFINE_enum(
    "job", "tiny", list(JOBS),
    "The rlpt job both systems run: 'tiny', experiments/grpo_default.py on the built-in tiny "
    "base; 'smollm2', experiments/grpo_smollm2.py (SmolLM2-135M-Instruct after its warm-up, "
    "chat template, LoRA).")
_RLPT_MODEL = flags.DEFINE_enum(
    "rlpt_model", "export", ["export", "native"],
    "What rlpt trains on the tiny job: 'export', the Hugging Face export TRL trains (an untied "
    "Llama head, imported with --config.base.hf_checkpoint: the same parameters on both sides); "
    "'native', rlpt's own base (its head tied to the embedding and scaled), as the main job "
    "runs. A warmed-up real model's base is a Hugging Face checkpoint already: both systems "
    "load that directory.")
_MICRO = flags.DEFINE_integer(
    "trl_micro_batch", None, "Rows per forward and backward of TRL's update (its "
    "per_device_train_batch_size, with gradient accumulation over the batch): default the "
    "whole batch on the tiny job, 8 on smollm2, whose whole-batch update (32 rows x 49,152-entry "
    "vocabulary) held 17 GiB and was killed on a 24 GiB machine.")
_WAIT = flags.DEFINE_bool("wait", True, "Before each run, wait while other training runs "
                          "(launch.train, main_job_seeds) or a test suite are on the machine.")

CHECK_PROMPTS, WARMUP = 4, 2
CHECK_ATOL = 1e-3  # fp32 last-position logits, rlpt (XLA) vs transformers (PyTorch)
BUSY_PATTERNS = ("main_job_seeds", "launch.train", "pytest")  # pytest: a suite skews peer timings 6x
NAMES = {"rlpt": "rlpt", "trl": "TRL"}


# -- inputs --------------------------------------------------------------------


def config_path() -> str:
  return JOBS[_JOB.value]


@functools.cache  # the flags are fixed once parsed; read it (and register its domains) once
def job_config():
  from rlpt.bases import load_experiment_config
  return load_experiment_config(os.path.join(ROOT, config_path()))


def cache_dir() -> str:
  return os.path.join(ROOT, ".cache", "rlpt", "bases")


def base_cfg():
  """The job's base section, its cache here."""
  import ml_collections
  base = ml_collections.ConfigDict(job_config().base.to_dict())
  base.cache_dir = cache_dir()
  return base


def built():
  """The cached base the job trains from (rlpt.bases.built_base), built if missing."""
  from rlpt.bases import built_base
  b = built_base(base_cfg())
  if not os.path.exists(os.path.join(b.path, "config.json" if b.runner == "warmup" else
                                     "model.json")):
    raise SystemExit(f"no cached base at {b.path}: build it with `make train` (the tiny base) or "
                     f"`make train-smollm2` (the warm-up), or python -m launch.{b.runner} "
                     f"--config={base_cfg().experiment}.")
  return b


@functools.cache  # the tokenizer is read once
def prompt_format():
  from rlpt.bases import resolve_tokenizer
  from rlpt.tokenizers.prompts import prompt_format as make
  ro = job_config().rollout
  return make(resolve_tokenizer(base_cfg()), ro.chat_template, ro.system_prompt)


def make_kwargs(domains) -> dict[str, dict]:
  """Each domain's gymnasium.make options, as rlpt's EnvPool passes them."""
  style = job_config().env.prompt_style
  return {d: ({"prompt_style": style} if style != "bare" else {}) for d in domains}


def export_base(directory: str, check_ids: list[list[int]]) -> dict:
  """The base as a Hugging Face checkpoint with tokenizer, and rlpt's logits for
  the first CHECK_PROMPTS prompt ids cut to a common length: {"model", "base",
  "check"}. A warm-up's base is a Hugging Face checkpoint already (both sides
  load it); the tiny base is exported with its byte tokenizer."""
  from rlpt.bases import resolve_base
  from rlpt.models.hf import save_hf_checkpoint
  from rlpt.tokenizers.byte import ByteTokenizer
  from shared import check_logits

  b = built()
  cfg, _, params, _ = resolve_base(base_cfg(), progress=False)
  if b.runner == "warmup":
    model_dir = b.path
  else:
    model_dir = save_hf_checkpoint(os.path.join(directory, "base_hf"), params, cfg,
                                   tokenizer=ByteTokenizer())
  width = min(len(x) for x in check_ids[:CHECK_PROMPTS])
  tokens = np.asarray([x[:width] for x in check_ids[:CHECK_PROMPTS]], np.int32)
  return {"model": model_dir, "base": b.path,
          "check": {"tokens": tokens.tolist(), "logits": check_logits(cfg, params, tokens).tolist()}}


def eval_task_list(domains, per_domain: int) -> list[list]:
  from rlpt.data import eval_tasks
  return [list(t) for t in eval_tasks(domains, per_domain, seed=job_config().eval.seed)]


def prompts_of(tasks, domains) -> dict:
  """{"tasks", "texts", "ids"}: each task's prompt (``env.reset(seed, split)``'s
  observation) and the ids rlpt's prompt format gives it."""
  import gymnasium

  import environments  # noqa: F401
  kwargs = make_kwargs(domains)
  fmt = prompt_format()
  envs, texts = {}, []
  for domain, seed, split in tasks:
    env = envs.setdefault(domain, gymnasium.make(domain, disable_env_checker=True,
                                                 **kwargs[domain]))
    texts.append(env.reset(seed=int(seed), options={"split": split})[0])
  return {"tasks": [list(t) for t in tasks], "texts": texts,
          "ids": [fmt.prompt_ids(t) for t in texts]}


def trl_settings(domains) -> dict:
  """The job's settings TRL is given (main_job_trl.py), from the rlpt config;
  raises where TRL's GRPO has no equal of the job's choice."""
  from rlpt.tokenizers.byte import ByteTokenizer
  c = job_config()
  rl, ro, opt = c.rl, c.rollout, c.optim
  want = {"advantage": "grpo", "policy_loss": "ppo_clip", "kl_estimator": "k3",
          "aggregation": "token-mean"}
  off = {k: rl[k] for k, v in want.items() if rl[k] != v}
  if off or opt.decay != "constant":
    raise SystemExit(f"{config_path()}: TRL is set up for {want} and a constant rate after the "
                     f"warm-up; the job has {off or {'optim.decay': opt.decay}}.")
  fmt = prompt_format()
  return {
      "per_step": ro.batch_size // ro.group_size, "group": ro.group_size,
      "max_new_tokens": ro.max_new_tokens, "temperature": ro.temperature,
      "learning_rate": opt.learning_rate, "warmup_steps": opt.warmup_steps,
      "weight_decay": opt.weight_decay, "b1": opt.b1, "b2": opt.b2, "grad_clip": opt.grad_clip,
      "clip_eps": rl.clip_eps, "kl_beta": rl.kl_beta,
      "lora": ({"rank": c.lora.rank, "alpha": c.lora.alpha, "targets": list(c.lora.targets)}
               if c.lora.rank else None),
      "stop_ids": [int(i) for i in fmt.stop_ids], "pad_id": int(fmt.tokenizer.pad_id),
      "chat": fmt.template is not None, "byte_level": isinstance(fmt.tokenizer, ByteTokenizer),
      "make_kwargs": make_kwargs(domains), "rlpt_python": sys.executable,
      "check_atol": CHECK_ATOL,
      "micro_batch": _MICRO.value or (ro.batch_size if _JOB.value == "tiny" else 8),
  }


# -- runs ----------------------------------------------------------------------


def wait_for_quiet() -> None:
  """Waits (polling every 30 s) while another session's training runs."""
  if not _WAIT.value:
    return
  told = False
  while True:
    busy = [p for p in BUSY_PATTERNS
            if subprocess.run(["pgrep", "-f", p], capture_output=True).returncode == 0]
    if not busy:
      return
    if not told:
      print(f"waiting: other processes match {busy} (polling every 30 s)", flush=True)
      told = True
    time.sleep(30)


def read_jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def run_logged(cmd: list[str], log: str, name: str, env: dict | None = None) -> float:
  wait_for_quiet()
  t = time.perf_counter()
  with open(log, "w") as f:
    proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=_TIMEOUT.value,
                          env={**os.environ, **(env or {})})
  if proc.returncode != 0:
    with open(log) as f:
      tail = "".join(f.readlines()[-30:])
    raise SystemExit(f"{name} failed (exit {proc.returncode}); its log {log} ends:\n{tail}")
  return time.perf_counter() - t


def settings(seed: int) -> dict:
  return {"steps": _STEPS.value, "eval_every": _EVAL_EVERY.value, "job": _JOB.value,
          "eval_tasks_per_domain": _EVAL_TASKS.value, "seed": seed, "threads": _THREADS.value}


def trl_steps() -> int:
  n = _TRL_STEPS.value or _STEPS.value
  if not 1 <= n <= _STEPS.value:
    raise SystemExit(f"--trl_steps={n}: expected 1..--steps ({_STEPS.value}).")
  return n


def trl_eval_steps(rlpt_steps: list[int]) -> list[int]:
  """rlpt's evaluation steps up to TRL's last, every --trl_eval_every, and its last."""
  n = trl_steps()
  extra = range(0, n + 1, _TRL_EVAL_EVERY.value) if _TRL_EVAL_EVERY.value else ()
  return sorted({s for s in rlpt_steps if s <= n} | set(extra) | {n})


def reusable(directory: str, want: dict, done: str) -> bool:
  stamp = os.path.join(directory, "settings.json")
  if not (_REUSE.value and os.path.exists(stamp) and os.path.exists(done)):
    return False
  with open(stamp) as f:
    return json.load(f) == want


def stamp(directory: str, want: dict) -> None:
  with open(os.path.join(directory, "settings.json"), "w") as f:
    json.dump(want, f)


def run_rlpt(seed_dir: str, seed: int, model_dir: str) -> dict:
  export = _JOB.value == "tiny" and _RLPT_MODEL.value == "export"
  work = os.path.join(seed_dir, "rlpt_export" if export else "rlpt")
  want = {**settings(seed), "rlpt_model": "export" if export else "native"}
  if not reusable(work, want, os.path.join(work, "export", "hf", "config.json")):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cmd = [sys.executable, "-m", "launch.train", f"--config={config_path()}", f"--workdir={work}",
           f"--config.base.cache_dir={cache_dir()}", f"--config.steps={_STEPS.value}",
           f"--config.seed={seed}", f"--config.eval.every={_EVAL_EVERY.value}",
           f"--config.eval.tasks_per_domain={_EVAL_TASKS.value}", "--config.checkpoint.every=0",
           "--config.progress=False", "--compilation_cache="]  # every run compiles, as a first one
    if export:
      cmd.append(f"--config.base.hf_checkpoint={model_dir}")
    print(f"seed {seed}: rlpt: {' '.join(cmd[1:])}", flush=True)
    wall = run_logged(cmd, os.path.join(seed_dir, os.path.basename(work) + ".log"), "rlpt")
    with open(os.path.join(work, "wall.json"), "w") as f:
      json.dump({"wall_s": wall}, f)
    stamp(work, want)
  with open(os.path.join(work, "wall.json")) as f:
    wall = json.load(f)["wall_s"]
  rows = read_jsonl(os.path.join(work, "metrics.jsonl"))
  train = sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["step"])
  evals = sorted((r for r in rows if r["kind"] == "eval"), key=lambda r: r["step"])
  assert [r["step"] for r in train] == list(range(1, _STEPS.value + 1)), "rlpt train rows"
  times = [r["time/step"] for r in train]
  keys = sorted({k for r in train for k in r if k.startswith("time/") and k != "time/step"})
  return {"system": "rlpt", "wall_s": wall, "step_times_s": times,
          "breakdown_s": {k: statistics.median(r.get(k, 0.0) for r in train[WARMUP:]) for k in keys},
          "train_success": [r["success/mean"] for r in train],
          "eval": [{k: v for k, v in r.items() if k != "kind"} for r in evals],
          "tasks": read_jsonl(os.path.join(work, "tasks.jsonl")),
          "export": os.path.join(work, "export", "hf")}


def run_trl(seed_dir: str, seed: int, base: dict, domains, evals: dict, rlpt: dict) -> dict:
  out = os.path.join(seed_dir, "trl.json")
  want = {**settings(seed), "trl_steps": trl_steps(), "trl_eval_every": _TRL_EVAL_EVERY.value,
          "trl_micro_batch": _MICRO.value}
  work = os.path.join(seed_dir, "trl")
  if not reusable(work, want, out):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    python = os.path.join(_VENV.value, "bin", "python")
    if not os.path.exists(python):
      raise SystemExit(f"no TRL environment: {python} does not exist (`make bench-peers-main` "
                       "creates it).")
    inputs = os.path.join(work, "trl_inputs.json")
    with open(inputs, "w") as f:
      tasks = rlpt["tasks"][:trl_steps()]
      train = prompts_of([t for r in tasks for t in r["tasks"]], domains)
      json.dump({"seed": seed, "domains": list(domains), "tasks": tasks,
                 "job": trl_settings(domains), "prompts": {"train": train, "eval": evals},
                 "eval_steps": trl_eval_steps([r["step"] for r in rlpt["eval"]]),
                 "check": base["check"]}, f)
    cmd = [python, os.path.join(HERE, "main_job_trl.py"), f"--model_dir={base['model']}",
           f"--inputs={inputs}", f"--out={out}", f"--threads={_THREADS.value}"]
    print(f"seed {seed}: TRL: {' '.join(cmd[1:])}", flush=True)
    # Everything is on disk: no Hub lookups or telemetry threads during the timed steps.
    wall = run_logged(cmd, os.path.join(seed_dir, "trl.log"), "TRL",
                      env={"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"})
    with open(out) as f:
      res = json.load(f)
    res["wall_s"] = wall
    with open(out, "w") as f:
      json.dump(res, f, indent=1)
    shutil.rmtree(os.path.join(work, "trl_grpo"), ignore_errors=True)
    stamp(work, want)
  with open(out) as f:
    res = json.load(f)
  times, gen = res["step_times_s"], res["rollout_times_s"]
  env = res["env_times_s"]
  res["breakdown_s"] = {
      "generate+reference": statistics.median(gen[WARMUP:]),
      "environments": statistics.median(env[WARMUP:]),
      "update+rest": statistics.median(t - g - e for t, g, e in
                                       zip(times[WARMUP:], gen[WARMUP:], env[WARMUP:]))}
  res["system"] = "trl"
  return res


# -- figures -------------------------------------------------------------------


def figures(res: dict, other_total: float) -> dict:
  """One system's figures for one seed; ``other_total``: the other system's training seconds."""
  times = res["step_times_s"]
  cum = np.concatenate([[0.0], np.cumsum(times)])
  timed = times[WARMUP:]
  evals = [{"step": r["step"], "train_s": float(cum[r["step"]]),
            "sampled": r["sampled_success/mean"], "greedy": r["success/mean"],
            "per_domain": {k: v for k, v in r.items() if "/" in k and not k.endswith("/mean")}}
           for r in res["eval"]]
  within = [e for e in evals if e["train_s"] <= other_total] or evals[:1]
  succ = res["train_success"]
  return {
      "step_s": statistics.median(timed), "step_min_s": min(timed), "step_max_s": max(timed),
      "steps_per_s": 1.0 / statistics.median(timed), "train_s": float(cum[-1]),
      "run_wall_s": res["wall_s"], "breakdown_s": res["breakdown_s"],
      "train_success_per_50": [float(np.mean(succ[i:i + 50])) for i in range(0, len(succ), 50)],
      "eval": evals, "equal_time": {k: within[-1][k] for k in ("step", "train_s", "sampled",
                                                                "greedy")},
      "step_times_s": times,
  }


def agg(xs, fmt="{:.3f}") -> str:
  xs = list(xs)
  if len(xs) == 1:
    return fmt.format(xs[0])
  return f"{fmt.format(float(np.mean(xs)))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def report(per_seed: dict, seeds: list[int]) -> None:
  systems = ("rlpt", "trl")
  many = len(seeds) > 1
  print(f"\n{len(seeds)} seed(s) {seeds}, {_STEPS.value} steps of rlpt, {trl_steps()} of TRL, "
        f"{job_config().rollout.batch_size} completions per step; "
        + ("mean [min-max] over seeds" if many else "one run"))
  print("| system | median step, s | step min-max, s (steps after 2 warm-ups"
        + (", all seeds" if many else "") + ") | steps/s | training s (all steps) | run wall, s |")
  print("|---|---:|---:|---:|---:|---:|")
  for s in systems:
    fs = [per_seed[x][s] for x in seeds]
    rng = min(f["step_min_s"] for f in fs), max(f["step_max_s"] for f in fs)
    print(f"| {NAMES[s]} | {agg(f['step_s'] for f in fs)} | {rng[0]:.3f}-{rng[1]:.3f} | "
          f"{agg([f['steps_per_s'] for f in fs], '{:.2f}')} | {agg([f['train_s'] for f in fs], '{:.0f}')}"
          f" | {agg([f['run_wall_s'] for f in fs], '{:.0f}')} |")
  rl = [per_seed[x]["rlpt"]["step_s"] for x in seeds]
  tr = [per_seed[x]["trl"]["step_s"] for x in seeds]
  print(f"TRL step time / rlpt step time: {agg([t / r for t, r in zip(tr, rl)], '{:.2f}')}x")
  for s in systems:
    keys = list(per_seed[seeds[0]][s]["breakdown_s"])
    print(f"{NAMES[s]} breakdown (median s/step): " + ", ".join(
        f"{k} {agg(per_seed[x][s]['breakdown_s'][k] for x in seeds)}" for k in keys))

  n50 = len(per_seed[seeds[0]]["rlpt"]["train_success_per_50"])
  heads = [f"{50 * i + 1}-{min(50 * (i + 1), _STEPS.value)}" for i in range(n50)]
  print("\nTraining success (batch mean), per 50 steps")
  print("| system | " + " | ".join(heads) + " |")
  print("|---|" + "---:|" * n50)
  for s in systems:
    print(f"| {NAMES[s]} | " + " | ".join(
        agg(per_seed[x][s]["train_success_per_50"][i] for x in seeds) for i in range(n50)) + " |")

  print("\nHeld-out success at equal steps: sampled pass@1 (T=1) / greedy; training s reached")
  print("| step | rlpt sampled | TRL sampled | rlpt greedy | TRL greedy | rlpt s | TRL s |")
  print("|---:|---:|---:|---:|---:|---:|---:|")
  at = {s: {x: {e["step"]: e for e in per_seed[x][s]["eval"]} for x in seeds} for s in systems}
  steps = sorted(set(at["rlpt"][seeds[0]]) | set(at["trl"][seeds[0]]))

  def one(s, st, k, fmt="{:.3f}"):
    if st not in at[s][seeds[0]]:
      return "-"
    return agg((at[s][x][st][k] for x in seeds), fmt)
  for st in steps:
    cell = {(s, k): one(s, st, k) for s in systems for k in ("sampled", "greedy")}
    secs = {s: one(s, st, "train_s", "{:.0f}") for s in systems}
    print(f"| {st} | {cell['rlpt', 'sampled']} | {cell['trl', 'sampled']} | "
          f"{cell['rlpt', 'greedy']} | {cell['trl', 'greedy']} | {secs['rlpt']} | {secs['trl']} |")

  print("\nHeld-out success at equal wall time: each system's last evaluation within the "
        "other's total training time")
  print("| system | within, s | at step | sampled | greedy |")
  print("|---|---:|---:|---:|---:|")
  for s, o in (("rlpt", "trl"), ("trl", "rlpt")):
    e = [per_seed[x][s]["equal_time"] for x in seeds]
    print(f"| {NAMES[s]} | {agg((per_seed[x][o]['train_s'] for x in seeds), '{:.0f}')} | "
          f"{agg((x['step'] for x in e), '{:.0f}')} | {agg(x['sampled'] for x in e)} | "
          f"{agg(x['greedy'] for x in e)} |")


def plot(per_seed: dict, seeds: list[int], path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4.5))
  colors = {"rlpt": "tab:blue", "trl": "tab:orange"}
  for s in ("rlpt", "trl"):
    for j, x in enumerate(seeds):
      ev = per_seed[x][s]["eval"]
      ax.plot([e["train_s"] for e in ev], [e["sampled"] for e in ev], "o-", color=colors[s],
              alpha=1.0 if len(seeds) == 1 else 0.75, ms=3,
              label=NAMES[s] if j == 0 else None)
  ax.set_xlabel("training wall-clock seconds (sum of step times, evaluation excluded)")
  ax.set_ylabel("held-out sampled success (pass@1, T=1)")
  steps = (f"{_STEPS.value} steps" if trl_steps() == _STEPS.value
           else f"rlpt {_STEPS.value} / TRL {trl_steps()} steps")
  ax.set_title(f"{os.path.basename(config_path())}, {steps}, seed{'s' if len(seeds) > 1 else ''} "
               f"{','.join(map(str, seeds))}: "
               "rlpt vs TRL (2-core CPU)", fontsize=10)
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def workdir() -> str:
  name = "main_job" if _JOB.value == "tiny" else f"main_job_{_JOB.value}"
  return _WORKDIR.value or os.path.join(ROOT, ".cache", "peers", name)


def main(_):
  seeds = [int(s) for s in _SEEDS.value]
  root = workdir()
  os.makedirs(root, exist_ok=True)
  out = _OUT.value or os.path.join(root, "result.json")
  c = job_config()
  domains = list(c.domains.ids)
  evals = prompts_of(eval_task_list(domains, _EVAL_TASKS.value), domains)
  base = export_base(root, evals["ids"][::_EVAL_TASKS.value])
  print(f"base {base['base']}; both systems load {base['model']}", flush=True)

  per_seed, raw = {}, {}
  for seed in seeds:
    seed_dir = os.path.join(root, f"seed{seed}")
    os.makedirs(seed_dir, exist_ok=True)
    rl = run_rlpt(seed_dir, seed, base["model"])
    print(f"seed {seed}: rlpt  {statistics.median(rl['step_times_s'][WARMUP:]):.3f} s/step, "
          f"final sampled {rl['eval'][-1]['sampled_success/mean']:.3f}", flush=True)
    tr = run_trl(seed_dir, seed, base, domains, evals, rl)
    print(f"seed {seed}: TRL   {statistics.median(tr['step_times_s'][WARMUP:]):.3f} s/step, "
          f"final sampled {tr['eval'][-1]['sampled_success/mean']:.3f} (check logits within "
          f"{tr['check_diff']:.1e})", flush=True)
    want = trl_eval_steps([e["step"] for e in rl["eval"]])
    assert [e["step"] for e in tr["eval"]] == want, ("TRL's eval steps", tr["eval"], want)
    totals = {"rlpt": sum(rl["step_times_s"]), "trl": sum(tr["step_times_s"])}
    per_seed[seed] = {"rlpt": figures(rl, totals["trl"]), "trl": figures(tr, totals["rlpt"])}
    raw[seed] = {"trl": {k: tr[k] for k in ("versions", "threads", "check_diff", "optim", "lr",
                                            "env_retries", "eval_seconds", "attn_implementation",
                                            "trainable_params")}}

  report(per_seed, seeds)
  png = os.path.splitext(out)[0] + ".png"
  plot(per_seed, seeds, png)
  with open(out, "w") as f:
    json.dump({"settings": {"config": config_path(), "job": _JOB.value, "steps": _STEPS.value,
                            "trl_steps": trl_steps(), "trl_micro_batch": _MICRO.value,
                            "eval_every": _EVAL_EVERY.value,
                            "eval_tasks_per_domain": _EVAL_TASKS.value, "seeds": seeds,
                            "torch_threads": _THREADS.value, "base": base["base"],
                            "rlpt_model": _RLPT_MODEL.value if _JOB.value == "tiny" else "native",
                            "machine_cpus": os.cpu_count()},
               "seeds": {str(s): {**per_seed[s], **{"trl_info": raw[s]["trl"]}} for s in seeds}},
              f, indent=1)
  print(f"\nwrote {out} and {png}")


if __name__ == "__main__":
  app.run(main)
