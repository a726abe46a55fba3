"""3D modelling in a tiny CSG language, rewarded by voxel IoU: the CAD family's
kernel-free easy rung (`rlpt/cad-csg-*`; the build123d parts are
environments/families/cad.py).

Language (integer arguments, in voxels of an N^3 grid; voxel centres at i+0.5):
  box(x0,y0,z0,x1,y1,z1)      axis-aligned, [x0,x1) x [y0,y1) x [z0,z1)
  sphere(cx,cy,cz,r)
  cylinder(cx,cy,z0,z1,r)     axis along z
  union(A,B)  difference(A,B)  translate(dx,dy,dz,A)
The observation shows the target's three orthographic projections as ASCII
('#' filled, '.' empty): top (max over z), front (over y), side (over x).
Reward is IoU(candidate, target) in [0, 1]; PASS iff the voxel sets are equal.
The program is parsed by a small recursive-descent parser (never eval), with
bounded length, depth and node count, so hostile programs cost nothing.
"""

from __future__ import annotations

import re

import numpy as np

from environments import registry
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Problem, failed, malformed, passed

_GRID = {"easy": 8, "medium": 12, "hard": 16}
_ARITY = {"box": (6, 0), "sphere": (4, 0), "cylinder": (5, 0), "union": (0, 2), "difference": (0, 2), "translate": (3, 1)}
_TOKEN_RE = re.compile(r"\s*(?:(?P<num>-?\d{1,3})|(?P<name>[a-z]+)|(?P<punct>[(),]))")
MAX_DEPTH, MAX_NODES = 6, 16


class CSGError(ValueError):
    pass


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None or m.end() == pos:
            raise CSGError(f"unexpected character {text[pos]!r} at {pos}")
        tokens.append(m.group(m.lastgroup))
        pos = m.end()
    return tokens


def parse(text: str) -> tuple:
    """Program text -> nested tuples ("box", 0, 0, 0, 2, 2, 2) / ("union", A, B) ..."""
    tokens = _tokenize(text)
    pos, nodes = 0, 0

    def expect(tok: str) -> None:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] != tok:
            raise CSGError(f"expected {tok!r} at token {pos}")
        pos += 1

    def node(depth: int) -> tuple:
        nonlocal pos, nodes
        nodes += 1
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            raise CSGError("program too deep or too large")
        if pos >= len(tokens) or tokens[pos] not in _ARITY:
            raise CSGError(f"expected a shape or operation at token {pos}, one of {sorted(_ARITY)}")
        name = tokens[pos]
        pos += 1
        n_num, n_child = _ARITY[name]
        expect("(")
        args: list = []
        for k in range(n_num + n_child):
            if k:
                expect(",")
            if k < n_num:
                if pos >= len(tokens) or not re.fullmatch(r"-?\d+", tokens[pos]):
                    raise CSGError(f"{name}: argument {k + 1} must be an integer")
                args.append(int(tokens[pos]))
                pos += 1
            else:
                args.append(node(depth + 1))
        expect(")")
        return (name, *args)

    tree = node(0)
    if pos != len(tokens):
        raise CSGError(f"unexpected trailing input at token {pos}")
    return tree


def voxelize(tree: tuple, n: int) -> np.ndarray:
    """Boolean occupancy grid of shape (n, n, n), indexed [x, y, z]."""
    c = np.arange(n) + 0.5
    x, y, z = np.meshgrid(c, c, c, indexing="ij")

    def ev(t: tuple, dx: int, dy: int, dz: int) -> np.ndarray:
        name, *a = t
        if name == "box":
            x0, y0, z0, x1, y1, z1 = a
            return (x >= x0 + dx) & (x < x1 + dx) & (y >= y0 + dy) & (y < y1 + dy) & (z >= z0 + dz) & (z < z1 + dz)
        if name == "sphere":
            cx, cy, cz, r = a
            return (x - cx - dx) ** 2 + (y - cy - dy) ** 2 + (z - cz - dz) ** 2 <= r * r
        if name == "cylinder":
            cx, cy, z0, z1, r = a
            return ((x - cx - dx) ** 2 + (y - cy - dy) ** 2 <= r * r) & (z >= z0 + dz) & (z < z1 + dz)
        if name == "union":
            return ev(a[0], dx, dy, dz) | ev(a[1], dx, dy, dz)
        if name == "difference":
            return ev(a[0], dx, dy, dz) & ~ev(a[1], dx, dy, dz)
        if name == "translate":
            return ev(a[3], dx + a[0], dy + a[1], dz + a[2])
        raise CSGError(f"unknown node {name!r}")

    return ev(tree, 0, 0, 0)


def projections(grid: np.ndarray) -> str:
    """Top / front / side views side by side, one text row per grid row."""
    views = [grid.any(axis=2).T, grid.any(axis=1).T[::-1], grid.any(axis=0).T[::-1]]
    rows = ["top" + " " * (grid.shape[0] - 2) + "front" + " " * (grid.shape[0] - 4) + "side"]
    for r in range(grid.shape[0]):
        rows.append(" ".join("".join("#" if v else "." for v in view[r]) for view in views))
    return "\n".join(rows)


def _shape(rng: np.random.Generator, kind: str, n: int) -> str:
    def i(lo: int, hi: int) -> int:
        return int(rng.integers(lo, hi + 1))

    if kind == "box":
        x0, y0, z0 = i(0, n // 2), i(0, n // 2), i(0, n // 2)
        return f"box({x0},{y0},{z0},{i(x0 + 1, n)},{i(y0 + 1, n)},{i(z0 + 1, n)})"
    if kind == "sphere":
        r = i(1, max(1, n // 3))
        return f"sphere({i(r, n - r)},{i(r, n - r)},{i(r, n - r)},{r})"
    if kind == "cylinder":
        r = i(1, max(1, n // 3))
        z0 = i(0, n // 2)
        return f"cylinder({i(r, n - r)},{i(r, n - r)},{z0},{i(z0 + 1, n)},{r})"
    raise ValueError(kind)


def _program(variant: str, rng: np.random.Generator, n: int) -> str:
    prim = lambda: _shape(rng, ("box", "sphere", "cylinder")[int(rng.integers(3))], n)  # noqa: E731
    if variant in ("box", "sphere", "cylinder"):
        return _shape(rng, variant, n)
    if variant == "union":
        return f"union({prim()},{prim()})"
    if variant == "difference":
        return f"difference({_shape(rng, 'box', n)},{prim()})"
    if variant == "translate":
        d = [int(v) for v in rng.integers(-2, 3, size=3)]
        return f"translate({d[0]},{d[1]},{d[2]},{prim()})"
    raise ValueError(variant)


VARIANTS = ("box", "sphere", "cylinder", "union", "difference", "translate")


class CSGDomain(Domain):
    answer_format = "a CSG program such as union(box(0,0,0,2,2,2),sphere(4,4,4,2))"

    def __init__(self, spec: DomainSpec, variant: str, n: int) -> None:
        self.spec = spec
        self._variant = variant
        self._n = n

    def sample(self, rng: np.random.Generator) -> Problem:
        for _ in range(100):
            program = _program(self._variant, rng, self._n)
            grid = voxelize(parse(program), self._n)
            if grid.any():  # an empty target (e.g. a box fully subtracted) is not a task
                break
        prompt = f"{self._n}^3 grid\n{projections(grid)}\nprogram: "
        return Problem(key=f"csg:{self._n}:{program}", prompt=prompt, demonstration=program, hidden=program, retry_cue="program: ")

    def grade(self, task: Problem, answer: str) -> Grade:
        try:
            candidate = voxelize(parse(answer), self._n)
        except CSGError as e:
            return malformed(f"expected {self.answer_format}; {e}")
        target = voxelize(parse(task.hidden), self._n)
        union = int((candidate | target).sum())
        iou = int((candidate & target).sum()) / union if union else 1.0
        if iou == 1.0:
            return passed("voxels match exactly")
        return failed(f"IoU {iou:.3f}", reward=iou)


def _register() -> None:
    for variant in VARIANTS:
        for difficulty, n in _GRID.items():
            spec = DomainSpec(
                id=f"rlpt/cad-csg-{variant}-{difficulty}-v0",
                family="cad",
                difficulty=difficulty,
                tags=("3d", "csg", "iou", "partial-credit", variant),
                max_prompt_chars=1024,
                max_answer_chars=160,
                description=f"model a {variant} target on a {n}^3 voxel grid from its projections",
            )
            registry.register(CSGDomain(spec, variant, n))


_register()
