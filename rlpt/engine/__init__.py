"""Continuous-batching generation inside the trainer's program (see rlpt.engine.engine)."""

from rlpt.config.engine import EngineConfig
from rlpt.engine.engine import Engine, Turn
from rlpt.engine.programs import EnginePrograms

__all__ = ["Engine", "EngineConfig", "EnginePrograms", "Turn"]
