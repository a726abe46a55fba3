"""Host side of a rollout: environments and the token layout of a batch."""

from rlpt.rollout.batch import SequenceBatch, build_sequences, encode_prompts
from rlpt.rollout.envs import EnvPool, Graded, Prompt

__all__ = ["SequenceBatch", "build_sequences", "encode_prompts", "EnvPool", "Graded", "Prompt"]
