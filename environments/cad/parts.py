"""Generated parametric parts: a text description and the build123d script of the reference.

Every dimension is a whole or half millimetre and every placement is stated,
so the text fixes the geometry: two parts that both match it are the same
solid (up to the grading tolerance, environments/families/cad.py). Each
generator draws its parameters from `rng` only.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

_HEAD = "from build123d import *\n"
_BOTTOM = "align=(Align.CENTER, Align.CENTER, Align.MIN)"


@dataclasses.dataclass(frozen=True)
class PartTask:
    """description: what the model is told; script: the reference build123d script."""

    kind: str
    description: str
    script: str


def _i(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def block(rng: np.random.Generator) -> PartTask:
    w, d, h = _i(rng, 2, 12) * 5, _i(rng, 2, 12) * 5, _i(rng, 2, 12)
    desc = f"A block {w} x {d} x {h} mm (x, y, z), centred on the z axis, bottom face on z=0."
    return PartTask("block", desc, f"{_HEAD}result = Pos(0, 0, {h / 2:g}) * Box({w}, {d}, {h})\n")


def disc(rng: np.random.Generator) -> PartTask:
    d, t = _i(rng, 2, 16) * 5, _i(rng, 2, 12)
    desc = f"A disc of diameter {d} mm and thickness {t} mm, its axis the z axis, bottom face on z=0."
    return PartTask("disc", desc, f"{_HEAD}result = Pos(0, 0, {t / 2:g}) * Cylinder({d / 2:g}, {t})\n")


def plate(rng: np.random.Generator) -> PartTask:
    w, d, t = _i(rng, 6, 12) * 10, _i(rng, 4, 8) * 10, _i(rng, 3, 10)
    hole, inset = _i(rng, 2, 4) * 2, _i(rng, 6, 10)
    x, y = w / 2 - inset, d / 2 - inset
    desc = (f"A rectangular plate {w} x {d} x {t} mm (x, y, z), centred on the z axis with its bottom face on z=0, "
            f"with four vertical through holes of diameter {hole} mm at (+-{x:g}, +-{y:g}).")
    script = (f"{_HEAD}part = Box({w}, {d}, {t}, {_BOTTOM})\n"
              f"for x in ({-x}, {x}):\n    for y in ({-y}, {y}):\n"
              f"        part -= Pos(x, y, 0) * Cylinder({hole / 2}, {t}, {_BOTTOM})\nresult = part\n")
    return PartTask("plate", desc, script)


def washer(rng: np.random.Generator) -> PartTask:
    od, t = _i(rng, 4, 12) * 5, _i(rng, 2, 8)
    bore = _i(rng, 2, od // 5 - 1) * 4
    desc = (f"A washer: a disc of outer diameter {od} mm and thickness {t} mm, its axis the z axis and its bottom face on z=0, "
            f"with a central through bore of diameter {bore} mm.")
    script = f"{_HEAD}result = Cylinder({od / 2}, {t}, {_BOTTOM}) - Cylinder({bore / 2}, {t}, {_BOTTOM})\n"
    return PartTask("washer", desc, script)


def bracket(rng: np.random.Generator) -> PartTask:
    length, height, width, t = _i(rng, 4, 8) * 10, _i(rng, 3, 6) * 10, _i(rng, 2, 5) * 10, _i(rng, 4, 8)
    hole = _i(rng, 2, 4) * 2
    desc = (f"An L bracket {width} mm wide along y (centred on y=0), {t} mm thick: a base leg occupying x 0..{length}, "
            f"z 0..{t}, and an upright leg occupying x 0..{t}, z 0..{height}. A vertical through hole of diameter {hole} mm "
            f"in the base at x={(length + t) / 2:g}, y=0, and a horizontal through hole of diameter {hole} mm along x in the upright "
            f"at y=0, z={(height + t) / 2:g}.")
    script = (f"{_HEAD}base = Box({length}, {width}, {t}, align=(Align.MIN, Align.CENTER, Align.MIN))\n"
              f"upright = Box({t}, {width}, {height}, align=(Align.MIN, Align.CENTER, Align.MIN))\n"
              f"part = base + upright\n"
              f"part -= Pos({(length + t) / 2}, 0, 0) * Cylinder({hole / 2}, {t}, {_BOTTOM})\n"
              f"part -= Pos(0, 0, {(height + t) / 2}) * Rot(0, 90, 0) * Cylinder({hole / 2}, {t}, {_BOTTOM})\n"
              f"result = part\n")
    return PartTask("bracket", desc, script)


def _flange_parts(rng: np.random.Generator) -> tuple[int, int, int, int, int, int]:
    od, t = _i(rng, 8, 16) * 5, _i(rng, 4, 10)
    bore = _i(rng, 2, od // 20) * 5
    hole, n = _i(rng, 2, 4) * 2, _i(rng, 3, 6)
    bc = (od + bore) // 2 // 2 * 2
    return od, t, bore, hole, n, bc


def _bolt_circle(n: int, bc: int, hole: int, height: str) -> str:
    return (f"for k in range({n}):\n"
            f"    part -= Rot(0, 0, 360 * k / {n}) * Pos({bc / 2}, 0, 0) * Cylinder({hole / 2}, {height}, {_BOTTOM})\n")


def flange(rng: np.random.Generator) -> PartTask:
    od, t, bore, hole, n, bc = _flange_parts(rng)
    desc = (f"A flange: a disc of diameter {od} mm and thickness {t} mm, axis the z axis, bottom face on z=0, with a central "
            f"through bore of diameter {bore} mm and {n} through holes of diameter {hole} mm equally spaced on a {bc} mm "
            f"bolt circle, the first on the +x axis.")
    script = (f"{_HEAD}part = Cylinder({od / 2}, {t}, {_BOTTOM}) - Cylinder({bore / 2}, {t}, {_BOTTOM})\n"
              f"{_bolt_circle(n, bc, hole, str(t))}result = part\n")
    return PartTask("flange", desc, script)


def hub(rng: np.random.Generator) -> PartTask:
    od, t, bore, hole, n, bc = _flange_parts(rng)
    hub_d, hub_h = bore + _i(rng, 2, 4) * 2, _i(rng, 2, 5) * 5
    hub_d = min(hub_d, bc - hole - 2)
    desc = (f"A hub flange: a disc of diameter {od} mm and thickness {t} mm, axis the z axis, bottom face on z=0; on top of it a "
            f"coaxial hub of diameter {hub_d} mm rising to z={t + hub_h}; a through bore of diameter {bore} mm along the axis "
            f"through disc and hub; {n} through holes of diameter {hole} mm in the disc, equally spaced on a {bc} mm bolt circle, "
            f"the first on the +x axis.")
    script = (f"{_HEAD}part = Cylinder({od / 2}, {t}, {_BOTTOM}) + Cylinder({hub_d / 2}, {t + hub_h}, {_BOTTOM})\n"
              f"part -= Cylinder({bore / 2}, {t + hub_h}, {_BOTTOM})\n"
              f"{_bolt_circle(n, bc, hole, str(t))}result = part\n")
    return PartTask("hub", desc, script)


def _steps(rng: np.random.Generator, count: int) -> list[tuple[int, int]]:
    diameters = sorted({_i(rng, 2, 12) * 4 for _ in range(count * 3)}, reverse=True)[:count]
    while len(diameters) < count:
        diameters.append(diameters[-1] - 2)
    return [(d, _i(rng, 2, 8) * 5) for d in diameters]


def _stack(steps: list[tuple[int, int]]) -> tuple[str, str]:
    z, words, lines = 0, [], ["part = None\n"]
    for d, length in steps:
        words.append(f"diameter {d} mm from z={z} to z={z + length}")
        lines.append(f"piece = Pos(0, 0, {z}) * Cylinder({d / 2}, {length}, {_BOTTOM})\n")
        lines.append("part = piece if part is None else part + piece\n")
        z += length
    return "; ".join(words), "".join(lines)


def shaft(rng: np.random.Generator) -> PartTask:
    steps = _steps(rng, _i(rng, 2, 3))
    words, body = _stack(steps)
    desc = f"A stepped shaft along the z axis, coaxial cylinders stacked from z=0: {words}."
    return PartTask("shaft", desc, f"{_HEAD}{body}result = part\n")


def spindle(rng: np.random.Generator) -> PartTask:
    steps = _steps(rng, _i(rng, 3, 4))
    words, body = _stack(steps)
    smallest = min(d for d, _ in steps)
    bore = max(2, smallest // 2 // 2 * 2)
    d0, l0 = steps[0]
    cross = max(2, d0 // 3 // 2 * 2)
    total = sum(length for _, length in steps)
    desc = (f"A spindle along the z axis, coaxial cylinders stacked from z=0: {words}; an axial through bore of diameter "
            f"{bore} mm; and a cross hole of diameter {cross} mm along the x axis through the first step at z={l0 / 2:g}.")
    script = (f"{_HEAD}{body}part -= Cylinder({bore / 2}, {total}, {_BOTTOM})\n"
              f"part -= Pos(0, 0, {l0 / 2}) * Rot(0, 90, 0) * Cylinder({cross / 2}, {d0 + 2})\nresult = part\n")
    return PartTask("spindle", desc, script)


def pocket_plate(rng: np.random.Generator) -> PartTask:
    base = plate(rng)
    w, d, t = (float(v) for v in base.script.split("Box(")[1].split(",")[:3])
    pw, pd, depth = _i(rng, 2, int(w) // 20) * 10, _i(rng, 1, int(d) // 20) * 10, _i(rng, 1, max(1, int(t) - 2))
    desc = base.description[:-1] + f", and a rectangular pocket {pw} x {pd} mm, {depth} mm deep, centred in the top face."
    script = base.script.replace("result = part\n", f"part -= Pos(0, 0, {t - depth}) * Box({pw}, {pd}, {depth}, {_BOTTOM})\nresult = part\n")
    return PartTask("pocket", desc, script)


# kind -> (difficulty, generator)
# block and disc are the brief rung: one primitive placed by one translation,
# their prompts stating the contract in one line, short enough for the tiny
# base's context (experiments/domains.py MIXED_REAL).
BRIEF_KINDS = frozenset({"block", "disc"})
GENERATORS: dict[str, tuple[str, Callable[[np.random.Generator], PartTask]]] = {
    "block": ("easy", block),
    "disc": ("easy", disc),
    "plate": ("easy", plate),
    "washer": ("easy", washer),
    "bracket": ("medium", bracket),
    "flange": ("medium", flange),
    "shaft": ("medium", shaft),
    "hub": ("hard", hub),
    "spindle": ("hard", spindle),
    "pocket": ("hard", pocket_plate),
}
