"""The import contract of rlpt: layers you can see, checked on the source.

Packages (and top-level modules) of rlpt sit in three layers, lowest first:

  pure          configs (a leaf, with the registries of names), models, attention,
                sharding rules, sampling kernels, RL
                estimators and losses, training steps, curricula, data, checkpoints
  device        rlpt.device: processes, placement, transfers, compiled programs
  orchestration actor, rollout, evaluation, pre-training and the trainer

An import goes down or sideways within a layer, never up; the package graph has
no cycle; and no rlpt import hides inside a function (the way a cycle is
dodged). `environments` never imports JAX or rlpt.
"""

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rlpt")
LAYERS = {
    "pure": {"attention", "checkpoint", "config", "curriculum", "data", "distill", "keys", "metrics",
             "models", "packing", "registry", "rl", "sampling", "scoring", "sharding", "steps",
             "tokenizers", "update"},
    "device": {"device"},
    "orchestration": {"actor", "bases", "engine", "evaluation", "pretrain", "rollout", "trainer", "warmup"},
}
RANK = {unit: i for i, layer in enumerate(LAYERS.values()) for unit in layer}


def _modules(root: str = ROOT) -> dict[str, str]:
  out = {}
  for dirpath, _, names in os.walk(root):
    for name in names:
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
        out[rel.removesuffix(".__init__")] = path
  return out


def _imports(module: str, path: str) -> list[tuple[str, int, bool]]:
  """(imported rlpt module, line, at module level) for every import in the file."""
  with open(path) as f:
    tree = ast.parse(f.read())
  top = {id(n) for stmt in tree.body for n in ast.walk(stmt)
         if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.If, ast.Try))}
  package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
      names = [base]
    else:
      continue
    found += [(n, node.lineno, id(node) in top) for n in names if n == "rlpt" or n.startswith("rlpt.")]
  return found


def _unit(module: str) -> str:
  return module.split(".")[1] if "." in module else module


def _graph(modules: dict[str, str]) -> tuple[dict[str, set[str]], list[str]]:
  edges: dict[str, set[str]] = {}
  where: list[str] = []
  for module, path in modules.items():
    for target, line, _ in _imports(module, path):
      a, b = _unit(module), _unit(target)
      if a != b and b != "rlpt":
        edges.setdefault(a, set()).add(b)
        where.append(f"{os.path.relpath(path, os.path.dirname(ROOT))}:{line} {module} -> {target}")
  return edges, where


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
  state: dict[str, int] = {}
  stack: list[str] = []

  def visit(u):
    state[u] = 1
    stack.append(u)
    for v in sorted(edges.get(u, ())):
      if state.get(v) == 1:
        return stack[stack.index(v):] + [v]
      if v not in state and (found := visit(v)):
        return found
    stack.pop()
    state[u] = 2
    return None

  for u in sorted(edges):
    if u not in state and (found := visit(u)):
      return found
  return None


def violations(root: str = ROOT) -> list[str]:
  """Every breach of the contract, one line each (empty when it holds)."""
  modules = _modules(root)
  out = []
  for module, path in modules.items():
    unit = _unit(module)
    if unit not in RANK and unit != "rlpt":
      out.append(f"{path}: {unit!r} is in no layer of tests/test_layers.py LAYERS")
    for target, line, at_top in _imports(module, path):
      rel = f"{os.path.relpath(path, os.path.dirname(ROOT))}:{line}"
      if not at_top:
        out.append(f"{rel}: imports {target} inside a function")
      other = _unit(target)
      if other in RANK and unit in RANK and RANK[other] > RANK[unit]:
        out.append(f"{rel}: {unit} ({_layer(unit)}) imports {target} ({_layer(other)}), a higher layer")
  edges, _ = _graph(modules)
  if (cycle := _cycle(edges)) is not None:
    out.append("import cycle between rlpt packages: " + " -> ".join(cycle))
  return out


def _layer(unit: str) -> str:
  return next(name for name, units in LAYERS.items() if unit in units)


def test_rlpt_keeps_its_layers():
  assert violations() == []


def _scratch(tmp_path, files: dict[str, str]) -> str:
  root = tmp_path / "rlpt"
  for rel, text in {"__init__.py": "", **files}.items():
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
  return str(root)


@pytest.mark.parametrize("files, expected", [
    ({"steps.py": "from rlpt.device import to_host\n", "device/__init__.py": ""},
     "steps (pure) imports rlpt.device (device), a higher layer"),
    ({"rl/__init__.py": "from rlpt.models import x\n", "models/__init__.py": "from rlpt.rl import y\n"},
     "import cycle between rlpt packages: models -> rl -> models"),
    ({"rl/__init__.py": "def f():\n  from rlpt.models import x\n", "models/__init__.py": ""},
     "imports rlpt.models inside a function"),
    ({"newthing.py": ""}, "'newthing' is in no layer"),
])
def test_the_contract_catches_what_it_forbids(tmp_path, files, expected):
  found = violations(_scratch(tmp_path, files))
  assert any(expected in v for v in found), found


# The leaves: the config imports nothing of rlpt but the registries of names it
# checks, and they import nothing of rlpt at all.
LEAVES = {"config": {"config", "registry"}, "registry": {"registry"}}


def test_config_and_registry_are_leaves():
  reached = {}
  for module, path in _modules().items():
    unit = _unit(module)
    if unit in LEAVES:
      for target, line, _ in _imports(module, path):
        if _unit(target) not in LEAVES[unit]:
          reached[f"{os.path.relpath(path, os.path.dirname(ROOT))}:{line}"] = target
  assert reached == {}


def test_environments_import_neither_jax_nor_rlpt():
  root = os.path.join(os.path.dirname(ROOT), "environments")
  bad = []
  for dirpath, _, names in os.walk(root):
    for name in (n for n in names if n.endswith(".py")):
      with open(os.path.join(dirpath, name)) as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        bad += [f"{name}:{node.lineno} {m}" for m in mods if m.split(".")[0] in ("jax", "flax", "optax", "rlpt")]
  assert bad == []


# Files and functions above these sizes are where a newcomer gets lost. An
# exception ("path": lines, "path:Class.function": lines) holds one still to
# split to its present size, so it can only shrink; there are none.
MAX_FILE_LINES, MAX_FUNCTION_LINES = 400, 60
FILE_EXCEPTIONS: dict[str, int] = {}
FUNCTION_EXCEPTIONS: dict[str, int] = {}


def _sizes(root: str = ROOT):
  files, functions = {}, {}
  for module, path in _modules(root).items():
    rel = os.path.relpath(path, os.path.dirname(root))
    with open(path) as f:
      text = f.read()
    files[rel] = text.count("\n")
    tree = ast.parse(text)
    for node in tree.body:
      members = [(node.name + ".", n) for n in node.body] if isinstance(node, ast.ClassDef) else [("", node)]
      for prefix, fn in members:
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
          functions[f"{rel}:{prefix}{fn.name}"] = fn.end_lineno - fn.lineno + 1
  return files, functions


def test_files_and_functions_stay_small():
  files, functions = _sizes()
  big_files = {f: n for f, n in files.items() if n > FILE_EXCEPTIONS.get(f, MAX_FILE_LINES)}
  long_functions = {f: n for f, n in functions.items() if n > FUNCTION_EXCEPTIONS.get(f, MAX_FUNCTION_LINES)}
  assert (big_files, long_functions) == ({}, {})


# A component (a class of the device or orchestration layer) takes where it runs
# (`rlpt.device.RunContext`) and its own config section, not the settings of
# its parts one by one.
MAX_COMPONENT_ARGS = 6


def _component_args(root: str = ROOT) -> dict[str, int]:
  out = {}
  for module, path in _modules(root).items():
    if RANK.get(_unit(module), 0) == 0:
      continue
    with open(path) as f:
      tree = ast.parse(f.read())
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
      for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
          a = fn.args
          out[f"{module}.{cls.name}"] = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - 1
  return out


def test_components_take_few_arguments():
  args = _component_args()
  assert {"rlpt.actor.Actor", "rlpt.rollout.source.RolloutSource", "rlpt.trainer.Trainer"} <= set(args)
  assert {c: n for c, n in args.items() if n > MAX_COMPONENT_ARGS} == {}
