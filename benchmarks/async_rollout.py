r"""Synchronous vs asynchronous rollout with slow environments: step time and idle time.

    python benchmarks/async_rollout.py [--latency=0.2] [--latency_dist=fixed] \
        [--sandbox_workers=8] [--steps=6] [--setups=0,1,2] [--max_attempts=1] \
        [--config=experiments/grpo_default.py] [--config.engine.enabled=True
        --config.engine.in_flight=continue]

Every sandbox job (code and shell domains) gets ``--latency`` seconds of
injected delay (``benchmarks/slow_envs.py``; ``--latency_dist=exponential`` makes it a
long tail with that mean), as a remote or heavy sandbox would add. Each setup
runs the same config for ``--warmup`` untimed steps and ``--steps`` timed ones. A setup
is ``K[:S][i]``: ``rollout.staleness=K``; ``:S`` gives the sandbox domains a
budget of their own, ``rollout.domain_staleness=S``; a trailing ``i`` turns on
``rollout.interleave_turns`` (with ``--max_attempts`` > 1, multi-turn
episodes). Reported: median step time, the accelerator's idle fraction (share
of the step's wall time in which no jitted program ran), the environments' and
the device's share of a synchronous step, and the speedup over the first setup.
Uses the config's cached base model.
"""

import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "grpo_default.py"),
    "Experiment config.", lock_config=True)
_LATENCY = flags.DEFINE_float("latency", 0.2, "Seconds added to every sandbox job (mean).")
_DIST = flags.DEFINE_enum("latency_dist", "fixed", ["fixed", "exponential"],
                          "Fixed latency, or exponential with that mean (a long tail).")
_WORKERS = flags.DEFINE_integer("sandbox_workers", 8, "Sandbox-class worker threads.")
_STEPS = flags.DEFINE_integer("steps", 6, "Timed steps per setup.")
_WARMUP = flags.DEFINE_integer("warmup", 4, "Untimed steps per setup first (compiles).")
_SETUPS = flags.DEFINE_list("setups", ["0", "1", "2"],
                            "Setups K[:S][i]: staleness K, sandbox domains at S, i = interleave.")
_ATTEMPTS = flags.DEFINE_integer("max_attempts", 1, "rollout.max_attempts (> 1: multi-turn).")

SETUP = re.compile(r"^(\d+)(?::(\d+))?(i?)$")


def parse_setup(text: str) -> tuple[int, int | None, bool]:
  m = SETUP.match(text.strip())
  if not m:
    raise flags.ValidationError(f"--setups entry {text!r} is not K[:S][i] (e.g. 0, 2, 1:3, 0i).")
  return int(m.group(1)), None if m.group(2) is None else int(m.group(2)), bool(m.group(3))


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()  # orbax / XLA INFO lines would bury the figures
  from environments import registry
  from rlpt.config import TrainConfig, from_config_dict
  from rlpt.trainer import Trainer
  from benchmarks.slow_envs import SlowEnvPool

  setups = [(s, *parse_setup(s)) for s in _SETUPS.value]
  rows = []
  for name, k, sandbox_k, interleave in setups:
    cd = _CONFIG.value
    with cd.unlocked():
      cd.progress = False
      cd.checkpoint.every = 0
      cd.rollout.staleness = k
      cd.rollout.interleave_turns = interleave
      cd.rollout.max_attempts = _ATTEMPTS.value
      cd.rollout.domain_staleness = (
          {d: sandbox_k for d in cd.domains.ids if "sandbox" in registry.get(d).tags}
          if sandbox_k is not None else {})
      cd.env.sandbox_workers = _WORKERS.value
    with tempfile.TemporaryDirectory(prefix="rlpt-async-") as workdir:
      cfg = from_config_dict(TrainConfig, cd)
      trainer = Trainer(cfg, workdir, env_pool=SlowEnvPool.from_train(
          cfg, latency_s=_LATENCY.value, dist=_DIST.value))
      try:
        for _ in range(_WARMUP.value):
          trainer.train_step()
        ms = [trainer.train_step() for _ in range(_STEPS.value)]
      finally:
        trainer.close()
    med = {key: statistics.median(m.get(key, 0.0) for m in ms)
           for key in ("time/step", "accelerator/idle_fraction", "time/generate",
                       "time/environments", "time/reference", "time/update", "async/staleness",
                       "rollout/turns", "engine/refresh_tokens", "engine/decoded_tokens",
                       "engine/slot_steps")}
    rows.append((name, med))
    print(f"setup {name}: step {med['time/step']:.2f} s, idle "
          f"{med['accelerator/idle_fraction']:.1%} (generate {med['time/generate']:.2f}, "
          f"environments {med['time/environments']:.2f}, reference {med['time/reference']:.2f}, "
          f"update {med['time/update']:.2f}; mean staleness {med['async/staleness']:.2f}, "
          f"turns {med['rollout/turns']:.2f})", flush=True)
    if cfg.engine.enabled:
      print(f"  engine ({cfg.engine.in_flight}): slots {cfg.engine.slots}, slot use "
            f"{med['engine/decoded_tokens'] / max(1.0, med['engine/slot_steps']):.0%}, "
            f"recomputed for new weights {med['engine/refresh_tokens']:.0f} tokens/step",
            flush=True)

  base_name, base = rows[0]
  device = base["time/generate"] + base["time/reference"] + base["time/update"]
  print(f"\nsandbox latency {_LATENCY.value:g} s/job ({_DIST.value}), {_WORKERS.value} sandbox "
        f"workers, max_attempts {_ATTEMPTS.value}, median of {_STEPS.value} steps; setup "
        f"{base_name}: environments {base['time/environments']:.2f} s, device "
        f"{device:.2f} s per step")
  print("| setup | step (s) | accelerator idle | speedup |")
  print("|---|---:|---:|---:|")
  for name, med in rows:
    print(f"| {name} | {med['time/step']:.2f} | {med['accelerator/idle_fraction']:.1%} | "
          f"{base['time/step'] / med['time/step']:.2f}x |")


if __name__ == "__main__":
  app.run(main)
