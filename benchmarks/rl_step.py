r"""Sampler decode throughput and RL step time for an experiment config.

    python benchmarks/rl_step.py [--config=experiments/grpo_default.py] [--steps=10]
    python benchmarks/rl_step.py --config=... --profile=/tmp/rl_step_profile   # + where the time goes

Decode throughput: the config's batch decodes exactly ``max_new_tokens`` tokens
(stop tokens disabled) after one warm-up call; median of 3. Step time: full
RL steps (rollout, environments, reference pass, update) after 2 warm-up
steps; median and breakdown. Uses the config's base model (built and cached on
first use, as `make train` does).
"""

import glob
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# --profile: the compiled programs' optimised HLO is dumped (set before JAX starts).
_DUMP = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--profile=")), "")
if _DUMP:
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={_DUMP}/hlo "
                             "--xla_dump_hlo_as_text").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "..", "experiments", "grpo_default.py"),
    "Experiment config.", lock_config=True)
_STEPS = flags.DEFINE_integer("steps", 10, "Timed RL steps.")
flags.DEFINE_string(
    "profile", "", "Trace the reference pass and update of one more RL step under jax.profiler "
    "into this directory and print, for each compiled program that took at least 2% of the op "
    "time, where that time went (XLA operations by kind, the slowest, the matmuls' share of the "
    "matmul rate).")


def _hlo_of(dump: str, module: str, ops) -> str:
  """The optimised HLO of ``module`` among the dumped ones: of the programs so
  named (one per compiled shape), the one that holds the most of ``ops``."""
  texts = []
  for path in glob.glob(os.path.join(dump, f"module_*.{module}.cpu_after_optimizations.txt")):
    with open(path) as f:
      texts.append(f.read())
  return max(texts, key=lambda t: sum(f"%{op} = " in t for op in ops), default="")


def profile(trainer, directory: str, device_gflops: float) -> None:
  """The update of one more RL step (its reference pass and update, run again
  on the step's batch) under the profiler; per compiled program,
  `xla_profile.report`. Generation stays out: its thousands of decode
  operations would overflow the profiler's event buffer."""
  import xla_profile
  actor, seen = trainer.actor, []
  update = actor.update
  actor.update = lambda batch, step: seen.append((batch, step)) or update(batch, step)
  try:
    trainer.train_step()
  finally:
    del actor.update
  events, trace_file = xla_profile.trace(lambda: update(*seen[-1]), os.path.join(directory, "trace"))
  modules = {m: v for m, v in xla_profile.op_times(events).items() if m}
  grand = sum(sum(total.values()) for total, _ in modules.values())
  print(f"\nprofile of one RL update ({trace_file}): XLA op time {grand / 1e6:.2f} s summed over "
        f"{jax.device_count()} device(s), matmul rate {device_gflops:.1f} GFLOP/s per device")
  for module, (total, count) in sorted(modules.items(), key=lambda kv: -sum(kv[1][0].values())):
    if sum(total.values()) < 0.02 * grand:
      continue
    print(f"\n## {module}: {sum(total.values()) / 1e6:.2f} s of op time")
    hlo = _hlo_of(os.path.join(directory, "hlo"), module, total)
    xla_profile.report(total, count, hlo, device_gflops, top=12, overlap=True)


def main(_):
  from launch.common import quiet_libraries
  quiet_libraries()  # orbax / XLA INFO lines would bury the figures
  from rlpt.config import TrainConfig, from_config_dict
  from rlpt.sampling import Sampler, SamplingParams
  from rlpt.trainer import Trainer

  cd = _CONFIG.value
  with cd.unlocked():
    cd.progress = False
  cfg = from_config_dict(TrainConfig, cd)
  workdir = tempfile.TemporaryDirectory(prefix="rlpt-bench-")  # removed when the benchmark ends
  trainer = Trainer(cfg, workdir.name)
  ro = cfg.rollout
  print(f"devices: {jax.device_count()} x {jax.devices()[0].platform}; "
        f"model {trainer.actor.model_cfg.num_params() / 1e6:.2f}M params; batch {ro.batch_size} "
        f"completions x {ro.max_new_tokens} new tokens")

  # Decode throughput with no early stop: every row generates max_new_tokens.
  actor, rollout = trainer.actor, trainer.rollout
  sampler = Sampler(actor.graphdef, actor.model_cfg, ro.max_prompt_len, ro.max_new_tokens,
                    trainer.tokenizer.pad_id, ())
  from rlpt.data import TaskSampler
  prompts = rollout.pool.reset(TaskSampler(cfg.domains.ids, seed=cfg.seed).sample(ro.batch_size))
  from rlpt.rollout import encode_prompts
  ids, lengths = encode_prompts([p.text for p in prompts], trainer.tokenizer, ro.max_prompt_len,
                                bucket=16)
  sampling = SamplingParams(ro.temperature, ro.top_k, ro.top_p)
  times = []
  for i in range(4):
    t = time.perf_counter()
    out = sampler.generate(rollout.samplers.params, ids, lengths, jax.random.key(i), sampling)
    jax.block_until_ready(out)
    if i:
      times.append(time.perf_counter() - t)
  n_tokens = ro.batch_size * ro.max_new_tokens
  print(f"sampler: {n_tokens / statistics.median(times):,.0f} tokens/s "
        f"({statistics.median(times) * 1e3:.0f} ms per call of {n_tokens} tokens, "
        f"prompt buffer {ids.shape[1]})")

  for _ in range(2):
    trainer.train_step()
  rows = [trainer.train_step() for _ in range(_STEPS.value)]
  keys = ["time/step", "time/generate", "time/environments", "time/reference", "time/update",
          "time/publish"]
  med = {k: statistics.median(r[k] for r in rows) for k in keys}
  print(f"RL step: {med['time/step']:.3f} s median over {len(rows)} steps "
        f"(generate {med['time/generate']:.3f}, environments {med['time/environments']:.3f}, "
        f"reference {med['time/reference']:.3f}, update {med['time/update']:.3f}, "
        f"weights to the sampler and metrics {med['time/publish']:.3f})")
  print(f"rollout generation: {np.median([r['throughput/generated_tokens_per_s'] for r in rows]):,.0f} "
        "tokens/s (with early stop)")
  # Model compute against the limit that binds it: the matmul rate, measured now.
  from roofline import (bound_seconds, decode_bytes, decode_flops, kv_bytes_per_token,
                        matmul_roofline, memory_bandwidth, token_flops)
  roof = matmul_roofline() * 1e9
  bandwidth = memory_bandwidth()
  mcfg = trainer.actor.model_cfg
  width = int(np.median([r["batch/pass_tokens"] for r in rows]))
  per_token = token_flops(mcfg, ro.max_prompt_len + ro.max_new_tokens)  # dense: every key
  ref_flops = per_token * width            # one forward pass
  # Forward + backward: the backward costs two forwards (gradients of the
  # activations and of the weights); with LoRA the frozen weights get no
  # gradient, so one.
  lora = cfg.lora.rank > 0
  update_flops = (2 if lora else 3) * per_token * width
  compute = (ref_flops + update_flops) / roof
  packed = "batch/packing_fill" in rows[-1]
  layout = (f"packed rows, {np.median([r['batch/packing_fill'] for r in rows]):.0%} real tokens"
            if packed else "one sequence per row")
  print(f"model compute: reference + update {(ref_flops + update_flops) / 1e9:.1f} GFLOP over "
        f"{width} token positions ({layout}), {compute:.3f} s at the "
        f"measured {roof / 1e12:.3f} TFLOP/s matmul rate: {compute / med['time/step']:.0%} of "
        f"the step, {compute / (med['time/reference'] + med['time/update']):.0%} of those "
        "two passes")
  print(f"reference pass: {ref_flops / med['time/reference'] / 1e9:.0f} GFLOP/s, "
        f"{ref_flops / roof / med['time/reference']:.0%} of the matmul rate; update"
        f"{' (LoRA)' if lora else ''}: {update_flops / med['time/update'] / 1e9:.0f} GFLOP/s, "
        f"{update_flops / roof / med['time/update']:.0%}")
  # The decode's ceiling at this batch: the larger of its matmuls at the
  # matmul rate and the bytes it must read (every weight per step, the cache).
  weight_bytes = mcfg.num_params() * 4
  prompt = ids.shape[1]
  flops = decode_flops(mcfg, ro.batch_size, prompt, ro.max_new_tokens)
  moved = decode_bytes(weight_bytes, kv_bytes_per_token(mcfg), ro.batch_size, prompt, ro.max_new_tokens)
  floor, binds = bound_seconds(flops, moved, roof, bandwidth)
  decode_s = statistics.median(times)
  print(f"decode ceiling at batch {ro.batch_size}: {n_tokens / floor:,.0f} tokens/s ({binds}-bound: "
        f"{flops / 1e9:.0f} GFLOP, {moved / 1e9:.1f} GB at {bandwidth / 1e9:.1f} GB/s); the sampler "
        f"(prefill of a {prompt}-token buffer included) reaches {floor / decode_s:.0%} of it")
  if _DUMP:
    profile(trainer, _DUMP, roof / 1e9 / jax.device_count())
  import resource
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
  print(f"peak host memory (max RSS of this process): {peak:.2f} GiB")
  trainer.close()
  workdir.cleanup()


if __name__ == "__main__":
  app.run(main)
