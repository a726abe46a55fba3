"""Questions about a generated `Report` and their references.

Variants:

* "cell": one table cell (a ruled or a borderless table), or, at the harder
  levels, sometimes the name of the segment with the most revenue.
* "chart": one value read from a chart's labels (a bar's or a point's).
* "compute": a number computed from cells: growth between years, a margin,
  the gap between two segments.
* "extract": a JSON object of named fields from several places of the report
  (the company, the fiscal year, amounts from tables and charts).
"""

from __future__ import annotations

import numpy as np

from environments.finance.answers import Reference
from environments.finance.reports import Report, Table

VARIANTS = ("cell", "chart", "compute", "extract")
_MILLION = 1e6


def _money(value: float) -> Reference:
    return Reference("number", value * _MILLION, "million")


def _pick(rng: np.random.Generator, items: tuple) -> object:
    return items[int(rng.integers(len(items)))]


def _tables(report: Report, difficulty: str) -> tuple[Table, ...]:
    tables = report.tables()
    return tables[:1] if difficulty == "easy" else tables


def _cell(rng: np.random.Generator, report: Report, difficulty: str) -> tuple[str, Reference]:
    segments = report.table("Revenue by segment")
    if difficulty != "easy" and rng.random() < 0.25:
        year = int(rng.integers(len(segments.years)))
        best = max(segments.rows[:-1], key=lambda row: row[1][year])
        return (f"Which segment had the most revenue in fiscal {segments.years[year]}?", Reference("span", best[0]))
    table = _pick(rng, _tables(report, difficulty))
    label, year, ref = _a_cell(rng, table)
    return f'In the table "{table.title}", what is "{label}" for fiscal {year}, in $ millions?', ref


def _a_cell(rng: np.random.Generator, table: Table) -> tuple[str, int, Reference]:
    """A row's label, a fiscal year and that cell's reference."""
    label, values = _pick(rng, table.rows)
    year = int(rng.integers(len(table.years)))
    return label, table.years[year], _money(values[year])


def _chart(rng: np.random.Generator, report: Report, difficulty: str) -> tuple[str, Reference]:
    chart = _pick(rng, report.charts())
    i = int(rng.integers(len(chart.values)))
    if chart.unit == "percent":
        return (f'In the chart "{chart.title}", what is the value for {chart.labels[i]}, in percent?',
                Reference("number", chart.values[i] / 100, "percent"))
    return (f'In the chart "{chart.title}", what was revenue in {chart.labels[i]}, in $ millions?',
            _money(chart.values[i]))


def _compute(rng: np.random.Generator, report: Report, difficulty: str) -> tuple[str, Reference]:
    income = report.table("Consolidated statements of income")
    rows = dict(income.rows)
    kind = int(rng.integers(3 if difficulty != "easy" else 2))
    if kind == 0:
        label = str(_pick(rng, ("Revenue", "Gross profit", "Operating expenses")))
        now, before = rows[label][0], rows[label][1]
        return (f'By what percentage did "{label}" change from fiscal {income.years[1]} to fiscal '
                f"{income.years[0]}?", Reference("number", (now - before) / before, "percent"))
    if kind == 1:
        year = int(rng.integers(len(income.years)))
        return (f"What was the gross margin (gross profit as a percentage of revenue) in fiscal "
                f"{income.years[year]}?",
                Reference("number", rows["Gross profit"][year] / rows["Revenue"][year], "percent"))
    segments = report.table("Revenue by segment")
    a, b = rng.choice(len(segments.rows) - 1, size=2, replace=False)
    (na, va), (nb, vb) = segments.rows[int(a)], segments.rows[int(b)]
    return (f'How much more revenue did "{na}" make than "{nb}" in fiscal {segments.years[0]}, in $ millions '
            "(negative if less)?", _money(va[0] - vb[0]))


def _extract(rng: np.random.Generator, report: Report, difficulty: str) -> tuple[str, Reference]:
    income = dict(report.table("Consolidated statements of income").rows)
    fields = [("company", "the company's name", Reference("span", report.company)),
              ("fiscal_year", "the latest fiscal year", Reference("count", float(report.year))),
              ("revenue", f"revenue in fiscal {report.year}, $ millions", _money(income["Revenue"][0])),
              ("net_income", f"net income in fiscal {report.year}, $ millions", _money(income["Net income"][0]))]
    if difficulty != "easy":
        balance = dict(report.table("Consolidated balance sheets").rows)
        fields.append(("total_assets", f"total assets at the end of fiscal {report.year}, $ millions",
                       _money(balance["Total assets"][0])))
    if difficulty == "hard":
        bars = report.charts()[0]
        line = report.charts()[1]
        fields += [("last_quarter_revenue", f"revenue in {bars.labels[-1]} from the chart, $ millions",
                    _money(bars.values[-1])),
                   ("operating_margin", f"operating margin in fiscal {report.year} from the chart, percent",
                    Reference("number", line.values[-1] / 100, "percent"))]
    listing = "; ".join(f"{name} ({what})" for name, what, _ in fields)
    return (f"Extract these fields as one JSON object: {listing}.",
            Reference("fields", tuple((name, ref) for name, _, ref in fields)))


_ASK = {"cell": _cell, "chart": _chart, "compute": _compute, "extract": _extract}


def brief_cell(rng: np.random.Generator, report: Report) -> tuple[str, Reference]:
    """One cell of a `reports.statement`, asked in one line."""
    label, year, ref = _a_cell(rng, report.tables()[0])
    return f"{label}, fiscal {year}?", ref


def ask(rng: np.random.Generator, report: Report, variant: str, difficulty: str) -> tuple[str, Reference]:
    """(question, reference) of `variant` about `report`, from `rng` alone."""
    if variant not in _ASK:
        raise ValueError(f"unknown finance report variant {variant!r}; allowed: {VARIANTS}")
    return _ASK[variant](rng, report, difficulty)
