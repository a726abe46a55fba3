"""The base model a run starts from: named, built once into a shared cache, loaded.

A base is an imported model (``base.hf_checkpoint``, ``base.model``), an rlpt
checkpoint (``base.checkpoint``), or one a config file builds
(``base.experiment``): the tiny built-in base pre-trained by rlpt.pretrain, or
an imported model warmed up on demonstrations by rlpt.warmup. A built base is
cached under a name made of its config file and its config's fingerprint.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import importlib.util
import os

import jax

from rlpt.checkpoint import load_model
from rlpt.config import PretrainConfig, WarmupConfig, from_config_dict, to_json
from rlpt.models.imported import load_imported, with_attention
from rlpt.pretrain import pretrain
from rlpt.sharding import DEFAULT_RULES
from rlpt.tokenizers import ByteTokenizer
from rlpt.tokenizers.imported import imported_tokenizer
from rlpt.warmup import warmup


def fingerprint(cfg) -> str:
  """12 hex digits of a config dataclass's JSON: the name of what it builds."""
  return hashlib.sha256(to_json(cfg).encode()).hexdigest()[:12]


def load_experiment_config(path: str, arg: str = ""):
  """``get_config(arg)`` of the config file at ``path`` (relative paths from the
  current directory), loaded by path as ``--config`` loads one: the library
  imports no experiments package."""
  return _load_experiment(path, arg)[1]


# The config files that build a base, by their RUNNER: pre-training the tiny
# built-in base, or warming an imported model up on demonstrations.
BASE_RUNNERS = ("pretrain", "warmup")


def _load_experiment(path: str, arg: str = ""):
  """(RUNNER, ``get_config(arg)``) of the config file at ``path``."""
  if not os.path.isfile(path):
    raise ValueError(f"base.experiment={path!r}: no such config file (expected a path such as "
                     f"experiments/pretrain_base.py, relative to {os.getcwd()}).")
  spec = importlib.util.spec_from_file_location(f"rlpt_config_{experiment_name(path)}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return getattr(module, "RUNNER", "pretrain"), module.get_config(arg) if arg else module.get_config()


@dataclasses.dataclass(frozen=True)
class BuiltBase:
  """A base the run builds and caches: ``runner`` ("pretrain" or "warmup"),
  its typed ``config`` (PretrainConfig / WarmupConfig), the cache ``workdir``
  (named by the config file and the config's fingerprint) and the ``path`` of
  the model inside it (an rlpt checkpoint, or a warm-up's Hugging Face one)."""
  runner: str
  config: object
  workdir: str
  path: str


def built_base(base_cfg) -> BuiltBase:
  """The `BuiltBase` of a BaseModelConfig that names no checkpoint or model."""
  runner, cfg = _load_experiment(base_cfg.experiment, base_cfg.arg)
  if runner == "pretrain":
    typed = from_config_dict(PretrainConfig, cfg)
  elif runner == "warmup":
    typed = from_config_dict(WarmupConfig, cfg)
  else:
    raise ValueError(f"base.experiment={base_cfg.experiment!r} is a {runner!r} config; a base is built by "
                     f"one of {BASE_RUNNERS} (experiments/pretrain_base.py, experiments/warmup_hf.py).")
  name = experiment_name(base_cfg.experiment) + (f"-{base_cfg.arg}" if base_cfg.arg else "")
  workdir = os.path.join(base_cfg.cache_dir, f"{name}-{fingerprint(typed)}")
  return BuiltBase(runner, typed, workdir, os.path.join(workdir, "model"))


def imported_base(base_cfg) -> bool:
  """Whether the base is an imported model with its own tokenizer (a Hugging
  Face or GGUF checkpoint, or one warmed up from such by base.experiment);
  False for the built-in byte-level bases."""
  if base_cfg.hf_checkpoint or base_cfg.model:
    return True
  if base_cfg.checkpoint or not base_cfg.experiment:
    return False
  return built_base(base_cfg).runner == "warmup"


def experiment_name(path: str) -> str:
  """The name a base built by the config file ``path`` is cached under (its stem)."""
  return os.path.splitext(os.path.basename(path))[0]


def resolve_base(base_cfg, progress: bool = True, mesh=None, rules=DEFAULT_RULES):
  """Loads the base policy named by a BaseModelConfig, building and caching it if needed.

  Returns (model config, graphdef, params, checkpoint path). A Hugging Face
  ``hf_checkpoint`` is read with rlpt.models.hf.load_hf_checkpoint: with
  ``mesh`` straight into the ``rules`` layout (each device reads its own
  shards), else onto this process's first device like the other bases.
  """
  if base_cfg.hf_checkpoint or base_cfg.model:
    return load_imported(base_cfg, mesh, rules)
  if base_cfg.checkpoint:
    path = base_cfg.checkpoint
  else:
    built = built_base(base_cfg)
    path = built.path
    _build_cached_base(built, base_cfg, progress)
    if built.runner == "warmup":  # a Hugging Face checkpoint
      return load_imported(base_cfg, mesh, rules, hf_checkpoint=path)
  # Every process reads the whole (small, host-side) base onto its own first
  # device; the trainer then lays it out on the global mesh. Without a target
  # sharding orbax refuses a checkpoint saved under another process topology.
  local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  model_cfg, graphdef, params, _ = load_model(
      path, shardings=lambda abstract: jax.tree.map(lambda _: local, abstract))
  return (*with_attention(base_cfg, model_cfg, graphdef), params, path)


def _build_cached_base(built: BuiltBase, base_cfg, progress: bool):
  """Builds the cached base ``built`` (pre-training or a warm-up) unless it is
  there. Runs that share a cache on one machine (two experiments, two test
  workers) build each base once: the first holds an exclusive lock on
  ``<workdir>.lock`` while it trains, and the others wait, then read what it
  wrote."""
  marker = "model.json" if built.runner == "pretrain" else "rlpt_warmup.json"
  done = os.path.join(built.path, marker)
  if os.path.exists(done):
    return
  if jax.process_count() > 1:
    # Only process 0 may write the cache, and a half-written cache read by
    # the others would be worse than stopping: build it once, single-process.
    raise RuntimeError(
        f"No cached base model at {built.path} and this is a {jax.process_count()}-process run. "
        f"Build it first with one process: python -m launch.{built.runner} "
        f"--config={base_cfg.experiment}{':' + base_cfg.arg if base_cfg.arg else ''}"
        f" --workdir={built.workdir}")
  os.makedirs(os.path.dirname(built.workdir) or ".", exist_ok=True)
  with open(built.workdir + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.exists(done):
      return  # another run built it while this one waited
    if built.runner == "pretrain":
      print(f"rlpt: no cached base model at {built.path}; pre-training it now "
            f"({built.config.steps} steps).", flush=True)
      pretrain(built.config, built.workdir, progress=progress)
    else:
      print(f"rlpt: no cached warm-up at {built.path}; warming the model up now "
            f"({built.config.steps} steps).", flush=True)
      warmup(built.config, built.workdir, progress=progress)


def resolve_tokenizer(base_cfg):
  """The tokenizer of the base: a Hugging Face base's own (tokenizer.json or
  tokenizer.model), a GGUF file's (its metadata), else the byte tokenizer of
  the built-in bases (a base warmed up by ``base.experiment`` keeps its
  imported model's)."""
  if base_cfg.hf_checkpoint or base_cfg.model:
    return imported_tokenizer(base_cfg)
  if not base_cfg.checkpoint and base_cfg.experiment:
    built = built_base(base_cfg)
    if built.runner == "warmup":  # the warm-up keeps its base's tokenizer
      return resolve_tokenizer(built.config.base)
  return ByteTokenizer()
