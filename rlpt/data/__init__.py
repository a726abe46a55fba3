"""Which tasks a run trains and evaluates on."""

from rlpt.data.stream import TaskStream
from rlpt.data.tasks import Task, TaskSampler, eval_tasks

__all__ = ["Task", "TaskSampler", "TaskStream", "eval_tasks"]
