"""Run metrics: JSONL + TensorBoard writer and the end-of-run report."""

from rlpt.metrics.progress import progress_bar
from rlpt.metrics.report import plot_eval_curves, success_table
from rlpt.metrics.run_log import RunLog
from rlpt.metrics.writer import MetricsWriter

# Metric-name prefixes whose values are wall-clock measurements (or depend on
# thread timing): they differ between any two runs of the same config, while
# every other metric of a deterministic run must not.
WALL_CLOCK_PREFIXES = ("time/", "throughput/", "checkpoint/", "accelerator/", "host/", "env_latency_",
                       "env_seconds/", "env/queue_depth", "async/wait", "async/ready_waves")

__all__ = ["MetricsWriter", "RunLog", "WALL_CLOCK_PREFIXES", "plot_eval_curves", "progress_bar", "success_table"]
