"""The fast sampling paths refuse model options they do not implement."""

import pytest

from rlpt.models import ModelConfig
from rlpt.sampling.cached import check_model_cfg


def test_plain_llama_block_is_accepted():
  check_model_cfg(ModelConfig())


@pytest.mark.parametrize("option", [
    {"qkv_bias": True}, {"qk_norm": True}, {"embed_scale": True},
    {"final_logit_softcap": 30.0}, {"mlp_activation": "gelu_tanh"},
])
def test_imported_family_options_are_refused_by_name(option):
  with pytest.raises(ValueError, match=next(iter(option))):
    check_model_cfg(ModelConfig(**option))
