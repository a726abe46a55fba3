"""On-device sampling: jitted prefill and a lax.while_loop decode over a KV cache."""

from rlpt.sampling.logits import SamplingParams, processed_logprobs, token_logprobs
from rlpt.sampling.sampler import SampleOutput, Sampler

__all__ = ["SamplingParams", "processed_logprobs", "token_logprobs", "SampleOutput", "Sampler"]
