"""Model parameter checkpoints (params) and complete run checkpoints (manager)."""

from rlpt.checkpoint.manager import (NoRestorableCheckpoint, Restored, RunCheckpointer, SaveTiming,
                                     abstract_like, check_resume, jsonable, model_fingerprint)
from rlpt.checkpoint.params import load_model, save_model

__all__ = ["NoRestorableCheckpoint", "Restored", "RunCheckpointer", "SaveTiming", "abstract_like",
           "check_resume", "jsonable", "load_model", "model_fingerprint", "save_model"]
