r"""Google Tunix on the fixed peer-comparison workload (see shared.py, workload.py).

    .peers/tunix/bin/python benchmarks/peers/tunix_workload.py \
        --model_dir .cache/peers/run0/model --prompts .cache/peers/run0/prompts.npz \
        --out .cache/peers/run0/tunix.json

Runs, with Tunix's public APIs, on one CPU device, fp32, the same work rlpt's
``benchmarks/workload.py`` runs:

1. check: a plain forward of the 4 ``check`` prompts through Tunix's Llama3
   (loaded from rlpt's Hugging Face checkpoint with Tunix's own safetensors
   loader); the last-position logits are reported to prove that the same
   weights and architecture were loaded;
2. sampling: ``tunix.generate.sampler.Sampler`` on the 32 ``sample`` prompts,
   temperature 1, no top-k / top-p, exactly 128 new tokens (EOS and pad are
   ids outside the vocabulary, so nothing can stop a row early), KV cache of
   32 + 128; one warm-up call, then 3 timed calls;
3. GRPO: ``RLCluster`` (actor + rollout colocated and sharing weights, a
   separately loaded frozen reference, vanilla rollout engine, all on a
   1x1 CPU mesh) + ``GRPOConfig`` + ``GRPOLearner``; each step takes 8 prompts
   from ``grpo[step]`` x 8 generations = 64 completions of exactly 64 tokens,
   reward = fraction of even token ids, beta 0.04 (k3 / ``low_var_kl``
   estimator and token-mean aggregation, like rlpt), epsilon 0.2,
   num_iterations 1, one optax.adamw(1e-5, b1 0.9, b2 0.99, wd 0) update on
   the whole batch; 7 steps in order (2 warm-up, 5 timed), timed by Tunix's
   own perf tracer (``perf/global_step_time``: rollout + reference log-probs
   + advantages + update) with a wall-clock cross-check from the data
   iterator.

Tunix takes text prompts plus a tokenizer, so prompts are written as
"t<id> t<id> ..." and ``IdTokenizer`` maps that text back to exactly those
ids (no BOS); the script checks that the ids Tunix fed the model equal the
prompt ids.

One deviation is forced by Tunix 0.1.7: its Llama3 attention calls
``apply_rope`` without the configured ``rope_theta`` (the function's default,
1e6, is always used). The script rebinds ``tunix.models.llama3.model.apply_rope``
to the same function with ``rope_theta`` from config.json (1e4); the compute
is unchanged. The JSON reports the check-logit error with and without it.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import statistics
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from tunix.generate import sampler as sampler_lib
from tunix.models.llama3 import model as llama_model
from tunix.models.llama3 import params as llama_params
from tunix.perf import export as perf_export
from tunix.perf import metrics as perf_metrics
from tunix.rl import rl_cluster as rl_cluster_lib
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout
from tunix.utils import mesh as mesh_lib

# The workload (keep in step with benchmarks/workload.py and shared.py).
PROMPT = 32
SAMPLE_NEW, SAMPLE_TIMED = 128, 3
GRPO_NEW, GROUP = 64, 8
WARMUP_STEPS = 2
TEMPERATURE = 1.0
BETA, EPSILON, LR = 0.04, 0.2, 1e-5


class IdTokenizer:
  """Maps the text "t<id> t<id> ..." to exactly those ids and back.

  Implements the duck-typed interface Tunix's TokenizerAdapter accepts
  (encode, decode, bos_id, eos_id, pad_id). No BOS is added (bos_id() is
  None); EOS and pad are ids just past the vocabulary, which the model can
  never sample, so no row ends early and no sampled id is treated as padding.
  """

  def __init__(self, vocab_size: int):
    self._eos, self._pad = vocab_size + 1, vocab_size

  def encode(self, text: str, **unused) -> list[int]:
    return [int(word[1:]) for word in text.split()]

  def decode(self, ids, **unused) -> str:
    return " ".join(f"t{int(i)}" for i in ids)

  def bos_id(self):
    return None

  def eos_id(self) -> int:
    return self._eos

  def pad_id(self) -> int:
    return self._pad


def to_text(ids) -> str:
  return " ".join(f"t{int(i)}" for i in ids)


def model_config(model_dir: str) -> llama_model.ModelConfig:
  """Tunix's Llama3 config from the checkpoint's config.json."""
  with open(os.path.join(model_dir, "config.json")) as f:
    hf = json.load(f)
  rope = hf.get("rope_parameters") or {}
  rope_theta = rope.get("rope_theta", hf.get("rope_theta"))
  if rope.get("rope_type", "default") != "default" or hf.get("rope_scaling"):
    raise ValueError("only plain (unscaled) RoPE is supported here")
  if hf.get("attention_bias") or hf.get("mlp_bias") or hf.get("hidden_act") != "silu":
    raise ValueError("checkpoint is not a plain Llama (bias or activation differs)")
  return llama_model.ModelConfig(
      num_layers=hf["num_hidden_layers"],
      vocab_size=hf["vocab_size"],
      embed_dim=hf["hidden_size"],
      hidden_dim=hf["intermediate_size"],
      num_heads=hf["num_attention_heads"],
      head_dim=hf["head_dim"],
      num_kv_heads=hf["num_key_value_heads"],
      rope_theta=rope_theta,
      norm_eps=hf["rms_norm_eps"],
      weight_tying=bool(hf.get("tie_word_embeddings", False)),
  )


_TUNIX_APPLY_ROPE = llama_model.apply_rope


def set_rope_theta(theta: float | None) -> None:
  """Makes Tunix's Llama3 use `theta` (None: Tunix's own call, i.e. 1e6)."""
  llama_model.apply_rope = (
      _TUNIX_APPLY_ROPE if theta is None
      else functools.partial(_TUNIX_APPLY_ROPE, rope_theta=theta))


def load_model(model_dir: str, cfg, mesh) -> llama_model.Llama3:
  """Tunix's own safetensors loader (HF names -> Tunix Llama3, transposes included)."""
  return llama_params.create_model_from_safe_tensors(
      model_dir, cfg, mesh=mesh, dtype=jnp.float32)


def last_logits(model, tokens: np.ndarray) -> np.ndarray:
  b, t = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), jnp.bool_)), (b, t, t))
  logits, _ = model(jnp.asarray(tokens), pos, None, mask)
  return np.asarray(logits[:, -1], np.float32)


def run_sampling(model, cfg, prompts: np.ndarray) -> dict:
  tokenizer = IdTokenizer(cfg.vocab_size)
  sampler = sampler_lib.Sampler(
      transformer=model, tokenizer=tokenizer,
      cache_config=sampler_lib.CacheConfig(
          cache_size=PROMPT + SAMPLE_NEW, num_layers=cfg.num_layers,
          num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim))
  texts = [to_text(p) for p in prompts]

  def call(seed: int):
    # Returns host numpy tokens, so the call is complete when it returns.
    return sampler(texts, max_generation_steps=SAMPLE_NEW, max_prompt_length=PROMPT,
                   temperature=TEMPERATURE, top_p=1.0, top_k=None, seed=seed)

  out = call(0)  # warm-up (compiles prefill and decode)
  if not np.array_equal(np.asarray(out.padded_prompt_tokens), prompts):
    raise RuntimeError("the ids Tunix fed the model differ from the prompt ids")
  times = []
  for i in range(SAMPLE_TIMED):
    t0 = time.perf_counter()
    out = call(i + 1)
    times.append(time.perf_counter() - t0)
    lengths = {len(t) for t in out.tokens}
    if lengths != {SAMPLE_NEW}:
      raise RuntimeError(f"rows produced {sorted(lengths)} new tokens, not {SAMPLE_NEW}")
  rows = len(prompts)
  return {"sample_times_s": times,
          "sample_tok_s": rows * SAMPLE_NEW / statistics.median(times)}


def even_fraction_reward(prompts, completions, **unused) -> list[float]:
  """Reward = fraction of even token ids in the completion."""
  del prompts
  rewards = []
  for text in completions:
    ids = [int(w[1:]) for w in text.split()]
    if len(ids) != GRPO_NEW:
      raise RuntimeError(f"a completion has {len(ids)} tokens, not {GRPO_NEW}")
    rewards.append(float(np.mean([i % 2 == 0 for i in ids])))
  return rewards


def run_grpo(actor, reference, cfg, mesh, grpo_prompts: np.ndarray) -> dict:
  steps = grpo_prompts.shape[0]
  rollout_config = base_rollout.RolloutConfig(
      max_tokens_to_generate=GRPO_NEW, max_prompt_length=PROMPT,
      kv_cache_size=PROMPT + GRPO_NEW, temperature=TEMPERATURE, top_p=1.0, top_k=None)
  training_config = rl_cluster_lib.RLTrainingConfig(
      actor_optimizer=optax.adamw(LR, b1=0.9, b2=0.99, weight_decay=0.0),
      eval_every_n_steps=10**9,       # no eval set anyway
      max_steps=steps,
      mini_batch_size=None,           # whole batch: one update per step
      checkpoint_root_directory=None,  # no checkpointing
      metrics_logging_options=None,    # no TensorBoard / W&B backends
  )
  cluster_config = rl_cluster_lib.ClusterConfig(
      role_to_mesh={rl_cluster_lib.Role.ACTOR: mesh, rl_cluster_lib.Role.REFERENCE: mesh,
                    rl_cluster_lib.Role.ROLLOUT: mesh},
      rollout_engine="vanilla", offload_to_cpu=False,
      training_config=training_config, rollout_config=rollout_config)
  # Tunix's perf tracer (v1) with the colocated-GRPO export and no trace writer.
  perf_config = perf_metrics.PerfMetricsConfig(
      custom_export_fn=perf_export.PerfMetricsExport.from_cluster_config(cluster_config))
  cluster = rl_cluster_lib.RLCluster(
      actor=actor, reference=reference, tokenizer=IdTokenizer(cfg.vocab_size),
      cluster_config=cluster_config, perf_config=perf_config)

  logged: dict[str, list] = {}

  def external_logger(buffer):  # receives each step's buffered metrics, in order
    for name, (values, _) in buffer.metrics.items():
      if name.startswith("perf/") or name.startswith("completions/"):
        logged.setdefault(name, []).extend(np.asarray(v).item() for v in values)

  cluster.with_external_metrics_logger(external_logger)
  learner = grpo_learner.GRPOLearner(
      rl_cluster=cluster,
      algo_config=grpo_learner.GRPOConfig(
          num_generations=GROUP, num_iterations=1, beta=BETA, epsilon=EPSILON,
          kl_loss_mode="low_var_kl", loss_agg_mode="token-mean"),
      reward_fns=[even_fraction_reward],
      data_shuffle_seed=None)  # no shuffling

  requested = []  # wall time at which Tunix asked for each step's batch

  def dataset():
    for step in range(steps):
      requested.append(time.perf_counter())
      yield {"prompts": np.array([to_text(p) for p in grpo_prompts[step]])}

  learner.train(dataset())
  jax.block_until_ready(nnx.state(cluster.actor_trainer.model))
  end = time.perf_counter()

  # Tunix pulls batch 0 ahead of its loop; batch k >= 1 is pulled at the start
  # of step k, after step k-1's update has finished (its trainer waits for it).
  bounds = requested[WARMUP_STEPS:] + [end]
  wall = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
  tunix_steps = logged.get("perf/global_step_time", [])
  if len(tunix_steps) == steps:
    step_times, source = tunix_steps[WARMUP_STEPS:], "tunix perf/global_step_time"
  else:
    step_times, source = wall, "wall clock between batch requests"
  phases = {}
  for name in ("perf/sum/rollout_time", "perf/sum/refer_inference_time",
               "perf/sum/actor_train_time", "perf/weight_sync_time"):
    if len(logged.get(name, [])) == steps:
      phases[name.split("/")[-1]] = logged[name][WARMUP_STEPS:]
  # (the reward function also rejects any completion that is not GRPO_NEW long)
  lengths = logged.get("completions/min_length", []) + logged.get("completions/max_length", [])
  if lengths and set(lengths) != {GRPO_NEW}:
    raise RuntimeError(f"completion lengths {sorted(set(lengths))} != {GRPO_NEW}")
  return {"step_times_s": step_times, "step_s": statistics.median(step_times),
          "step_time_source": source, "step_times_wall_s": wall,
          "step_phases_s": phases, "grpo_completion_lengths": sorted(set(lengths))}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--prompts", required=True)
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  for path in (os.path.join(args.model_dir, "config.json"),
               os.path.join(args.model_dir, "model.safetensors"), args.prompts):
    if not os.path.isfile(path):
      sys.exit(f"missing input {path}; write the inputs with "
               "`.venv/bin/python benchmarks/peers/shared.py .cache/peers/run0` (rlpt venv)")
  data = np.load(args.prompts)
  sample, grpo, check = (np.asarray(data[k], np.int32) for k in ("sample", "grpo", "check"))
  if sample.shape[1] != PROMPT or grpo.shape[1:] != (8, PROMPT) or grpo.shape[0] <= WARMUP_STEPS:
    sys.exit(f"unexpected prompt shapes: sample {sample.shape}, grpo {grpo.shape}")

  cfg = model_config(args.model_dir)
  if cfg.weight_tying:
    sys.exit("expected an untied lm_head (tie_word_embeddings false)")
  devices = jax.devices()
  mesh = mesh_lib.create_mesh((1, 1), ("fsdp", "tp"), devices=devices[:1])  # Auto axes
  with mesh:
    policy = load_model(args.model_dir, cfg, mesh)
    reference = load_model(args.model_dir, cfg, mesh)  # a separate frozen copy

  # 1. Check logits (with Tunix's unmodified RoPE call too, to show the fix is needed).
  set_rope_theta(None)
  unpatched = last_logits(policy, check)
  set_rope_theta(cfg.rope_theta)
  logits = last_logits(policy, check)
  result = {"peer": "tunix"}
  rlpt_path = os.path.join(os.path.dirname(os.path.abspath(args.prompts)), "check_logits.npy")
  if os.path.isfile(rlpt_path):
    expected = np.load(rlpt_path)
    result["check_max_abs_diff"] = float(np.max(np.abs(expected - logits)))
    result["check_max_abs_diff_tunix_rope_unpatched"] = float(np.max(np.abs(expected - unpatched)))
    print(f"check logits: max |diff| vs rlpt {result['check_max_abs_diff']:.2e} "
          f"(without the RoPE fix {result['check_max_abs_diff_tunix_rope_unpatched']:.2e})",
          flush=True)

  # 2. Sampling.
  with mesh:
    result.update(run_sampling(policy, cfg, sample))
  print(f"sampling: {result['sample_tok_s']:.1f} tok/s, times {result['sample_times_s']}",
        flush=True)

  # 3. GRPO (the policy copy becomes the actor; it starts from the same weights).
  result.update(run_grpo(policy, reference, cfg, mesh, grpo))
  print(f"grpo: {result['step_s']:.3f} s/step, times {result['step_times_s']}", flush=True)

  result["versions"] = {p: importlib.metadata.version(p)
                        for p in ("google-tunix", "jax", "jaxlib", "flax", "optax")}
  result["check_logits"] = logits.tolist()
  result["notes"] = (
      f"Tunix {result['versions']['google-tunix']} on {len(devices)} {jax.default_backend()} "
      "device(s), fp32, 1x1 (fsdp, tp) mesh. Model: tunix.models.llama3 Llama3 (untied lm_head, "
      f"norm_eps {cfg.norm_eps}, rope_theta {cfg.rope_theta}) loaded with Tunix's "
      "create_model_from_safe_tensors. Forced deviation: Tunix 0.1.7's Llama3 attention ignores "
      "ModelConfig.rope_theta (apply_rope always uses its default 1e6), so apply_rope is rebound "
      "with rope_theta from config.json (same compute). Text prompts 't<id> ...' go through a "
      "tokenizer that maps them to exactly those ids (no BOS; checked); EOS/pad are ids outside "
      "the vocabulary, so every row generates the full length (checked). Sampling: Sampler, "
      f"temperature 1, top_p 1.0 / no top_k (full-vocab categorical), {SAMPLE_NEW} new tokens, "
      f"KV cache {PROMPT + SAMPLE_NEW}, 1 warm-up + {SAMPLE_TIMED} timed calls, each timed to "
      "host tokens/text (Tunix's sampler returns numpy tokens and decoded text). GRPO: RLCluster "
      "(vanilla rollout; actor and rollout colocated and sharing weights, so no weight sync; "
      "separately loaded reference) + GRPOLearner, GRPOConfig(num_generations 8, num_iterations 1, "
      "beta 0.04, kl_loss_mode low_var_kl (k3, as rlpt), loss_agg_mode token-mean (as rlpt), "
      "epsilon 0.2), rollout temperature 1, top_p 1.0, 64 new tokens, KV cache 96, rollout "
      "seed = Tunix default (PRNGKey(0) each step); optax.adamw(1e-5, b1 0.9, b2 0.99, wd 0), no "
      "clipping; 8 prompts x 8 = 64 completions, whole batch per update; 7 steps in order, no "
      f"shuffling; first {WARMUP_STEPS} are warm-up. step_times_s = {result['step_time_source']} "
      "(rollout + reference log-probs + rewards/advantages + one update, sequential on one "
      "device); step_times_wall_s is an outside wall-clock cross-check. step_phases_s are Tunix's "
      "own perf spans (rollout, reference inference, actor-training group); they overlap (a "
      "device span ends when its result is ready), so they do not add up to the step. No "
      "checkpointing, no metric backends (metrics_logging_options None), no trace writer.")
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
