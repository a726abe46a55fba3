"""The generic typed-config machinery: ConfigDict <-> nested frozen dataclasses.

``from_config_dict`` builds a config dataclass from a (nested) mapping,
checking every value against the field's type and naming unknown keys with
their closest known key; ``default_config_dict`` goes the other way for
experiment files. The sections (rlpt.config.sections, rlpt.config.rl_sections)
and the top-level configs use ``_require`` for their value checks.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
  """A user-facing configuration mistake."""


def _check_type(path: str, value: Any, tp: Any) -> Any:
  origin = typing.get_origin(tp)
  if dataclasses.is_dataclass(tp):
    return from_config_dict(tp, value, path)
  if origin in (types.UnionType, typing.Union):
    errors = []
    for arm in typing.get_args(tp):
      if arm is type(None):
        if value is None:
          return None
        continue
      try:
        return _check_type(path, value, arm)
      except ConfigError as e:
        errors.append(str(e))
    raise ConfigError(f"{path}={value!r} does not match {tp}.")
  if origin is tuple:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
      raise ConfigError(f"{path} must be a list, got {type(value).__name__} {value!r}.")
    args = typing.get_args(tp)
    if len(args) == 2 and args[1] is Ellipsis:
      return tuple(_check_type(f"{path}[{i}]", v, args[0]) for i, v in enumerate(value))
    if len(args) != len(value):
      raise ConfigError(f"{path} must have {len(args)} entries, got {len(value)}.")
    return tuple(_check_type(f"{path}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
  if origin is dict or tp is dict:
    if not isinstance(value, Mapping):
      raise ConfigError(f"{path} must be a mapping, got {value!r}.")
    kt, vt = typing.get_args(tp) or (str, Any)
    return {_check_type(f"{path}.key", k, kt): _check_type(f"{path}.{k}", v, vt)
            for k, v in value.items()}
  if tp is Any:
    return value
  if tp is float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise ConfigError(f"{path} must be a number, got {type(value).__name__} {value!r}.")
    return float(value)
  if tp is int:
    if isinstance(value, bool) or not isinstance(value, int):
      raise ConfigError(f"{path} must be an integer, got {type(value).__name__} {value!r}.")
    return value
  if tp is bool or tp is str:
    if not isinstance(value, tp):
      raise ConfigError(f"{path} must be a {tp.__name__}, got {type(value).__name__} {value!r}.")
    return value
  raise TypeError(f"unsupported config field type {tp} at {path}")


def unknown_key_message(cls: type, keys: Sequence[str], path: str = "config") -> str | None:
  """None if ``keys`` (e.g. ["rollout", "temperature"]) is a field path of
  config dataclass ``cls``, else the message for its first unknown part."""
  for i, k in enumerate(keys):
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init} if dataclasses.is_dataclass(cls) else {}
    if not fields:  # a leaf (or a dict-valued field): no deeper names to check
      return None
    if k not in fields:
      close = difflib.get_close_matches(k, list(fields), n=1)
      hint = f" Did you mean '{path}.{close[0]}'?" if close else ""
      return f"Unknown config key '{path}.{k}'.{hint} Known keys of {path}: {sorted(fields)}."
    path = f"{path}.{k}"
    cls = typing.get_type_hints(cls)[k]
  return None


def from_config_dict(cls: type[T], cfg: Mapping[str, Any], path: str = "config") -> T:
  """Builds dataclass ``cls`` from a (nested) mapping, strictly.

  Missing keys take the dataclass defaults; unknown keys are an error naming
  the key and suggesting the closest field.
  """
  if hasattr(cfg, "to_dict"):
    cfg = cfg.to_dict()
  if not isinstance(cfg, Mapping):
    raise ConfigError(f"{path} must be a mapping of fields of {cls.__name__}, got {cfg!r}.")
  hints = typing.get_type_hints(cls)
  fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
  unknown = [k for k in cfg if k not in fields]
  if unknown:
    raise ConfigError(unknown_key_message(cls, unknown[:1], path))
  kwargs = {k: _check_type(f"{path}.{k}", v, hints[k]) for k, v in cfg.items()}
  try:
    return cls(**kwargs)
  except ConfigError:
    raise
  except (ValueError, TypeError) as e:
    raise ConfigError(f"{path}: {e}") from e


def default_config_dict(cls: type):
  """A ConfigDict holding every field of dataclass ``cls`` at its default.

  Experiment files start from this and set what they change, so every field
  exists in the (locked) ConfigDict and can be overridden from the command
  line with ``--config.a.b=...``.
  """
  import ml_collections

  def conv(value):
    if dataclasses.is_dataclass(value):
      return ml_collections.ConfigDict(
          {f.name: conv(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init})
    if isinstance(value, dict):
      return ml_collections.ConfigDict({k: conv(v) for k, v in value.items()})
    return value

  return conv(cls())


def to_json(cfg: Any) -> str:
  return json.dumps(dataclasses.asdict(cfg), indent=2, sort_keys=True)


def _require(cond: bool, msg: str):
  if not cond:
    raise ConfigError(msg)
