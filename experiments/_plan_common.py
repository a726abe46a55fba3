"""Shared shape of the memory-plan configs (experiments/plan_llama_*.py)."""

import ml_collections

from rlpt.config.rl_sections import LOGPROB_CHUNK
from rlpt.sharding import DEFAULT_RULES, SAMPLE_RULES, sequence_sharded

# Llama-3-style shapes (vocab 128256, grouped-query attention with 8 KV heads).
LLAMA = {
    "1b": dict(vocab_size=128256, d_model=2048, num_layers=16, num_heads=32, num_kv_heads=8,
               head_dim=64, mlp_dim=8192, tie_embeddings=True),
    "8b": dict(vocab_size=128256, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8,
               head_dim=128, mlp_dim=14336, tie_embeddings=False),
    "70b": dict(vocab_size=128256, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8,
                head_dim=128, mlp_dim=28672, tie_embeddings=False),
}


LONG = 131072  # the long-context cases: 128K tokens per sequence


def plan_config(size: str, num_devices: int, mesh: dict, device_memory_gib: float,
                train_batch: int, seq_len: int, sample_batch: int, sample_len: int,
                arg: str, long_context: dict | None = None) -> ml_collections.ConfigDict:
  """The plan of ``size`` on ``mesh``; ``arg`` "128k": GRPO (no critic) at 128K
  tokens per sequence with the sequence axis used, on 80 GB devices, with
  ``long_context``'s num_devices, mesh, train_batch and sample_batch."""
  if arg == "128k" and long_context:
    return _long_context(plan_config(size, num_devices, mesh, device_memory_gib, train_batch,
                                     seq_len, sample_batch, sample_len, "", long_context),
                         **long_context)
  c = ml_collections.ConfigDict()
  c.model = ml_collections.ConfigDict(dict(
      **LLAMA[size], rope_theta=500_000.0, norm_eps=1e-5, dtype="bfloat16",
      attention_impl="blockwise", attention_block_size=512))
  c.mesh = ml_collections.ConfigDict({**dict(data=1, fsdp=1, sequence=1, tensor=1), **mesh})
  c.num_devices = num_devices
  c.train_batch = train_batch
  c.seq_len = seq_len
  c.sample_batch = sample_batch
  c.sample_len = sample_len
  c.reference = True
  c.value_model = True
  c.logprob_chunk = LOGPROB_CHUNK
  c.device_memory_gib = device_memory_gib
  if arg == "smoke":
    c.model.num_layers = 2  # planning allocates nothing; fewer layers only trace faster
  elif arg:
    raise ValueError(f"Unknown plan argument '{arg}'; expected '', 'smoke'"
                     + (" or '128k'." if long_context else "."))
  return c


def _long_context(c: ml_collections.ConfigDict, num_devices: int, mesh: dict, train_batch: int,
                  sample_batch: int) -> ml_collections.ConfigDict:
  c.num_devices = num_devices
  c.mesh = ml_collections.ConfigDict({**dict(data=1, fsdp=1, sequence=1, tensor=1), **mesh})
  c.sharding = ml_collections.ConfigDict(dict(
      train_rules=[list(r) for r in sequence_sharded(DEFAULT_RULES)],
      sample_rules=[list(r) for r in sequence_sharded(SAMPLE_RULES)]))
  c.train_batch, c.sample_batch = train_batch, sample_batch
  c.seq_len = c.sample_len = LONG
  c.value_model = False
  c.device_memory_gib = 80
  return c
