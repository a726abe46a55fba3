"""The mission's real-tool domains, every part in one run: grading latency,
throughput, and reference / wrong verdicts on generated and public material.

    python benchmarks/domains_real.py [--parts=finance,cad] [--tasks=8] [--threads=2] [--domains=easy]
        [--finqa=PATH] [--tatqa=PATH] [--convfinqa=PATH] [--cadprompt=PATH]

Parts: ``finance`` (benchmarks/domains_finance.py: generated PDF reports and
FinQA / TAT-QA / ConvFinQA as published) and ``cad`` (benchmarks/domains_cad.py:
build123d parts and assemblies through the sandboxed kernel, and CADPrompt).
Nothing is downloaded: a public set is measured only when its flag names a
local copy. Each part's module documents its rows.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import domains_cad  # noqa: E402
import domains_finance  # noqa: E402

PARTS = ("finance", "cad")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"some of {list(PARTS)}")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per generated domain")
    parser.add_argument("--threads", type=int, default=2, help="CAD graders at once")
    parser.add_argument("--finqa", help="FinQA's dataset/ folder or one of its JSON files")
    parser.add_argument("--tatqa", help="a TAT-QA dataset_raw JSON file (or the folder)")
    parser.add_argument("--convfinqa", help="ConvFinQA's data.zip, its unzipped folder or one of its JSON files")
    parser.add_argument("--cadprompt", help="the extracted CADPrompt/ folder")
    parser.add_argument("--domains", default="", help="only generated domains whose id contains this")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts has {unknown}; expected some of {list(PARTS)}.")
    print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if "finance" in parts:
        domains_finance.print_rows(domains_finance.finance_rows(
            args.finqa, args.tatqa, args.convfinqa, args.tasks, args.domains))
    if "cad" in parts:
        print()
        domains_cad.print_table(domains_cad.cad_rows(args.tasks, args.threads, args.cadprompt, args.domains))


if __name__ == "__main__":
    main()
