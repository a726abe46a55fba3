"""A run's domains from its config: dataset files registered, ids checked."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rlpt.config import ConfigError


def register_domain_files(files: Sequence[str]) -> tuple[str, ...]:
  """Registers each dataset-file description ("rlpt/dataset-<name>-v0=path[:verifier]
  [?field=column&...]", `environments.datasets.parse_description`) as a domain,
  once per process: a description registered before is kept, another file under
  a registered id is a ValueError naming the entry. Every file is validated
  whole here, before anything compiles. Returns the descriptions with their
  paths made absolute, for processes started elsewhere (Ray actors)."""
  import environments  # noqa: F401  (registers the built-in domains with gymnasium)
  from environments import datasets
  out = []
  for i, desc in enumerate(files):
    try:
      datasets.register(desc, exist_ok=True)
      domain_id, _, rest = desc.partition("=")
      path = datasets.parse_description(desc)["path"]
      out.append(f"{domain_id}={os.path.abspath(os.path.expanduser(path))}{rest[len(path):]}")
    except ValueError as e:
      raise ValueError(f"domains.files[{i}] ({desc!r}): {e}") from None
  return tuple(out)


def check_domains(domains, max_prompt_len: int | None = None, prompt_style: str = "bare") -> None:
  """Registers ``domains.files`` (a `DomainsConfig`), then checks that every id
  in ``domains.ids`` is registered, offers ``prompt_style`` and, given
  ``max_prompt_len`` (tokens, BOS included, of the byte tokenizer: a
  character is a token), that its prompts in that style fit. Every problem is
  a ConfigError naming the config key and the value; nothing is started. (A
  base with a tokenizer of its own is checked when each prompt is encoded.)"""
  try:
    register_domain_files(domains.files)
  except ValueError as e:
    raise ConfigError(f"config.{e}") from None
  from environments import registry
  for i, d in enumerate(domains.ids):
    if not registry.is_registered(d):
      raise ConfigError(f"config.domains.ids[{i}] is {d!r}, which is not a registered domain"
                        f"{registry.close_matches_hint(d)}; `python -m environments` lists them all.")
    spec = registry.get(d)
    try:
      max_chars, _ = spec.bounds(prompt_style)
    except ValueError as e:
      raise ConfigError(f"config.domains.ids[{i}]: {e} (config.env.prompt_style)") from None
    if max_prompt_len is not None and max_chars + 1 > max_prompt_len:
      raise ConfigError(f"config.domains.ids[{i}] ({d!r}) has {prompt_style} prompts up to {max_chars} "
                        f"chars; config.rollout.max_prompt_len={max_prompt_len} must be at least "
                        f"{max_chars + 1} (BOS included).")
