"""Host side of a rollout: environments and the token layout of a batch."""

from rlpt.rollout.batch import (SequenceBatch, build_episode_sequences, build_sequences,
                                encode_prompts, pad_contexts)
from rlpt.rollout.envs import EnvPool
from rlpt.rollout.records import Episode, Outcome, Prompt, Step

__all__ = ["SequenceBatch", "build_episode_sequences", "build_sequences", "encode_prompts",
           "pad_contexts", "EnvPool", "Episode", "Outcome", "Prompt", "Step"]
