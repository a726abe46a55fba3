r"""Multi-turn episodes on the engine against today's EpisodeRunner schedules.

    python benchmarks/engine_multiturn.py [--episodes=64] [--turns=6] [--new_tokens=32]
        [--obs_tokens=16] [--sigma=1.0] [--width=4]

The model of benchmarks/engine.py (the default config at ``width`` times its
width, random init, temperature 10). ``episodes`` episodes of ``turns`` turns:
a 32-token prompt of its own, each turn up to ``new_tokens`` sampled tokens (EOS may end
it earlier), each environment step answers with ``obs_tokens`` tokens after a
latency drawn from a log-normal (``sigma``) whose mean is one turn's
generation time (the static sampler generating one turn for every episode,
measured first). Latencies are a fixed function of (episode, turn), the same
for every schedule.

Three schedules on the same episodes: the EpisodeRunner batch-synchronous
(turn t+1 once every episode's turn t is graded) and interleaved (half the
running episodes ready) on the static sampler, which re-prefills each
episode's whole conversation every turn; and ``run_on_engine`` (each episode
an engine sequence, its observations prefilled alone). Printed per schedule:
wall time, the engine's speed-up, and prefill tokens per episode against the
conversation's length.
"""

import concurrent.futures
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks.engine_model import random_model  # noqa: E402
from rlpt.rollout.pool_api import EnvironmentPool  # noqa: E402
from rlpt.rollout.records import Episode, Outcome, Prompt, Step  # noqa: E402

_EPISODES = flags.DEFINE_integer("episodes", 64, "Episodes (also the engine's slots).")
_TURNS = flags.DEFINE_integer("turns", 6, "Turns per episode.")
_NEW = flags.DEFINE_integer("new_tokens", 32, "Most tokens a turn samples.")
_OBS = flags.DEFINE_integer("obs_tokens", 16, "Tokens of each observation.")
_SIGMA = flags.DEFINE_float("sigma", 1.0, "Log-normal sigma of the environment latency.")
_WIDTH = flags.DEFINE_integer("width", 4, "Multiple of the default model's width.")


class _Pending:
  """A PendingBatch over a thread pool: steps come back as they finish."""

  def __init__(self, pool, episodes, actions):
    self._pool, self._futures, self._next = pool, {}, 0
    self.add(episodes, actions)

  def add(self, episodes, actions):
    for ep, action in zip(episodes, actions):
      self._futures[self._pool.executor.submit(self._pool.one_step, ep, action)] = self._next
      self._next += 1

  def wait(self, timeout=None):
    if not self._futures:
      return []
    done, _ = concurrent.futures.wait(self._futures, timeout=timeout,
                                      return_when=concurrent.futures.FIRST_COMPLETED)
    return [(self._futures.pop(f), f.result()) for f in done]

  def __len__(self):
    return len(self._futures)


def _prompt(episode: int) -> str:
  """31 characters of its own per episode (no two episodes share a prompt)."""
  return f"{episode:04d}" + "p" * 27


class LatencyPool(EnvironmentPool):
  """Episodes of ``turns`` turns whose steps sleep a log-normal latency (mean
  ``mean_s``) fixed by (episode, turn), then answer ``obs`` characters."""

  def __init__(self, turns: int, obs: int, mean_s: float, sigma: float):
    self.turns, self.obs, self.mean_s, self.sigma = turns, obs, mean_s, sigma
    self.executor = concurrent.futures.ThreadPoolExecutor(256)
    self._lock = threading.Lock()

  def latency(self, episode: int, turn: int) -> float:
    z = np.random.default_rng([episode, turn]).standard_normal()
    return self.mean_s * float(np.exp(self.sigma * z - self.sigma ** 2 / 2))

  def one_step(self, ep: Episode, action: str) -> Step:
    time.sleep(self.latency(ep.task.seed, ep.turns))
    with self._lock:
      ep.turns += 1
      done = ep.turns >= self.turns
    return Step("" if done else "o" * self.obs, done, Outcome(0.0, False, "FAIL", False, {}))

  def start(self, tasks):
    return [Episode(t, None, _prompt(t.seed), {}) for t in tasks]

  def step(self, episodes, actions):
    return list(self.executor.map(self.one_step, episodes, actions))

  def submit(self, episodes, actions):
    return _Pending(self, episodes, actions)

  def abandon(self, episodes):
    pass

  def reset(self, tasks):
    return [Prompt(t, _prompt(t.seed), {}) for t in tasks]

  def stats(self):
    return {}

  def close(self):
    self.executor.shutdown()


def _static_generate(graphdef, cfg, params, batch, max_prompt_len, new_tokens, sampling):
  """generate(ids, lengths, grouped, key) for EpisodeRunner.run on the static
  sampler, rows padded to ``batch``; counts the prefilled tokens."""
  from rlpt.device import ProgramPool
  from rlpt.device.programs import jit_sampler
  from rlpt.sampling import Sampler
  from rlpt.sharding import SAMPLE_RULES, make_mesh, state_shardings
  from rlpt.tokenizers import ByteTokenizer
  mesh, tok = make_mesh({"data": -1}), ByteTokenizer()
  sampler = Sampler(graphdef, cfg, max_prompt_len, new_tokens, tok.pad_id, (tok.eos_id,))
  fn = jit_sampler(ProgramPool(), sampler, sampling, state_shardings(params, mesh, SAMPLE_RULES),
                   mesh, SAMPLE_RULES)
  counts = {"prefill": 0, "calls": 0}

  def generate(ids, lengths, grouped, key):
    n = len(ids)
    counts["prefill"] += int(np.sum(lengths))
    counts["calls"] += 1
    ids = np.concatenate([ids, np.repeat(ids[:1], batch - n, 0)])
    lengths = np.concatenate([lengths, np.repeat(lengths[:1], batch - n, 0)])
    out = fn(params, ids, lengths, np.asarray(jax.random.key_data(key)))
    return tuple(np.asarray(x)[:n] for x in out)
  return generate, counts


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()
  from rlpt.config import RolloutConfig
  from rlpt.data import Task
  from rlpt.engine import Engine, EngineConfig
  from rlpt.rollout.episodes import EpisodeRunner
  from rlpt.sampling import SamplingParams
  from rlpt.tokenizers.prompts import PromptFormat
  from rlpt.tokenizers import ByteTokenizer
  n, turns, new, obs = _EPISODES.value, _TURNS.value, _NEW.value, _OBS.value
  cfg, graphdef, params, model, make_ctx = random_model(_WIDTH.value)
  sampling, tok = SamplingParams(10.0), ByteTokenizer()
  conv = 32 + turns * new + (turns - 1) * obs
  ro = RolloutConfig(batch_size=n, group_size=1, max_prompt_len=conv - new, max_new_tokens=new)
  tasks = [Task("latency", i, "train") for i in range(n)]
  generate, counts = _static_generate(graphdef, cfg, params, n, ro.max_prompt_len, new, sampling)
  key = jax.random.key(0)
  ids = np.full((n, 32), tok.pad_id, np.int32)
  ids[:, 0], ids[:, 1:] = tok.bos_id, ord("p")
  generate(ids, np.full(n, 32, np.int32), False, key)         # compile turn 1
  t = time.perf_counter()
  generate(ids, np.full(n, 32, np.int32), False, key)
  turn_s = time.perf_counter() - t
  print(f"one turn of {n} episodes on the static sampler: {turn_s:.2f} s (the latency mean)")
  results = {}
  for name in ("synchronous", "interleaved", "engine"):
    pool = LatencyPool(turns, obs, turn_s, _SIGMA.value)
    runner = EpisodeRunner(pool, PromptFormat(tok), ro, (tok.eos_id,), 16)
    runner.interleave = name == "interleaved"
    if name == "engine":
      ctx = make_ctx()
      ctx = ctx.__class__(ctx.mesh, ctx.train_rules, ctx.sample_rules, 0, tok, ctx.programs)
      engine = Engine(EngineConfig(slots=n, max_len=conv, chunk_steps=8, prefill_len=32), ctx,
                      model, (tok.eos_id,))
      engine.warm_up(params, sampling)
      kd = lambda i, t_: np.asarray(jax.random.key_data(jax.random.fold_in(jax.random.fold_in(key, i), t_)))
      t = time.perf_counter()
      batch = runner.run_on_engine(tasks, engine, lambda: engine.step(params, sampling), kd)
      wall, prefill = time.perf_counter() - t, engine.stats["prefill_tokens"]
    else:
      runner.run(tasks, generate, False, key, jax.random.fold_in)   # compiles every width
      counts.update(prefill=0, calls=0)
      t = time.perf_counter()
      batch = runner.run(tasks, generate, False, key, jax.random.fold_in)
      wall, prefill = time.perf_counter() - t, counts["prefill"]
    pool.close()
    length = float(np.mean([int((row != tok.pad_id).sum()) for row in batch.seq.tokens]))
    results[name] = (wall, prefill / n, length, float(np.mean(batch.stats["turns"])))
  print(f"{'schedule':<13}{'wall s':>8}{'engine x':>10}{'prefill/episode':>17}{'conversation':>14}"
        f"{'turns':>7}")
  for name, (wall, pre, length, nturns) in results.items():
    print(f"{name:<13}{wall:>8.1f}{wall / results['engine'][0]:>10.2f}{pre:>17.0f}{length:>14.0f}"
          f"{nturns:>7.1f}")


if __name__ == "__main__":
  app.run(main)
