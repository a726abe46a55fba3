"""Continuous-batching generation inside the trainer's program (see rlpt.engine.engine)."""

from rlpt.engine.engine import Engine, EngineConfig, Turn
from rlpt.engine.programs import EngineShape

__all__ = ["Engine", "EngineConfig", "EngineShape", "Turn"]
