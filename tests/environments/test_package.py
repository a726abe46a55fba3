"""environments/ is a package of its own: `pip install ./environments` into a
fresh virtual environment without JAX gives the gymnasium domains, their data
files and the sandbox (what another framework's environment needs)."""

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHECK = r"""
import importlib.util, json
import gymnasium
import environments
assert importlib.util.find_spec("jax") is None, "JAX is installed in the package's environment"
out = {"file": environments.__file__}
for d in ("rlpt/strings-reverse-easy-v0", "rlpt/dataset-arith-easy-v0",
          "rlpt/terminal-rename-easy-v0"):
    env = gymnasium.make(d)
    obs, info = env.reset(seed=0)
    passed = env.step(info["demonstration"])[4]["verdict"]
    env.reset(seed=0)
    out[d] = [passed, env.step("nonsense")[4]["verdict"]]
print(json.dumps(out))
"""


def test_pip_install_environments_without_jax(tmp_path):
  src = tmp_path / "src"
  # A copy, so the build leaves nothing in the checkout.
  shutil.copytree(os.path.join(ROOT, "environments"), src / "environments",
                  ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
  venv = tmp_path / "venv"
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  py = str(venv / "bin" / "python")
  r = subprocess.run([py, "-m", "pip", "install", "--quiet", str(src / "environments")],
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  r = subprocess.run([py, "-c", CHECK], capture_output=True, text=True, timeout=300,
                     cwd=str(tmp_path))  # not the checkout: the installed package is imported
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["file"].startswith(str(venv)), out["file"]
  for d in ("rlpt/strings-reverse-easy-v0", "rlpt/dataset-arith-easy-v0",
            "rlpt/terminal-rename-easy-v0"):
    assert out[d][0] == "PASS" and out[d][1] != "PASS", (d, out[d])


def test_the_package_lists_every_subpackage():
    """environments/pyproject.toml names its packages one by one (the folder is
    the package root): a new subpackage must be listed, or an install lacks it."""
    import tomllib
    with open(os.path.join(ROOT, "environments", "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    found = set()
    for dirpath, dirnames, names in os.walk(os.path.join(ROOT, "environments")):
        dirnames[:] = [d for d in dirnames if d not in ("data", "__pycache__")]
        if "__init__.py" in names:
            rel = os.path.relpath(dirpath, ROOT)
            found.add(rel.replace(os.sep, "."))
    assert found == listed
