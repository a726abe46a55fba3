"""rlpt: reinforcement-learning post-training of language models in JAX.

Importing rlpt imports the packages that fill `rlpt.registry` (the RL
estimators and losses, the curriculum's strategies and its config check), so
every name a config may use is known wherever a config is built.
"""

from rlpt import curriculum, rl  # noqa: F401  (they register; see rlpt.registry)

__version__ = "0.1.0"
