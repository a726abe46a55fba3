"""Which tasks a run trains and evaluates on."""

from rlpt.data.tasks import Task, TaskSampler, eval_tasks

__all__ = ["Task", "TaskSampler", "eval_tasks"]
