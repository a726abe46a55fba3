"""Shared pieces of the absl entry points."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from absl import flags, logging


CPU_THREADS = flags.DEFINE_integer(
    "cpu_threads", 2, "On a CPU-only host: XLA's intra-op thread pool size (PJRT_NPROC), "
    "fixed so that a run is bit-identical on hosts with any number of cores (XLA:CPU splits "
    "each reduction into one partial sum per thread). 0: one thread per available core. "
    "Ignored where an accelerator plugin is installed.", lower_bound=0)


COMPILATION_CACHE = flags.DEFINE_string(
    "compilation_cache", ".cache/rlpt/xla", "Folder of XLA's compiled programs (JAX's persistent "
    "compilation cache): a later run loads what an earlier one compiled (the same executables, "
    "so the same bits). Empty: compile everything afresh.")


MAX_PROGRAMS = flags.DEFINE_integer(
    "max_programs", None, "Compiled programs the run keeps in memory (its ProgramPool: sampler, "
    "reference pass and update, one per shape); past it the least recently used is dropped and, "
    "met again, loaded from --compilation_cache. 0: no bound. Default: "
    "rlpt.device.MAX_PROGRAMS.", lower_bound=0)


USAGE_EXIT = 2  # the exit status of every user mistake on the command line


def usage_error(message: str) -> NoReturn:
  """Ends the program on a user mistake: one line on stderr, exit status 2."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  prog = spec.name if spec is not None and spec.name else os.path.basename(sys.argv[0] or "rlpt")
  print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
  sys.exit(USAGE_EXIT)


def _config_key_message(config_cls, argv: Sequence[str]) -> str | None:
  """The message for the first ``--config.a.b=v`` in ``argv`` whose key path is
  not a field of ``config_cls`` (walking nested config dataclasses)."""
  import rlpt.config
  if isinstance(config_cls, str):
    config_cls = getattr(rlpt.config, config_cls)
  for arg in argv:
    if arg.startswith("--config."):
      key = arg[len("--config."):].partition("=")[0]
      message = rlpt.config.unknown_key_message(config_cls, key.split("."))
      if message:
        return message
  return None


def flags_parser(config_cls: str | type | None = None):
  """An ``app.run`` flags parser (``config_cls``: the config dataclass, or its
  name in rlpt.config, imported only on an error) that turns every command-line mistake into
  `usage_error`: unknown or malformed flags, a config file that is missing or
  whose ``get_config`` refuses its argument, an unknown ``--config.*`` key
  (named with its closest field of ``config_cls``), a bad override value."""

  def parse(argv):
    try:
      rest = flags.FLAGS(argv)
    except (AttributeError, KeyError) as e:  # ml_collections: a --config.* path that does not exist
      usage_error(_config_key_message(config_cls, argv) if config_cls else _one_line(e))
    except flags.Error as e:
      usage_error(_flag_error(e, argv, config_cls))
    if "config" in flags.FLAGS:
      _check_config_loaded(flags.FLAGS["config"])
    return rest

  return parse


def _one_line(e: BaseException) -> str:
  text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
  return " ".join(text.replace("\\n", " ").split())


def _flag_error(e: flags.Error, argv: Sequence[str], config_cls) -> str:
  """A flag error in one line, led by the flag as given, with the innermost
  cause's own message (a config file's get_config raising, a value that does
  not parse) in place of absl's wrapper and the tracebacks it embeds."""
  chain = [e]
  while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and len(chain) < 16:
    chain.append(nxt)
  root = chain[-1]
  if isinstance(root, (AttributeError, KeyError)) and config_cls is not None:
    message = _config_key_message(config_cls, argv)
    if message:
      return message
  text = str(e).split("\n", 1)[0]
  flag = text[len("flag "):].partition(": ")[0] if text.startswith("flag --") else ""
  if root is not e:
    return f"{flag or 'flags'}: {_one_line(root)}"
  return _one_line(text)


def _check_config_loaded(flag) -> None:
  """config_flags defers a config file's load failure to the first access."""
  if not flag.present:
    return
  spec = flag.serialize().partition("=")[2] or flag.serialize()
  path = spec.split(":", 1)[0]
  if not os.path.isfile(path):
    near = sorted(f for f in os.listdir(os.path.dirname(path) or ".") if f.endswith(".py")
                  and not f.startswith("_")) if os.path.isdir(os.path.dirname(path) or ".") else []
    usage_error(f"--config={spec}: no such config file '{path}'"
                + (f"; the files beside it: {near}" if near else ""))
  try:
    flag.value  # noqa: B018  (raises the deferred load error)
  except Exception as e:  # noqa: BLE001  any error in the user's config file
    usage_error(f"--config={spec}: {type(e).__name__}: {_one_line(e)}")


def check_domains(cfg) -> None:
  """`rlpt.rollout.domains.check_domains` for a TrainConfig or PretrainConfig;
  a mistake is a usage error."""
  from rlpt.config import ConfigError
  from rlpt.bases import imported_base
  from rlpt.rollout.domains import check_domains as check
  rollout, base = getattr(cfg, "rollout", None), getattr(cfg, "base", None)
  byte_base = base is None or not imported_base(base)
  env = getattr(cfg, "env", None)
  style = getattr(env, "prompt_style", None) or getattr(cfg, "prompt_style", "bare")
  try:
    check(cfg.domains, rollout.max_prompt_len if rollout is not None and byte_base else None, style)
  except ConfigError as e:
    usage_error(f"invalid config: {e}")


def check_workdir(path: str) -> str:
  """Creates WORKDIR (and parents) and checks it is a writable directory;
  otherwise a usage error naming --workdir."""
  if os.path.exists(path) and not os.path.isdir(path):
    usage_error(f"--workdir={path}: exists and is not a directory")
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    usage_error(f"--workdir={path}: cannot be created ({e.strerror})")
  if not os.access(path, os.W_OK | os.X_OK):
    usage_error(f"--workdir={path}: is not writable")
  return path


def pin_cpu_threads() -> None:
  """Applies --cpu_threads before JAX starts; a conflict exits with a usage error."""
  from rlpt.device import cpu_only_host, set_cpu_threads
  if not cpu_only_host():
    return
  if not flags.FLAGS["cpu_threads"].present and "PJRT_NPROC" in os.environ:
    return  # the environment's own choice stands unless the flag is given
  try:
    set_cpu_threads(CPU_THREADS.value)
  except (ValueError, RuntimeError) as e:
    usage_error(f"--cpu_threads={CPU_THREADS.value}: {e}")


def use_compilation_cache() -> None:
  """Applies --compilation_cache; a folder that cannot be made exits with a usage error."""
  from rlpt.device import use_compilation_cache as use
  if not flags.FLAGS["compilation_cache"].present and "JAX_COMPILATION_CACHE_DIR" in os.environ:
    return  # the environment's own choice stands unless the flag is given
  try:
    use(COMPILATION_CACHE.value)
  except OSError as e:
    usage_error(f"--compilation_cache={COMPILATION_CACHE.value}: {e.strerror or e}")


def max_programs() -> int:
  """--max_programs, else the run's default bound (rlpt.device.MAX_PROGRAMS)."""
  from rlpt.device import MAX_PROGRAMS as default
  return default if MAX_PROGRAMS.value is None else MAX_PROGRAMS.value


def run_model_job(argv: Sequence[str], config_cls: str, entry: str, config_dict, workdir: str) -> None:
  """main() of a launcher that trains a model from one config and saves it
  (launch.pretrain, launch.warmup): ``entry`` ("module:function", imported
  after the CPU threads are pinned) runs on the typed ``config_cls`` of
  rlpt.config and returns the saved model's path."""
  if len(argv) > 1:
    usage_error(f"unexpected arguments {list(argv[1:])}; every setting is a --flag or --config.<key>=<value>")
  quiet_libraries()
  pin_cpu_threads()
  use_compilation_cache()
  import importlib

  import rlpt.config
  module, function = entry.split(":")
  run = getattr(importlib.import_module(module), function)
  cfg = typed_config(getattr(rlpt.config, config_cls), config_dict)
  check_domains(cfg)
  check_workdir(workdir)
  print(f"Saved {run(cfg, workdir, max_programs=max_programs())}")


def typed_config(cls, config_dict):
  """ConfigDict -> frozen dataclass; a user mistake exits with one clear line."""
  from rlpt.config import ConfigError, from_config_dict
  try:
    return from_config_dict(cls, config_dict)
  except ConfigError as e:
    usage_error(f"invalid config: {e}")


def quiet_libraries() -> None:
  """Library INFO chatter (orbax, XLA) hides the progress bar; keep it to warnings
  unless the user asked for a verbosity with --verbosity / -v."""
  # `present`, not `using_default_value`: absl.app assigns the flag while
  # starting, so it never reads as default.
  if not flags.FLAGS["verbosity"].present:
    import logging as py_logging
    logging.set_verbosity(logging.WARNING)
    for name in ("", "jax", "orbax", "absl"):
      py_logging.getLogger(name).setLevel(py_logging.WARNING)
