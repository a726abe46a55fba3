"""Run metrics: JSONL + TensorBoard writer and the end-of-run report."""

from rlpt.metrics.report import plot_eval_curves, success_table
from rlpt.metrics.writer import MetricsWriter

__all__ = ["MetricsWriter", "plot_eval_curves", "success_table"]
