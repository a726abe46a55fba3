"""A CAD FAIL's partial credit on envelopes, missing features and shrinking errors.

    python benchmarks/cad_credit.py [--seed 0]

Each answer goes through the whole ladder (kernel build in the sandbox, host
checks) against a generated task's reference; the table gives its verdict,
the reward it earns (environments/families/cad.py: 0.8 x convex-hull IoU x
feature IoU) and what the old credit, 0.8 x volume IoU, paid it. Rows: on
rlpt/cad-plate-easy-v0 (seed --seed) a box and a cube of the plate's volume,
the plate without its holes, with 2 and 3 of its 4, the part itself, and
three sweeps (hole diameter, plate length, hole position) as the error
shrinks; on rlpt/cad-bracket-medium-v0 (same seed) the bracket without one
hole or both, where the L's inside is most of the feature volume.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gymnasium  # noqa: E402

import environments  # noqa: E402, F401
from environments.cad import geometry  # noqa: E402
from environments.families import cad  # noqa: E402

_BOTTOM = "align=(Align.CENTER, Align.CENTER, Align.MIN)"


def _task(domain_id: str, seed: int) -> str:
    env = gymnasium.make(domain_id).unwrapped
    env.reset(seed=seed)
    return env.task.hidden


def plate_script(w: float, d: float, t: float, hole: float, centres: list[tuple[float, float]]) -> str:
    cuts = "".join(f"part -= Pos({x:g}, {y:g}, 0) * Cylinder({hole / 2:g}, {t:g}, {_BOTTOM})\n" for x, y in centres)
    return f"from build123d import *\npart = Box({w:g}, {d:g}, {t:g}, {_BOTTOM})\n{cuts}result = part\n"


def plate_answers(script: str) -> list[tuple[str, str]]:
    """(label, answer) for the plate task whose reference script is `script`."""
    w, d, t = (float(v) for v in re.search(r"Box\(([\d.]+), ([\d.]+), ([\d.]+)", script).groups())
    hole = 2 * float(re.search(r"Cylinder\(([\d.]+)", script).group(1))
    xs = [float(v) for v in re.search(r"for x in \(([-\d., ]+)\)", script).group(1).split(",")]
    ys = [float(v) for v in re.search(r"for y in \(([-\d., ]+)\)", script).group(1).split(",")]
    centres = [(x, y) for x in xs for y in ys]
    volume = cad.reference_or_grade(script).volume
    rows = [(f"plate {w:g} x {d:g} x {t:g}, four {hole:g} mm holes: a box of its volume",
             f"from build123d import *\nresult = Box({w:g}, {d:g}, {volume / (w * d):.6f}, {_BOTTOM})\n"),
            ("a cube of its volume", f"from build123d import *\nresult = Box(*[{volume ** (1 / 3):.6f}] * 3, {_BOTTOM})\n"),
            ("the plate without its holes", plate_script(w, d, t, hole, [])),
            ("two of four holes", plate_script(w, d, t, hole, centres[:2])),
            ("three of four holes (one missing)", plate_script(w, d, t, hole, centres[:3])),
            ("the part", script)]
    rows += [(f"holes {e:g} mm too wide", plate_script(w, d, t, hole + e, centres)) for e in (4, 2, 1, 0.5)]
    rows += [(f"plate {e:g} mm too long", plate_script(w + e, d, t, hole, centres)) for e in (16, 8, 4, 1)]
    rows += [(f"holes {e:g} mm off in x", plate_script(w, d, t, hole, [(x + e, y) for x, y in centres])) for e in (3, 2, 1, 0.5)]
    return rows


def bracket_answers(script: str) -> list[tuple[str, str]]:
    lines = script.splitlines(keepends=True)
    cuts = [k for k, line in enumerate(lines) if line.startswith("part -=")]
    drop = lambda ks: "".join(line for k, line in enumerate(lines) if k not in ks)  # noqa: E731
    return [("bracket without its vertical hole", drop({cuts[0]})), ("bracket without its horizontal hole", drop({cuts[1]})),
            ("bracket without holes", drop(set(cuts))), ("the bracket", script)]


def table(seed: int = 0) -> list[dict]:
    out = []
    for domain_id, answers in (("rlpt/cad-plate-easy-v0", plate_answers), ("rlpt/cad-bracket-medium-v0", bracket_answers)):
        script = _task(domain_id, seed)
        ref = cad.reference_or_grade(script)
        for label, answer in answers(script):
            grade = cad.grade_script(answer, script)
            cand = cad.candidate(answer)
            old = cad.FAIL_REWARD_SCALE * geometry.iou(cand, ref) if isinstance(cand, geometry.Solid) else 0.0
            agree = geometry.agreement(cand, ref) if isinstance(cand, geometry.Solid) else None
            out.append({"answer": label, "verdict": grade.verdict.value, "reward": grade.reward,
                        "old": 1.0 if grade.success else old, "hull": agree.envelope if agree else 0.0,
                        "features": agree.features if agree else 0.0})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| answer | verdict | reward | hull IoU | feature IoU | old reward (0.8 x IoU) |")
    print("|---|---|---:|---:|---:|---:|")
    for r in table(args.seed):
        print(f"| {r['answer']} | {r['verdict']} | {r['reward']:.3f} | {r['hull']:.3f} | {r['features']:.3f} | {r['old']:.3f} |")


if __name__ == "__main__":
    main()
