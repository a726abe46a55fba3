"""The fixed peer-comparison workload in Hugging Face TRL (PyTorch, CPU, fp32).

    .peers/trl/bin/python benchmarks/peers/trl_workload.py \
        --model_dir .cache/peers/run0/model --prompts .cache/peers/run0/prompts.npz \
        --out .cache/peers/run0/trl.json

It reads the files ``benchmarks/peers/shared.py`` writes (rlpt's randomly
initialised Llama as a Hugging Face checkpoint, and the prompts) and runs the
same work as ``benchmarks/workload.py`` does in rlpt, through the public APIs:

1. check: a plain forward of the 4 ``check`` prompts; the last-position logits
   are reported so the caller can compare them with rlpt's (same weights and
   architecture);
2. sampling: ``model.generate`` on the 32 ``sample`` prompts, temperature 1, no
   top-k / top-p, exactly 128 new tokens each, with the KV cache; one warm-up
   call, then 3 timed calls; tokens/s = 32 * 128 / median wall time;
3. GRPO: ``trl.GRPOTrainer`` for 7 steps (2 warm-up, 5 timed): each step takes
   the 8 prompts of ``grpo[step]`` in order, samples a group of 8 completions
   per prompt (64 in all) of exactly 64 tokens at temperature 1, rewards each
   with the fraction of even token ids, and makes one AdamW update (lr 1e-5,
   constant, betas (0.9, 0.99), no weight decay, no clipping) of the clipped
   policy loss with a KL penalty (beta 0.04, TRL's k3 estimator) to a frozen
   reference model. Each optimizer step (generation + reference log-probs +
   update) is timed with a ``TrainerCallback``.

TRL takes text prompts and a tokenizer, so the script builds a word-level
tokenizer whose vocabulary maps "t0".."t511" to ids 0..511 and writes each
prompt as "t17 t403 ..."; it checks that the tokenizer returns the ids exactly.
The model has no end-of-sequence token, but TRL needs one: the tokenizer gets
an extra "<eos>" with id 512, outside the model's 512 logits, so it can never
be sampled and no completion stops early (the reward function asserts that
every completion has 64 tokens).

The result is one JSON file (see ``--out``); besides the common fields it has
``rollout_times_s`` / ``rollout_s`` (step begin to the reward call: generation
and reference log-probs) and ``update_s`` (the rest of the step: policy
forward, backward and AdamW), read from the same callback, not TRL internals.
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import transformers
import trl
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

SAMPLE_NEW = 128
GRPO_PROMPTS, GROUP, GRPO_NEW = 8, 8, 64
WARMUP_STEPS = 2
SAMPLE_TIMED_CALLS = 3


def load_inputs(model_dir: str, prompts_path: str) -> dict[str, np.ndarray]:
  missing = [p for p in (os.path.join(model_dir, "config.json"),
                         os.path.join(model_dir, "model.safetensors"), prompts_path)
             if not os.path.isfile(p)]
  if missing:
    sys.exit("missing input file(s): " + ", ".join(missing) + "\nwrite them with: "
             ".venv/bin/python benchmarks/peers/shared.py .cache/peers/run0")
  with np.load(prompts_path) as data:
    prompts = {k: data[k] for k in ("sample", "grpo", "check")}
  assert prompts["sample"].shape == (32, 32), prompts["sample"].shape
  assert prompts["grpo"].shape[1:] == (GRPO_PROMPTS, 32), prompts["grpo"].shape
  assert prompts["grpo"].shape[0] > WARMUP_STEPS, prompts["grpo"].shape
  return prompts


def load_model(model_dir: str):
  model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
  model.eval()
  return model


def make_tokenizer(vocab_size: int):
  """Word-level tokenizer: "t<i>" <-> id i; "<eos>" = vocab_size (never sampled)."""
  vocab = {f"t{i}": i for i in range(vocab_size)}
  vocab["<eos>"] = vocab_size
  tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
  tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="<eos>",
                                 padding_side="left")


def to_text(ids) -> str:
  return " ".join(f"t{int(i)}" for i in ids)


def check_logits(model, check: np.ndarray) -> list[list[float]]:
  with torch.no_grad():
    logits = model(input_ids=torch.as_tensor(check, dtype=torch.long)).logits
  return logits[:, -1].float().tolist()


def sample(model, prompts: np.ndarray) -> list[float]:
  """One warm-up generate call, then SAMPLE_TIMED_CALLS timed ones; returns their wall times."""
  ids = torch.as_tensor(prompts, dtype=torch.long)
  mask = torch.ones_like(ids)
  kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=SAMPLE_NEW,
                min_new_tokens=SAMPLE_NEW, eos_token_id=None, pad_token_id=0, use_cache=True)
  torch.manual_seed(0)
  times = []
  for call in range(1 + SAMPLE_TIMED_CALLS):
    t = time.perf_counter()
    with torch.no_grad():
      out = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    if call:
      times.append(time.perf_counter() - t)
    assert out.shape == (ids.shape[0], ids.shape[1] + SAMPLE_NEW), out.shape
  return times


# GRPOConfig's settings of every run here: fp32 on CPU, no activation
# (gradient) checkpointing (TRL turns it on by default), no reporting, logging
# to disk or checkpoints.
QUIET_CPU = dict(bf16=False, fp16=False, use_cpu=True, activation_checkpointing=False,
                 report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
                 dataloader_num_workers=0)


class StepTimer(TrainerCallback):
  """Times each optimizer step, and the part of it before the reward function
  runs; records the learning rate each step's update uses."""

  def __init__(self):
    self.times, self.rollout, self.lr = [], [], []
    self._start = self._reward_at = None

  def on_step_begin(self, args, state, control, lr_scheduler=None, **kwargs):
    if lr_scheduler is not None:
      self.lr.append(float(lr_scheduler.get_last_lr()[0]))
    self._start, self._reward_at = time.perf_counter(), None

  def mark_reward(self):
    if self._reward_at is None:
      self._reward_at = time.perf_counter()

  def on_step_end(self, args, state, control, **kwargs):
    self.times.append(time.perf_counter() - self._start)
    self.rollout.append(self._reward_at - self._start)


def grpo(model_dir: str, grpo_prompts: np.ndarray, vocab_size: int, work_dir: str) -> dict:
  steps = grpo_prompts.shape[0]
  tokenizer = make_tokenizer(vocab_size)
  flat = grpo_prompts.reshape(steps * GRPO_PROMPTS, -1)
  texts = [to_text(p) for p in flat]
  got = tokenizer(texts)["input_ids"]
  assert all(list(g) == p.tolist() for g, p in zip(got, flat)), "tokenizer does not round-trip"
  # "row" is the prompt's index in grpo.reshape(-1, 32); the reward function uses it to check order.
  dataset = Dataset.from_dict({"prompt": texts, "row": list(range(len(texts)))})

  timer = StepTimer()
  seen_rows = []

  def even_fraction(completion_ids, row, **kwargs):
    timer.mark_reward()
    assert all(len(c) == GRPO_NEW for c in completion_ids), [len(c) for c in completion_ids]
    seen_rows.append(list(row))
    return [sum(1 for t in c if t % 2 == 0) / len(c) for c in completion_ids]

  config = GRPOConfig(
      output_dir=work_dir,  # nothing is saved there
      # Batch: 8 prompts x 8 completions = 64 rows, one generation and one update per step.
      per_device_train_batch_size=GRPO_PROMPTS * GROUP,
      num_generations=GROUP,
      gradient_accumulation_steps=1,
      steps_per_generation=1,
      num_iterations=1,
      max_steps=steps,
      shuffle_dataset=False,
      # Generation: exactly 64 tokens, temperature 1, no top-k / top-p.
      max_completion_length=GRPO_NEW,
      temperature=1.0,
      top_k=0,
      top_p=1.0,
      # Loss and optimizer.
      beta=0.04,
      learning_rate=1e-5,
      lr_scheduler_type="constant",
      warmup_steps=0,
      weight_decay=0.0,
      adam_beta1=0.9,
      adam_beta2=0.99,
      max_grad_norm=1e9,
      **QUIET_CPU,
      seed=0,
  )
  model = load_model(model_dir)
  trainer = GRPOTrainer(model=model, reward_funcs=even_fraction, args=config,
                        train_dataset=dataset, processing_class=tokenizer, callbacks=[timer])
  assert trainer.ref_model is not None, "TRL did not create a reference model"
  assert trainer.eos_token_ids == [vocab_size], trainer.eos_token_ids
  trainer.train()
  assert not trainer.model.is_activation_checkpointing, "activation checkpointing is on"
  optim = getattr(trainer.args.optim, "value", trainer.args.optim)
  attn = trainer.model.config._attn_implementation

  assert len(timer.times) == steps, timer.times
  expected = [[s * GRPO_PROMPTS + i for i in range(GRPO_PROMPTS) for _ in range(GROUP)]
              for s in range(steps)]
  assert seen_rows == expected, "GRPO did not see the prompts in order"
  timed = timer.times[WARMUP_STEPS:]
  rollout = timer.rollout[WARMUP_STEPS:]
  return {
      "step_times_s": timed,
      "step_s": statistics.median(timed),
      "rollout_times_s": rollout,
      "rollout_s": statistics.median(rollout),
      "update_s": statistics.median(t - r for t, r in zip(timed, rollout)),
      "optim": optim,
      "attn_implementation": attn,
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--model_dir", required=True, help="Hugging Face Llama checkpoint directory.")
  parser.add_argument("--prompts", required=True, help="prompts.npz written by shared.py.")
  parser.add_argument("--out", required=True, help="Path of the JSON result.")
  args = parser.parse_args()

  prompts = load_inputs(args.model_dir, args.prompts)
  model = load_model(args.model_dir)
  vocab = model.config.vocab_size

  result = {
      "peer": "trl",
      "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                   "torch": torch.__version__},
      "threads": torch.get_num_threads(),
      "check_logits": check_logits(model, prompts["check"]),
  }
  times = sample(model, prompts["sample"])
  result["sample_times_s"] = times
  result["sample_tok_s"] = prompts["sample"].shape[0] * SAMPLE_NEW / statistics.median(times)
  print(f"sampling: {result['sample_tok_s']:,.0f} tok/s ({times})", flush=True)
  del model

  out_dir = os.path.dirname(os.path.abspath(args.out))
  result.update(grpo(args.model_dir, prompts["grpo"], vocab, os.path.join(out_dir, "trl_grpo")))
  print(f"GRPO step: {result['step_s']:.3f} s ({result['step_times_s']})", flush=True)
  result["notes"] = (
      f"PyTorch eager on CPU, fp32, {result['threads']} threads, attention "
      f"'{result.pop('attn_implementation')}'. Sampling: model.generate, do_sample, temperature 1, "
      "top_k 0, top_p 1, min_new_tokens = max_new_tokens = 128, no eos. GRPO: trl.GRPOTrainer "
      "generating with transformers generate (no vLLM); TRL defaults loss_type 'dapo' (token mean; "
      "all completions have 64 tokens), epsilon 0.2, scale_rewards 'group', k3 KL (beta 0.04) to "
      f"TRL's own frozen reference copy; optimizer '{result.pop('optim')}' (transformers default) "
      "lr 1e-5 constant, betas (0.9, 0.99), weight decay 0, max_grad_norm 1e9 (clipping is a "
      "no-op but the norm is still computed); activation checkpointing off (TRL's default is on); "
      "eos is an out-of-vocabulary id (512) so no completion stops early. rollout_s: step begin "
      "to the reward call (generation + reference log-probs); update_s: the rest (policy "
      "forward, backward, AdamW).")
  os.makedirs(out_dir, exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
