"""Per-domain rollout metrics, flat for TensorBoard / JSONL."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from rlpt.curriculum.samplers import DomainSampler
from rlpt.curriculum.signal import domain_family


def domain_metrics(records: Iterable[Mapping], sampler: DomainSampler | None = None,
                   domains: Sequence[str] = (), tokens_key: str = "n_tokens") -> dict[str, float]:
  """Flat per-domain metrics of one batch.

  records: one mapping per sample with ``domain``, ``reward``, ``success``
    (bool or float) and ``tokens_key`` (generated tokens). Drop samples with
    infrastructure errors first: their reward is unknown.
  Returns ``reward/<d>``, ``success/<d>`` and ``tokens/<d>`` (means per
  sample, only for domains with samples), ``share/<d>`` (fraction of the
  batch, 0 for domains without samples) and, with a sampler, ``weight/<d>``
  (its target share). Domains listed in ``domains`` or by the sampler appear
  even without samples. Per family (``domain_family``) of the domains with
  samples: ``family_share/<f>`` and ``family_success/<f>`` (over its samples).
  """
  by_domain: dict[str, list[Mapping]] = collections.defaultdict(list)
  for r in records:
    by_domain[r["domain"]].append(r)
  total = sum(len(v) for v in by_domain.values())
  names = list(dict.fromkeys([*domains, *(sampler.domains if sampler else ()), *by_domain]))
  out: dict[str, float] = {}
  for d in names:
    rows = by_domain.get(d, [])
    out[f"share/{d}"] = len(rows) / total if total else 0.0
    if rows:
      out[f"reward/{d}"] = float(np.mean([float(r["reward"]) for r in rows]))
      out[f"success/{d}"] = float(np.mean([float(r["success"]) for r in rows]))
      out[f"tokens/{d}"] = float(np.mean([float(r[tokens_key]) for r in rows]))
  if sampler is not None:
    for d, w in sampler.weights().items():
      out[f"weight/{d}"] = w
    out.update(sampler.metrics())
  families: dict[str, list[float]] = collections.defaultdict(list)
  for d, rows in by_domain.items():
    families[domain_family(d)].extend(float(r["success"]) for r in rows)
  for f, xs in sorted(families.items()):
    out[f"family_share/{f}"] = len(xs) / total
    out[f"family_success/{f}"] = float(np.mean(xs))
  return out
