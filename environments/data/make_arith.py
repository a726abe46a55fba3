"""Writes arith-{easy,medium,hard}.jsonl: procedurally generated arithmetic word
problems (200 per difficulty) for the built-in dataset domains
rlpt/dataset-arith-<difficulty>-v0 (environments.datasets).

Deterministic: `python environments/data/make_arith.py` rewrites identical
files. Rows are {"id", "prompt", "answer"}; answers are integers (easy,
medium) or fractions in LaTeX / percentages (hard), graded by the math verifier.
"""

from __future__ import annotations

import json
import math
import pathlib
import random

ROWS = 200
NAMES = ["Ada", "Ben", "Chen", "Dana", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kofi", "Lena"]
ITEMS = ["apples", "books", "marbles", "stickers", "coins", "pencils", "shells", "cards"]
SUFFIX = " Give the final answer as 'Answer: <value>'."


def easy(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, 60), rng.randint(1, 40)
    if rng.random() < 0.5:
        return f"{name} has {a} {item} and finds {b} more. How many {item} does {name} have now?", str(a + b)
    a += b
    return f"{name} has {a} {item} and gives away {b}. How many {item} are left?", str(a - b)


def medium(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = rng.randrange(3)
    if kind == 0:
        boxes, per = rng.randint(3, 40), rng.randint(6, 90)
        return f"A shop packs {per} {item} into each box. How many {item} are in {boxes} boxes?", str(boxes * per)
    if kind == 1:
        friends, each = rng.randint(2, 12), rng.randint(3, 30)
        return (f"{name} shares {friends * each} {item} equally among {friends} friends. "
                f"How many {item} does each friend get?"), str(each)
    a, b, c = rng.randint(10, 99), rng.randint(2, 9), rng.randint(1, 50)
    return (f"{name} buys {b} bags of {a} {item} each, then loses {c} of them. "
            f"How many {item} does {name} have?"), str(a * b - c)


def hard(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    if rng.random() < 0.5:
        total = rng.randint(6, 60)
        part = rng.randint(1, total - 1)
        g = math.gcd(part, total)
        return (f"{name} has {total} {item} and {part} of them are red. What fraction of the {item} "
                f"are red?"), f"\\frac{{{part // g}}}{{{total // g}}}"
    total = rng.choice([20, 25, 40, 50, 80, 200, 400])
    pct = rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 60, 75])
    part = total * pct // 100
    if part * 100 != total * pct:
        total, part = 100, pct
    return f"{name} has {total} {item} and {part} of them are old. What percent of the {item} are old?", f"{pct}%"


def main() -> None:
    here = pathlib.Path(__file__).resolve().parent
    for difficulty, gen in (("easy", easy), ("medium", medium), ("hard", hard)):
        rng = random.Random(f"rlpt-arith-{difficulty}")
        seen: set[str] = set()
        rows = []
        while len(rows) < ROWS:
            prompt, answer = gen(rng)
            if prompt in seen:
                continue
            seen.add(prompt)
            rows.append({"id": f"arith-{difficulty}-{len(rows):03d}", "prompt": prompt + SUFFIX, "answer": answer})
        with open(here / f"arith-{difficulty}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
