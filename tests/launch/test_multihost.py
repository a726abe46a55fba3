"""Where a multi-process run takes its coordinator, count and id from."""

import pytest

from launch.multihost import resolve


def test_flags_env_and_cluster_detection():
  assert resolve(environ={}) is None
  assert resolve("h:1", 2, 1, environ={}) == dict(coordinator_address="h:1", num_processes=2,
                                                  process_id=1)
  env = {"RLPT_COORDINATOR_ADDRESS": "h:9", "RLPT_NUM_PROCESSES": "4", "RLPT_PROCESS_ID": "3"}
  assert resolve(environ=env)["process_id"] == 3
  assert resolve(process_id=0, environ=env)["process_id"] == 0  # a flag beats the env
  assert resolve("h:1", 1, 0, environ={}) is None
  assert resolve(environ={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "8"}) == {}
  assert resolve(environ={"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) is None
  assert resolve(environ={"TPU_WORKER_HOSTNAMES": "a,b"}) == {}


def test_bad_settings_name_the_value():
  with pytest.raises(ValueError, match=r"missing \['process_id'\]"):
    resolve("h:1", 2, environ={})
  with pytest.raises(ValueError, match=r"--process_id=2 must be in \[0, 2\)"):
    resolve("h:1", 2, 2, environ={})
  with pytest.raises(ValueError, match=r"must be host:port"):
    resolve("h", 2, 0, environ={})
  with pytest.raises(ValueError, match=r"\$RLPT_NUM_PROCESSES='two' is not an integer"):
    resolve(environ={"RLPT_NUM_PROCESSES": "two"})
