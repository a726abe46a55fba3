"""An rlpt GRPO job in Hugging Face TRL: the TRL side of
``benchmarks/peers/main_job.py``, which writes its inputs and reads its result.

    .peers/trl/bin/python benchmarks/peers/main_job_trl.py --model_dir=D/base_hf \
        --inputs=D/seed0/trl_inputs.json --out=D/seed0/trl.json

``--inputs`` (written by main_job.py from the rlpt run's config and its
``tasks.jsonl``) holds the seed, the domains, the job's settings (batch, group,
lengths, temperature, optimizer, clip, KL, LoRA, stop and pad ids, chat or
bare prompts), every training and held-out task with its prompt text and the
ids rlpt gave it, the steps to evaluate at, and check prompts with rlpt's
last-position logits. This script

1. loads the export with ``AutoModelForCausalLM`` / ``AutoTokenizer``, checks
   that its logits equal rlpt's (max |diff| within the job's tolerance) and
   that TRL's own tokenization of every prompt (``apply_chat_template`` on the
   user turn for a chat model, the tokenizer on the text for a bare one) is
   rlpt's ids;
2. trains with ``trl.GRPOTrainer`` (``peft_config`` LoRA when the job trains
   adapters: the reference is then the model with its adapters off, as in
   rlpt) on the prompts of rlpt's tasks, in order (see main_job.py's docstring
   for every setting and why), rewarding each completion with its task's
   environment through ``grading.GradingClient``: rlpt's own interpreter,
   packages and sandbox grade it, 4 worker threads as rlpt's env pool has; an
   infrastructure failure is retried twice on a fresh environment, then the
   completion is unscored (None: TRL gives it advantage 0);
3. evaluates the policy on the held-out tasks (greedy and sampled,
   ``model.generate`` on rlpt's prompt ids) before training and after each
   step in the list; the evaluation is outside the timed steps and keeps the
   training random stream as it was.

Each optimizer step is timed with a ``TrainerCallback`` (as trl_workload.py's
StepTimer): the whole step, and the part before the reward function is first
called (generation and the reference model's log-probs, which TRL computes
before the rewards); the reward function times its environment calls, and the
rest of the step is the policy forward, backward and AdamW (with TRL's
bookkeeping: advantages, metrics).
"""

import argparse
import collections
import json
import os
import statistics
import time

import numpy as np
import torch
import transformers
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from grading import GradingClient  # noqa: E402  (this script's folder is on the path)
from trl_workload import QUIET_CPU, StepTimer  # noqa: E402

# rlpt's LoRA targets by their Hugging Face (Llama, Qwen, Gemma) module names.
LORA_MODULES = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj",
                "w_gate": "gate_proj", "w_up": "up_proj", "w_down": "down_proj"}


class Answers:
  """rlpt's answer text (rlpt.rollout.episodes._answer_text): the completion
  without its final stop token, decoded as rlpt's tokenizer decodes (the
  byte-level bases: bytes < 256 as UTF-8 with replacement; others: the
  tokenizer's decode without special tokens)."""

  def __init__(self, tokenizer, stop_ids, byte_level: bool):
    self.tokenizer, self.stop_ids, self.byte_level = tokenizer, set(stop_ids), byte_level

  def cut(self, ids) -> list[int]:
    """``ids`` up to and including the first stop token."""
    ids = [int(i) for i in ids]
    for n, i in enumerate(ids):
      if i in self.stop_ids:
        return ids[:n + 1]
    return ids

  def text(self, ids) -> str:
    ids = [int(i) for i in ids]
    if ids and ids[-1] in self.stop_ids:
      ids = ids[:-1]
    if self.byte_level:
      return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")
    return self.tokenizer.decode(ids, skip_special_tokens=True)


class Evaluator(TrainerCallback):
  """Held-out success, greedy and sampled (pass@1 at the job's temperature),
  per domain and the mean over domains, as rlpt.evaluation; runs after the
  steps in ``steps`` (added after StepTimer, so outside the timed step).
  ``prompt_ids``: rlpt's ids of each task's prompt."""

  def __init__(self, answers: Answers, grader: GradingClient, tasks, prompt_ids, domains, steps,
               seed: int, job: dict, batch_size: int = 128):
    self.answers, self.grader, self.tasks, self.domains = answers, grader, tasks, domains
    self.prompt_ids, self.steps, self.seed, self.job = prompt_ids, set(steps), seed, job
    self.batch_size = batch_size
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
      for start in range(0, len(self.prompt_ids), self.batch_size):
        answers += self._generate(model, self.prompt_ids[start:start + self.batch_size], sampled)
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

  def _generate(self, model, prompt_ids, sampled: bool) -> list[str]:
    pad, width = self.job["pad_id"], max(len(p) for p in prompt_ids)
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompt_ids])  # left-padded
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    kwargs = (dict(do_sample=True, temperature=self.job["temperature"], top_k=0, top_p=1.0)
              if sampled else dict(do_sample=False, temperature=None, top_k=None, top_p=None))
    with torch.no_grad():
      out = model.generate(input_ids=ids, attention_mask=mask,
                           max_new_tokens=self.job["max_new_tokens"],
                           eos_token_id=list(self.job["stop_ids"]), pad_token_id=pad,
                           use_cache=True, **kwargs)
    return [self.answers.text(self.answers.cut(row)) for row in out[:, width:].tolist()]


def trl_prompt(text: str, chat: bool):
  """The prompt as TRL is given it: the user turn of a conversation for a chat
  model (TRL applies the template), the text for a bare one."""
  return [{"role": "user", "content": text}] if chat else text


def check(model, tokenizer, inputs: dict, texts: list[str], ids: list[list[int]]) -> float:
  """Max |diff| of the check prompts' last-position logits vs rlpt's; raises
  unless TRL's tokenization of every prompt is rlpt's ids."""
  chat = inputs["job"]["chat"]
  for text, want in zip(texts, ids):
    if chat:
      got = tokenizer.apply_chat_template([trl_prompt(text, True)], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"][0]
    else:
      got = tokenizer(text)["input_ids"]
    if list(got) != list(want):
      raise SystemExit(f"TRL tokenizes the prompt {text[:80]!r}... as {list(got)[:24]}..., rlpt "
                       f"as {list(want)[:24]}...")
  tokens = torch.as_tensor(inputs["check"]["tokens"], dtype=torch.long)
  with torch.no_grad():
    logits = model(input_ids=tokens).logits[:, -1].float().numpy()
  diff = float(np.max(np.abs(logits - np.asarray(inputs["check"]["logits"], np.float32))))
  if not diff < inputs["job"]["check_atol"]:
    raise SystemExit(f"TRL's logits differ from rlpt's by {diff:.3g} (allowed "
                     f"{inputs['job']['check_atol']}).")
  return diff


def micro_steps(job: dict) -> int:
  batch = job["per_step"] * job["group"]
  if job["micro_batch"] <= 0 or batch % job["micro_batch"]:
    raise SystemExit(f"micro_batch {job['micro_batch']} does not divide the batch of {batch}.")
  return batch // job["micro_batch"]


def grpo_config(job: dict, steps: int, seed: int, output_dir: str) -> GRPOConfig:
  """TRL's settings for the job's (main_job.py's docstring says why each)."""
  return GRPOConfig(
      output_dir=output_dir,
      # Batch: prompts x group completions, one generation and one update per
      # step, the update's forward and backward in micro-batches of
      # ``micro_batch`` whose gradients add up to the whole batch's ("dapo"
      # divides by the whole batch's tokens).
      per_device_train_batch_size=job["micro_batch"],
      num_generations=job["group"],
      gradient_accumulation_steps=micro_steps(job),
      steps_per_generation=micro_steps(job),
      num_iterations=1,
      max_steps=steps,
      shuffle_dataset=False,
      # Generation: up to max_new_tokens, stop at the stop ids, no top-k / top-p.
      max_completion_length=job["max_new_tokens"],
      temperature=job["temperature"],
      top_k=0,
      top_p=1.0,
      # Loss: clipped surrogate, k3 KL in the loss without TRL's importance-ratio
      # "bias correction" (rlpt has none), "dapo": the sum over all completion
      # tokens of the batch / their number (rlpt's token-mean).
      loss_type="dapo",
      epsilon=job["clip_eps"],
      epsilon_high=job["clip_eps"],
      beta=job["kl_beta"],
      use_bias_correction_kl=False,
      scale_rewards="group",
      # Optimizer: rlpt's AdamW (optax's eps 1e-8), global-norm clip; linear
      # warm-up from 0 over warmup_steps, then constant.
      learning_rate=job["learning_rate"],
      lr_scheduler_type="constant_with_warmup",
      warmup_steps=job["warmup_steps"],
      weight_decay=job["weight_decay"],
      adam_beta1=job["b1"],
      adam_beta2=job["b2"],
      adam_epsilon=1e-8,
      max_grad_norm=job["grad_clip"],
      **QUIET_CPU,
      seed=seed,
  )


def lora_config(job: dict):
  """peft's LoRA for rlpt's (rank, alpha, targets), or None for full training.
  Both start A uniform in +-1/sqrt(fan_in) (peft's kaiming-uniform, a=sqrt(5))
  and B at zero."""
  if not job["lora"]:
    return None
  from peft import LoraConfig
  lora = job["lora"]
  return LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=0.0, bias="none",
                    target_modules=[LORA_MODULES[t] for t in lora["targets"]],
                    task_type="CAUSAL_LM")


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
  seed, domains, steps_tasks, job = inputs["seed"], inputs["domains"], inputs["tasks"], inputs["job"]
  steps = len(steps_tasks)
  assert [r["step"] for r in steps_tasks] == list(range(1, steps + 1)), "tasks.jsonl is not 1..N"
  per_step, group = job["per_step"], job["group"]
  assert all(len(r["tasks"]) == per_step for r in steps_tasks), "a step's task count differs"

  grader = GradingClient(job["rlpt_python"], job["make_kwargs"])
  train_tasks = [tuple(t) for r in steps_tasks for t in r["tasks"]]
  train = inputs["prompts"]["train"]
  evals = inputs["prompts"]["eval"]
  assert [tuple(t) for t in train["tasks"]] == train_tasks, "train prompts are not tasks.jsonl's"
  eval_tasks = [tuple(t) for t in evals["tasks"]]

  tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
  model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
  model.eval()
  check_diff = check(model, tokenizer, inputs, train["texts"] + evals["texts"],
                     train["ids"] + evals["ids"])
  print(f"check logits within {check_diff:.1e} of rlpt's; prompts tokenize as rlpt's", flush=True)
  answers = Answers(tokenizer, job["stop_ids"], job["byte_level"])

  # "row" is the prompt's index in train_tasks; the reward function checks the order with it.
  dataset = Dataset.from_dict({"prompt": [trl_prompt(t, job["chat"]) for t in train["texts"]],
                               "row": list(range(len(train_tasks)))})
  timer = StepTimer()
  seen_rows, train_success, env_seconds = [], [], []

  def env_reward(completion_ids, row, trainer_state, **kwargs):
    timer.mark_reward()
    step = trainer_state.global_step  # updates done so far: this batch is step + 1
    want = [step * per_step + i for i in range(per_step) for _ in range(group)]
    assert list(row) == want, f"step {step + 1}: rows {list(row)[:16]}... != tasks.jsonl's order"
    seen_rows.append(list(row))
    t = time.perf_counter()
    graded = grader.grade([train_tasks[r] for r in row], [answers.text(c) for c in completion_ids])
    env_seconds.append(time.perf_counter() - t)
    valid = [g for g in graded if not g["infra_error"]]
    train_success.append(float(np.mean([g["success"] for g in valid])) if valid else 0.0)
    return [g["reward"] for g in graded]

  config = grpo_config(job, steps, seed,
                       os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl_grpo"))
  evaluator = Evaluator(answers, grader, eval_tasks, evals["ids"], domains,
                        [s for s in inputs["eval_steps"] if s > 0], seed, job)
  if 0 in inputs["eval_steps"]:
    evaluator.run(model, 0)
  trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config, train_dataset=dataset,
                        processing_class=tokenizer, callbacks=[timer, evaluator],
                        peft_config=lora_config(job))
  if job["lora"]:  # the reference is the model with its adapters off
    assert trainer.ref_model is None and "ref" not in trainer.model.peft_config
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
  else:
    assert trainer.ref_model is not None, "TRL did not create a reference model"
    trainable = sum(p.numel() for p in trainer.model.parameters())
  assert set(trainer.eos_token_ids) <= set(job["stop_ids"]) and (
      set(job["stop_ids"]) & set(trainer.eos_token_ids)), (trainer.eos_token_ids, job["stop_ids"])
  trainer.train()
  assert not trainer.model.is_activation_checkpointing, "activation checkpointing is on"
  assert len(timer.times) == steps and len(seen_rows) == steps, (len(timer.times), len(seen_rows))
  grader.close()
  optim = getattr(trainer.args.optim, "value", trainer.args.optim)

  result = {
      "peer": "trl",
      "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                   "torch": torch.__version__},
      "threads": torch.get_num_threads(),
      "check_diff": check_diff,
      "trainable_params": trainable,
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
