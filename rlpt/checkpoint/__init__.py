"""Saving and loading model parameters with orbax."""

from rlpt.checkpoint.params import load_model, save_model

__all__ = ["load_model", "save_model"]
