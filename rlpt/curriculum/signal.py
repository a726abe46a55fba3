"""Where a batch's compute went, and whether it carried signal: the curriculum's
own figures of merit.

A GRPO group (one task, ``group_size`` samples) teaches something only when
its valid rewards differ (``rlpt.rl.groups_with_signal``): otherwise every
advantage is 0 and the tokens sampled for it, and the seconds its
environments ran, bought nothing. Per rollout:

    sums = signal_sums(records, group_size)        # counts, tokens, seconds; add across rollouts
    metrics = signal_metrics(sums)                 # shares and per-domain figures

``records``: one mapping per sample, in groups of ``group_size`` consecutive
rows, with ``domain``, ``reward``, ``infra_error``, ``length`` (generated
tokens, every turn) and ``env_s`` (seconds its environment steps ran).
Infrastructure-failed samples count as compute but not as comparisons.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence

import numpy as np

from rlpt.rl.filters import groups_with_signal

# Per-domain sums; the totals are their sums over domains.
_FIELDS = ("groups", "informative", "tokens", "no_signal_tokens", "env_s", "no_signal_env_s")


def domain_family(domain: str) -> str:
  """A domain id's family: "rlpt/rg-ab-easy-v0" -> "rg"; an id outside rlpt's
  scheme ("MyEnv-v1", "ns/MyEnv-v1") -> the name's first part ("MyEnv")."""
  name = domain.split("/")[-1]
  return name.split("-")[0] or name


def signal_sums(records: Sequence[Mapping], group_size: int) -> dict[str, dict[str, float]]:
  """{domain: {groups, informative, tokens, no_signal_tokens, env_s, no_signal_env_s}}."""
  if group_size < 1 or len(records) % group_size:
    raise ValueError(f"{len(records)} records do not split into groups of {group_size}.")
  if not records:
    return {}
  out: dict[str, dict[str, float]] = collections.defaultdict(lambda: dict.fromkeys(_FIELDS, 0.0))
  rewards = np.array([float(r["reward"]) for r in records]).reshape(-1, group_size)
  valid = np.array([not r["infra_error"] for r in records], np.float64).reshape(-1, group_size)
  informative = groups_with_signal(rewards, valid)
  for g, signal in enumerate(informative):
    rows = records[g * group_size:(g + 1) * group_size]
    domains = {r["domain"] for r in rows}
    if len(domains) != 1:
      raise ValueError(f"group {g} mixes domains {sorted(domains)}; a group is one task.")
    s = out[rows[0]["domain"]]
    tokens = float(sum(r["length"] for r in rows))
    seconds = float(sum(r.get("env_s", 0.0) for r in rows))
    s["groups"] += 1
    s["informative"] += float(signal)
    s["tokens"] += tokens
    s["env_s"] += seconds
    if not signal:
      s["no_signal_tokens"] += tokens
      s["no_signal_env_s"] += seconds
  return dict(out)


# Sums travel with a rollout's metrics as flat keys under this prefix, so
# that every way of combining rollouts (dynamic sampling's attempts, a wave's
# parts) adds them up; ``pop_sums`` takes them out again.
SUM_PREFIX = "signal_sum/"


def flat_sums(sums: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
  return {f"{SUM_PREFIX}{k}/{d}": v[k] for d, v in sums.items() for k in _FIELDS}


def pop_sums(metrics: dict) -> dict[str, dict[str, float]]:
  """Removes the flat sums from ``metrics``; returns them per domain."""
  out: dict[str, dict[str, float]] = {}
  for key in [k for k in metrics if k.startswith(SUM_PREFIX)]:
    field, domain = key[len(SUM_PREFIX):].split("/", 1)
    out.setdefault(domain, dict.fromkeys(_FIELDS, 0.0))[field] += float(metrics.pop(key))
  return out


def _share(num: float, den: float) -> float:
  return num / den if den else 0.0


def signal_metrics(sums: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
  """Flat metrics of a step's sums.

  Totals: ``signal/groups``, ``signal/informative_share`` (groups with reward
  variance), ``signal/tokens`` (sampled), ``signal/no_signal_token_share``,
  ``env_seconds/total``, ``env_seconds/no_signal_share`` (the share of
  compute spent on groups that carried no signal). Per domain seen:
  ``groups/<d>``, ``informative/<d>``, ``sampled_tokens/<d>``,
  ``env_seconds/<d>``; per family (``domain_family``):
  ``family_informative/<f>``.
  """
  total = dict.fromkeys(_FIELDS, 0.0)
  family: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
  out: dict[str, float] = {}
  for d, v in sorted(sums.items()):
    for k in _FIELDS:
      total[k] += v[k]
    f = family[domain_family(d)]
    f[0] += v["informative"]
    f[1] += v["groups"]
    out[f"groups/{d}"] = v["groups"]
    out[f"informative/{d}"] = _share(v["informative"], v["groups"])
    out[f"sampled_tokens/{d}"] = v["tokens"]
    out[f"env_seconds/{d}"] = v["env_s"]
  for f, (inf, groups) in sorted(family.items()):
    out[f"family_informative/{f}"] = _share(inf, groups)
  out["signal/groups"] = total["groups"]
  out["signal/informative_share"] = _share(total["informative"], total["groups"])
  out["signal/tokens"] = total["tokens"]
  out["signal/no_signal_token_share"] = _share(total["no_signal_tokens"], total["tokens"])
  out["env_seconds/total"] = total["env_s"]
  out["env_seconds/no_signal_share"] = _share(total["no_signal_env_s"], total["env_s"])
  return out
