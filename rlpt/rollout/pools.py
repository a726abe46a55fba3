"""A run's environment pool from its config sections: this host's threads
(`EnvPool`) or Ray actors (`RayEnvPool`), both an `EnvironmentPool`."""

from __future__ import annotations

from rlpt.config import DomainsConfig, EnvConfig, RolloutConfig
from rlpt.rollout.domains import register_domain_files
from rlpt.rollout.envs import EnvPool
from rlpt.rollout.pool_api import EnvironmentPool
from rlpt.rollout.ray_backend import RayEnvPool


def make_env_pool(env: EnvConfig, domains: DomainsConfig,
                  rollout: RolloutConfig) -> EnvironmentPool:
  """A run's environment pool from its ``env``, ``domains`` and ``rollout``
  config sections (the episode's attempts and turn budget): this host's
  threads or Ray actors (``env.backend``)."""
  cls = RayEnvPool if env.backend == "ray" else EnvPool
  return cls(domains.ids, env, **episode_options(domains, rollout))


def episode_options(domains: DomainsConfig, rollout: RolloutConfig) -> dict:
  """A pool's keyword arguments from the ``domains`` and ``rollout`` sections:
  the episode's attempts and turn budget, the domain files to register."""
  return dict(max_attempts=rollout.max_attempts, max_turns=rollout.max_turns,
              files=register_domain_files(domains.files))
