"""A run's environment pool from its config sections: this host's threads
(`EnvPool`) or Ray actors (`RayEnvPool`)."""

from __future__ import annotations

from rlpt.rollout.domains import register_domain_files
from rlpt.rollout.envs import EnvPool
from rlpt.rollout.ray_backend import RayEnvPool


def make_env_pool(env, domains, rollout):
  """A run's environment pool from its ``env``, ``domains`` and ``rollout``
  config sections (the episode's attempts and turn budget): this host's
  threads or Ray actors (``env.backend``)."""
  e, ro = env, rollout
  kwargs = dict(max_attempts=ro.max_attempts, max_turns=ro.max_turns,
                sandbox_workers=e.sandbox_workers,
                priorities=dict(zip(domains.ids, e.priorities)) if e.priorities else None,
                retries=e.retries, backoff_s=e.backoff_s, job_timeout_s=e.job_timeout_s,
                aging_s=e.aging_s, latency_s=e.latency_s, latency_dist=e.latency_dist,
                files=register_domain_files(domains.files))
  if e.backend == "ray":
    return RayEnvPool(domains.ids, workers=e.workers, address=e.ray_address,
                      actors=e.ray_actors, **kwargs)
  return EnvPool(domains.ids, workers=e.workers, **kwargs)
