"""Library INFO logs stay out of the progress output unless asked for with -v."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = """
from absl import app, logging
from launch import common

def main(_):
  common.quiet_libraries()
  logging.info("library chatter")
  logging.warning("a warning")

app.run(main)
"""


def _run(*args):
  out = subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=True)
  return out.stdout + out.stderr


def test_info_hidden_by_default_shown_with_verbosity():
  quiet = _run()
  assert "a warning" in quiet and "library chatter" not in quiet
  assert "library chatter" in _run("--verbosity=0")
