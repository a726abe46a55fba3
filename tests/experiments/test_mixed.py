"""The mixed job's bounds: every domain's prompts fit the rollout's prompt
length, every demonstration (+ EOS) its new tokens, and the base's context
holds both (experiments/domains.py, grpo_mixed.py, pretrain_base.py:mixed)."""

import numpy as np

from environments import registry, splits
from experiments import domains, grpo_mixed, pretrain_base


def test_mixed_job_includes_the_mission_domains_and_its_bounds_hold():
  ids = domains.mixed()
  assert set(domains.MIXED_REAL) <= set(ids) and len(ids) == len(set(ids)) == 14
  families = {registry.get(d).family for d in domains.MIXED_REAL}
  assert families == {"cad", "finance"}
  assert any("physics" in registry.get(d).tags for d in domains.MIXED_REAL)
  cfg = grpo_mixed.get_config()
  base = pretrain_base.get_config("mixed")
  assert cfg.rollout.max_prompt_len == domains.MIXED_REAL_PROMPT_CHARS + 2  # BOS, and one to spare
  assert cfg.rollout.max_new_tokens == domains.MIXED_ANSWER_CHARS
  assert base.max_len >= cfg.rollout.max_prompt_len + cfg.rollout.max_new_tokens - 1
  assert list(base.domains.ids) == list(ids)
  rng = np.random.default_rng(0)
  for d in ids:
    spec, domain = registry.get(d), registry.domain(d)
    assert spec.max_prompt_chars <= domains.MIXED_REAL_PROMPT_CHARS, d
    tasks = [splits.draw(domain, rng, split) for split in splits.SPLITS for _ in range(20)]
    assert max(len(t.prompt) for t in tasks) <= spec.max_prompt_chars, d
    assert max(len(t.demonstration) for t in tasks) + 1 <= domains.MIXED_ANSWER_CHARS, d
