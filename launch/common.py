"""Shared pieces of the absl entry points."""

from __future__ import annotations

import sys

from absl import flags, logging


def typed_config(cls, config_dict):
  """ConfigDict -> frozen dataclass; a user mistake exits with one clear line."""
  from rlpt.config import ConfigError, from_config_dict
  try:
    return from_config_dict(cls, config_dict)
  except ConfigError as e:
    logging.error("Invalid config: %s", e)
    sys.exit(f"Invalid config: {e}")


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
