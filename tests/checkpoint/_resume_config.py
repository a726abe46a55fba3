"""The grpo_default smoke config, shaped to exercise resuming (tests/checkpoint/test_resume.py).

    python -m launch.train --config=tests/checkpoint/_resume_config.py \
        --config.base.checkpoint=BASE --workdir=DIR

The entropy bonus makes every update move the weights (a random base earns no
reward, so without it the policy would never change), dynamic sampling makes
several task draws per step, and the adaptive KL controller and success-band
curriculum carry state across steps. Three domains whose prompts fit one
16-token bucket keep every program to one compiled shape.
"""

import ml_collections

from experiments import grpo_default

RUNNER = "train"
STEPS = 12
EVERY = 3


def get_config(arg: str = "") -> ml_collections.ConfigDict:
  del arg
  c = grpo_default.get_config("smoke")
  c.steps = STEPS
  c.progress = False
  c.domains.ids = ["rlpt/math-mul-easy-v0", "rlpt/strings-reverse-easy-v0",
                   "rlpt/strings-sort-easy-v0"]
  c.checkpoint.update(every=EVERY, keep=2)
  c.eval.update(every=6, tasks_per_domain=2)
  c.env.workers = 1
  c.rl.update(entropy_coef=0.05, kl_controller="adaptive", kl_target=0.01, kl_horizon=100,
              dynamic_sampling=True, max_rollouts_per_step=2)
  c.curriculum.strategy = "success_band"
  return c
