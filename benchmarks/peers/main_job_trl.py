"""rlpt's main job (experiments/grpo_default.py) in Hugging Face TRL: the TRL side
of ``benchmarks/peers/main_job.py``, which writes its inputs and reads its result.

    .peers/trl/bin/python benchmarks/peers/main_job_trl.py --model_dir=D/base_hf \
        --inputs=D/seed0/trl_inputs.json --out=D/seed0/trl.json

``--inputs`` (written by main_job.py) holds the seed, the domains, rlpt's
``tasks.jsonl`` rows (the 16 tasks of every step, in batch order), the held-out
tasks, the steps to evaluate at, and check prompts with rlpt's last-position
logits. This script

1. loads the base export with ``AutoModelForCausalLM`` / ``AutoTokenizer`` and
   checks that its logits equal rlpt's (max |diff| < 1e-3) and that the
   tokenizer encodes every prompt as rlpt does (BOS + UTF-8 bytes);
2. trains with ``trl.GRPOTrainer`` on the prompts of rlpt's tasks, in order
   (see main_job.py's docstring for every setting and why), rewarding each
   completion with its task's environment (``gymnasium.make(domain)``,
   ``reset(seed, split)``, ``step(answer)``), 4 worker threads as rlpt's env
   pool has; an infrastructure failure is retried twice on a fresh environment,
   then the completion is unscored (None: TRL gives it advantage 0);
3. evaluates the policy on the held-out tasks (greedy and sampled,
   ``model.generate``) before training and after each step in the list; the
   evaluation is outside the timed steps and keeps the training random stream
   as it was.

Each optimizer step is timed with a ``TrainerCallback`` (as trl_workload.py's
StepTimer): the whole step, and the part before the reward function is first
called (generation and the reference model's log-probs, which TRL computes
before the rewards); the reward function times its environment calls, and the
rest of the step is the policy forward, backward and AdamW (with TRL's
bookkeeping: advantages, metrics).
"""

import argparse
import collections
import concurrent.futures
import json
import os
import statistics
import threading
import time

import gymnasium
import numpy as np
import torch
import transformers
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

import environments  # noqa: F401  (registers the rlpt/ domains with gymnasium)
from trl_workload import StepTimer  # noqa: E402  (this script's folder is on the path)

GROUP = 8
MAX_NEW = 24
WORKERS = 4  # rlpt's env.workers (and sandbox_workers = workers) default
RETRIES = 2  # rlpt's env.retries default
CHECK_ATOL = 1e-3
BOS, EOS, PAD = 257, 258, 256


def answer_text(ids) -> str:
  """rlpt's answer: the completion without its final EOS, bytes < 256 only, UTF-8
  with replacement (rlpt.rollout.episodes._answer_text + ByteTokenizer.decode)."""
  ids = [int(i) for i in ids]
  if ids and ids[-1] == EOS:
    ids = ids[:-1]
  return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


class Grader:
  """Environment instances per thread and domain; grades (task, answer) pairs
  concurrently as rlpt's EnvPool does (reset to the task, one step)."""

  def __init__(self, workers: int = WORKERS):
    self._local = threading.local()
    self.pool = concurrent.futures.ThreadPoolExecutor(workers)
    self.retries = 0

  def _env(self, domain: str, fresh: bool = False):
    envs = self._local.__dict__.setdefault("envs", {})
    if fresh or domain not in envs:
      if domain in envs:
        envs[domain].close()
      envs[domain] = gymnasium.make(domain, disable_env_checker=True)
    return envs[domain]

  def prompt(self, task) -> str:
    obs, _ = self._env(task[0]).reset(seed=int(task[1]), options={"split": task[2]})
    return obs

  def _grade(self, task, answer: str) -> dict:
    domain, seed, split = task
    for attempt in range(1 + RETRIES):
      try:
        env = self._env(domain, fresh=attempt > 0)
        env.reset(seed=int(seed), options={"split": split})
        _, reward, _, _, info = env.step(answer)
        infra = bool(info.get("infra_error", False))
      except Exception as e:  # noqa: BLE001  As rlpt: an environment error is an infra failure.
        reward, info, infra = 0.0, {"feedback": repr(e)}, True
      if not infra:
        return {"reward": float(reward), "success": bool(info.get("success", reward >= 1.0)),
                "infra_error": False}
      self.retries += 1
      time.sleep(0.05 * 2 ** attempt)
    return {"reward": None, "success": False, "infra_error": True}

  def grade(self, tasks, answers) -> list[dict]:
    return list(self.pool.map(self._grade, tasks, answers))


class Evaluator(TrainerCallback):
  """Held-out success, greedy and sampled (pass@1 at temperature 1), per domain and
  the mean over domains, as rlpt.evaluation; runs after the steps in ``steps``
  (added after StepTimer, so outside the timed step)."""

  def __init__(self, tokenizer, grader: Grader, tasks, prompts, domains, steps, seed: int,
               batch_size: int = GROUP * 16):
    self.tokenizer, self.grader, self.tasks, self.domains = tokenizer, grader, tasks, domains
    self.prompts, self.steps, self.seed, self.batch_size = prompts, set(steps), seed, batch_size
    self.rows, self.seconds = [], []

  def on_step_end(self, args, state, control, model=None, **kwargs):
    if state.global_step in self.steps:
      self.run(model, state.global_step)

  def run(self, model, step: int) -> dict:
    t = time.perf_counter()
    was_training = model.training
    rng = torch.get_rng_state()
    model.eval()
    row = {"step": step}
    for prefix, sampled in (("success", False), ("sampled_success", True)):
      torch.manual_seed(1_000_003 * self.seed + 2 * step + int(sampled))
      answers = []
      for start in range(0, len(self.prompts), self.batch_size):
        answers += self._generate(model, self.prompts[start:start + self.batch_size], sampled)
      graded = self.grader.grade(self.tasks, answers)
      per = collections.defaultdict(list)
      for task, g in zip(self.tasks, graded):
        if not g["infra_error"]:
          per[task[0]].append(float(g["success"]))
      for d in self.domains:
        row[f"{prefix}/{d}"] = float(np.mean(per[d])) if per[d] else float("nan")
      row[f"{prefix}/mean"] = float(np.nanmean([row[f"{prefix}/{d}"] for d in self.domains]))
    torch.set_rng_state(rng)
    model.train(was_training)
    self.rows.append(row)
    self.seconds.append(time.perf_counter() - t)
    print(f"eval at step {step}: greedy {row['success/mean']:.3f}, sampled "
          f"{row['sampled_success/mean']:.3f} ({self.seconds[-1]:.1f} s)", flush=True)
    return row

  def _generate(self, model, prompts, sampled: bool) -> list[str]:
    enc = self.tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    kwargs = (dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sampled
              else dict(do_sample=False, temperature=None, top_k=None, top_p=None))
    with torch.no_grad():
      out = model.generate(**enc, max_new_tokens=MAX_NEW, eos_token_id=EOS, pad_token_id=PAD,
                           use_cache=True, **kwargs)
    texts = []
    for row in out[:, enc["input_ids"].shape[1]:].tolist():
      n = row.index(EOS) + 1 if EOS in row else len(row)
      texts.append(answer_text(row[:n]))
    return texts


def check(model, tokenizer, inputs: dict, prompts: list[str]) -> float:
  """Max |diff| of the check prompts' last-position logits vs rlpt's; asserts the
  tokenizer gives rlpt's ids (BOS + UTF-8 bytes) for every prompt."""
  ids = tokenizer(prompts)["input_ids"]
  for p, got in zip(prompts, ids):
    assert got == [BOS] + list(p.encode("utf-8")), (p, got)
  tokens = torch.as_tensor(inputs["check"]["tokens"], dtype=torch.long)
  with torch.no_grad():
    logits = model(input_ids=tokens).logits[:, -1].float().numpy()
  diff = float(np.max(np.abs(logits - np.asarray(inputs["check"]["logits"], np.float32))))
  if not diff < CHECK_ATOL:
    raise SystemExit(f"TRL's logits differ from rlpt's by {diff:.3g} (allowed {CHECK_ATOL}).")
  return diff


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--model_dir", required=True, help="The base as a Hugging Face checkpoint.")
  parser.add_argument("--inputs", required=True, help="trl_inputs.json written by main_job.py.")
  parser.add_argument("--out", required=True, help="Path of the JSON result.")
  parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads.")
  args = parser.parse_args()
  torch.set_num_threads(args.threads)
  with open(args.inputs) as f:
    inputs = json.load(f)
  seed, domains, steps_tasks = inputs["seed"], inputs["domains"], inputs["tasks"]
  steps = len(steps_tasks)
  assert [r["step"] for r in steps_tasks] == list(range(1, steps + 1)), "tasks.jsonl is not 1..N"

  grader = Grader()
  train_tasks = [tuple(t) for r in steps_tasks for t in r["tasks"]]
  per_step = len(steps_tasks[0]["tasks"])
  assert all(len(r["tasks"]) == per_step for r in steps_tasks)
  train_prompts = list(grader.pool.map(grader.prompt, train_tasks))
  eval_tasks = [tuple(t) for t in inputs["eval_tasks"]]
  eval_prompts = list(grader.pool.map(grader.prompt, eval_tasks))

  tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
  assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (BOS, EOS, PAD)
  model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
  model.eval()
  check_diff = check(model, tokenizer, inputs, train_prompts + eval_prompts)
  print(f"check logits within {check_diff:.1e} of rlpt's; prompts tokenize as rlpt's", flush=True)

  # "row" is the prompt's index in train_tasks; the reward function checks the order with it.
  dataset = Dataset.from_dict({"prompt": train_prompts, "row": list(range(len(train_tasks)))})
  timer = StepTimer()
  seen_rows, train_success, env_seconds = [], [], []

  def env_reward(completion_ids, row, trainer_state, **kwargs):
    timer.mark_reward()
    step = trainer_state.global_step  # updates done so far: this batch is step + 1
    want = [step * per_step + i for i in range(per_step) for _ in range(GROUP)]
    assert list(row) == want, f"step {step + 1}: rows {list(row)[:16]}... != tasks.jsonl's order"
    seen_rows.append(list(row))
    t = time.perf_counter()
    graded = grader.grade([train_tasks[r] for r in row], [answer_text(c) for c in completion_ids])
    env_seconds.append(time.perf_counter() - t)
    valid = [g for g in graded if not g["infra_error"]]
    train_success.append(float(np.mean([g["success"] for g in valid])) if valid else 0.0)
    return [g["reward"] for g in graded]

  config = GRPOConfig(
      output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl_grpo"),
      # Batch: 16 prompts x 8 completions = 128 rows, one generation and one update per step.
      per_device_train_batch_size=per_step * GROUP,
      num_generations=GROUP,
      gradient_accumulation_steps=1,
      steps_per_generation=1,
      num_iterations=1,
      max_steps=steps,
      shuffle_dataset=False,
      # Generation: up to 24 new tokens (stop at EOS 258), temperature 1, no top-k / top-p.
      max_completion_length=MAX_NEW,
      temperature=1.0,
      top_k=0,
      top_p=1.0,
      # Loss: clipped surrogate (epsilon 0.2 both sides), k3 KL in the loss (beta 0.01)
      # without TRL's importance-ratio "bias correction" (rlpt has none), "dapo":
      # the sum over all completion tokens of the batch / their number (rlpt's token-mean).
      loss_type="dapo",
      epsilon=0.2,
      epsilon_high=0.2,
      beta=0.01,
      use_bias_correction_kl=False,
      scale_rewards="group",
      # Optimizer: rlpt's OptimConfig defaults (AdamW b1 0.9, b2 0.99, eps 1e-8, no weight
      # decay, global-norm clip 1.0); lr 1e-4, 5 linear warm-up steps from 0, then constant.
      learning_rate=1e-4,
      lr_scheduler_type="constant_with_warmup",
      warmup_steps=5,
      weight_decay=0.0,
      adam_beta1=0.9,
      adam_beta2=0.99,
      adam_epsilon=1e-8,
      max_grad_norm=1.0,
      # fp32 on CPU, no activation (gradient) checkpointing: TRL turns it on by default.
      bf16=False,
      fp16=False,
      use_cpu=True,
      activation_checkpointing=False,
      # No reporting, logging to disk or checkpoints.
      report_to="none",
      save_strategy="no",
      logging_strategy="no",
      disable_tqdm=True,
      dataloader_num_workers=0,
      seed=seed,
  )
  evaluator = Evaluator(tokenizer, grader, eval_tasks, eval_prompts, domains,
                        [s for s in inputs["eval_steps"] if s > 0], seed)
  if 0 in inputs["eval_steps"]:
    evaluator.run(model, 0)
  trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config, train_dataset=dataset,
                        processing_class=tokenizer, callbacks=[timer, evaluator])
  assert trainer.ref_model is not None, "TRL did not create a reference model"
  assert trainer.eos_token_ids == [EOS], trainer.eos_token_ids
  trainer.train()
  assert not trainer.model.is_activation_checkpointing, "activation checkpointing is on"
  assert len(timer.times) == steps and len(seen_rows) == steps, (len(timer.times), len(seen_rows))
  optim = getattr(trainer.args.optim, "value", trainer.args.optim)

  result = {
      "peer": "trl",
      "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                   "torch": torch.__version__},
      "threads": torch.get_num_threads(),
      "check_diff": check_diff,
      "step_times_s": timer.times,
      "rollout_times_s": timer.rollout,
      "env_times_s": env_seconds,
      "train_success": train_success,
      "eval": evaluator.rows,
      "eval_seconds": evaluator.seconds,
      "env_retries": grader.retries,
      "optim": optim,
      "lr": timer.lr,
      "attn_implementation": trainer.model.config._attn_implementation,
  }
  print(f"TRL: {steps} steps, median {statistics.median(timer.times):.3f} s/step", flush=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
