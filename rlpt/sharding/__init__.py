"""Mesh construction and the logical-axis rules table.

Model code names only logical axes (``batch``, ``seq``, ``embed``, ``heads``,
``kv_heads``, ``head_dim``, ``mlp``, ``vocab``); one rules table maps them to
mesh axes. Changing how a model is laid out on a pod is a change to the rules,
never to the model. Two tables: ``DEFAULT_RULES`` (training: FSDP + tensor) and
``SAMPLE_RULES`` (sampling: tensor only); runs take theirs from
``TrainConfig.sharding`` (the tables and their check live in ``rlpt.config.rules``).
``rlpt.device.memory`` plans per-device bytes on
abstract meshes.
"""

from rlpt.config.rules import (DEFAULT_RULES, LOGICAL_AXES, MESH_AXES, SAMPLE_RULES, Rules,
                               check_rules, sequence_sharded)
from rlpt.sharding.mesh import make_mesh
from rlpt.sharding.rules import (
    KV_CACHE_AXES,
    K_CACHE_AXES,
    constrain,
    logical_to_spec,
    named_sharding,
    per_device_bytes,
    state_shardings,
    use_rules,
)

__all__ = [
    "MESH_AXES",
    "make_mesh",
    "DEFAULT_RULES",
    "sequence_sharded",
    "KV_CACHE_AXES",
    "K_CACHE_AXES",
    "LOGICAL_AXES",
    "SAMPLE_RULES",
    "Rules",
    "check_rules",
    "constrain",
    "logical_to_spec",
    "named_sharding",
    "per_device_bytes",
    "state_shardings",
    "use_rules",
]
