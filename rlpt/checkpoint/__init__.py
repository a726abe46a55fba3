"""Model parameter checkpoints (params) and complete run checkpoints (manager)."""

from rlpt.checkpoint.manager import (NoRestorableCheckpoint, Restored, RunCheckpointer, SaveTiming,
                                     abstract_like, model_fingerprint)
from rlpt.checkpoint.params import load_model, save_model

__all__ = ["NoRestorableCheckpoint", "Restored", "RunCheckpointer", "SaveTiming", "abstract_like",
           "load_model", "model_fingerprint", "save_model"]
