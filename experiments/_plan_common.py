"""Shared shape of the memory-plan configs (experiments/plan_llama_*.py)."""

import ml_collections

# Llama-3-style shapes (vocab 128256, grouped-query attention with 8 KV heads).
LLAMA = {
    "1b": dict(vocab_size=128256, d_model=2048, num_layers=16, num_heads=32, num_kv_heads=8,
               head_dim=64, mlp_dim=8192, tie_embeddings=True),
    "8b": dict(vocab_size=128256, d_model=4096, num_layers=32, num_heads=32, num_kv_heads=8,
               head_dim=128, mlp_dim=14336, tie_embeddings=False),
    "70b": dict(vocab_size=128256, d_model=8192, num_layers=80, num_heads=64, num_kv_heads=8,
                head_dim=128, mlp_dim=28672, tie_embeddings=False),
}


def plan_config(size: str, num_devices: int, mesh: dict, device_memory_gib: float,
                train_batch: int, seq_len: int, sample_batch: int, sample_len: int,
                arg: str) -> ml_collections.ConfigDict:
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
  c.device_memory_gib = device_memory_gib
  if arg == "smoke":
    c.model.num_layers = 2  # planning allocates nothing; fewer layers only trace faster
  elif arg:
    raise ValueError(f"Unknown plan argument '{arg}'; expected '' or 'smoke'.")
  return c
