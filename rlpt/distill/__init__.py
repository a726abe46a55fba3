"""Distillation: train a small draft (or a compressed model) from a teacher policy."""

from rlpt.distill.loss import distill_loss, forward_kl
from rlpt.distill.step import DraftDistiller, draft_train_step, make_draft_train_step

__all__ = ["distill_loss", "forward_kl", "DraftDistiller", "draft_train_step",
           "make_draft_train_step"]
