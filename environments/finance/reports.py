"""Generated annual reports: the content (`Report`), drawn from a seeded generator.

A report is a list of blocks (paragraphs, tables, charts, page breaks) about
one made-up company: an income statement (a ruled table), revenue by segment
(a borderless table), a balance sheet and cash flows at the harder levels, a
bar chart of quarterly revenue and a line chart of operating margin whose
values appear only as labels on the bars and points, and paragraphs with
other figures (headcount, dividends, risk factors) that a reader must not
confuse with the asked one. Amounts are whole millions of dollars; negatives
are written in parentheses. `environments.finance.pdf` lays a report out as a
PDF and reads its text back.
"""

from __future__ import annotations

import dataclasses
from typing import Union

import numpy as np

_NAMES = ("Alder", "Brightwater", "Cobalt", "Duneview", "Ember", "Fairhaven", "Granite", "Halcyon", "Ironwood",
          "Juniper", "Kestrel", "Lumen", "Meridian", "Northgate", "Oakridge", "Pinnacle")
_SUFFIXES = ("Holdings", "Industries", "Systems", "Group", "Technologies", "Corporation")
_SEGMENTS = ("Cloud Services", "Consumer Devices", "Industrial Solutions", "Healthcare", "Financial Services",
             "Energy", "Logistics", "Media", "Licensing")
_RISKS = (
    "Our results depend on demand in markets we do not control, and a downturn could reduce revenue.",
    "We rely on a limited number of suppliers for some components, and disruptions could delay shipments.",
    "Changes in tax law in the jurisdictions where we operate could change our effective tax rate.",
    "Exchange rate movements affect the dollar value of sales made in other currencies.",
    "Security incidents could expose customer data and lead to claims and lost business.",
    "Competition may force us to lower prices or increase spending on research and development.",
    "Our indebtedness could limit our flexibility in planning for changes in our business.",
    "Litigation and regulatory proceedings are unpredictable and could result in significant costs.",
)


@dataclasses.dataclass(frozen=True)
class Level:
    """What a difficulty puts in a report."""

    years: int          # fiscal years in each table
    segments: int       # rows of the segment table
    quarters: int       # bars of the quarterly chart
    filler_pages: int   # pages of risk factors between the statements
    balance: bool       # a balance sheet (ruled) and cash flows (borderless)
    line_chart: bool    # operating margin by year, as a line chart


LEVELS = {
    "easy": Level(years=2, segments=3, quarters=4, filler_pages=0, balance=False, line_chart=False),
    "medium": Level(years=3, segments=4, quarters=4, filler_pages=1, balance=True, line_chart=True),
    "hard": Level(years=4, segments=6, quarters=8, filler_pages=2, balance=True, line_chart=True),
}


@dataclasses.dataclass(frozen=True)
class Table:
    """`rows`: (label, one value per column of `years`), amounts in millions."""

    title: str
    years: tuple[int, ...]
    rows: tuple[tuple[str, tuple[float, ...]], ...]
    ruled: bool


@dataclasses.dataclass(frozen=True)
class Chart:
    """Bars or points with their value labels; `unit` is "million" or "percent"."""

    title: str
    kind: str
    labels: tuple[str, ...]
    values: tuple[float, ...]
    unit: str


@dataclasses.dataclass(frozen=True)
class Paragraph:
    text: str
    heading: bool = False


@dataclasses.dataclass(frozen=True)
class PageBreak:
    pass


Block = Union[Paragraph, Table, Chart, PageBreak]


@dataclasses.dataclass(frozen=True)
class Report:
    company: str
    year: int
    blocks: tuple[Block, ...]

    def tables(self) -> tuple[Table, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Table))

    def charts(self) -> tuple[Chart, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Chart))

    def table(self, title: str) -> Table:
        return next(t for t in self.tables() if t.title == title)


def money(value: float) -> str:
    """A whole-million amount as a report writes it: 1,234 or (56)."""
    text = f"{abs(value):,.0f}"
    return f"({text})" if value < 0 else text


def percent(value: float) -> str:
    return f"{value:.1f}%"


def _income(rng: np.random.Generator, years: tuple[int, ...]) -> dict[str, np.ndarray]:
    n = len(years)
    growth = rng.uniform(-0.08, 0.25, size=n - 1)
    revenue = np.empty(n)
    revenue[-1] = rng.integers(900, 20000)
    for i in range(n - 2, -1, -1):  # years run latest first
        revenue[i] = revenue[i + 1] * (1 + growth[i])
    revenue = np.round(revenue)
    cost = np.round(revenue * rng.uniform(0.35, 0.7, size=n))
    opex = np.round(revenue * rng.uniform(0.08, 0.28, size=n))
    other = rng.integers(-250, 120, size=n).astype(float)
    operating = revenue - cost - opex
    pretax = operating + other
    tax = np.round(np.maximum(pretax, 0) * 0.21)
    return {"Revenue": revenue, "Cost of revenue": cost, "Gross profit": revenue - cost,
            "Operating expenses": opex, "Operating income": operating, "Other income (expense), net": other,
            "Income before income taxes": pretax, "Provision for income taxes": tax, "Net income": pretax - tax}


def _shares(rng: np.random.Generator, total: float, parts: int) -> np.ndarray:
    """`parts` whole numbers that sum to `total`, none tiny."""
    weights = rng.dirichlet(np.full(parts, 4.0))
    out = np.round(weights * total)
    out[-1] = total - out[:-1].sum()
    return out


def _segments(rng: np.random.Generator, years: tuple[int, ...], revenue: np.ndarray, n: int) -> Table:
    names = [str(s) for s in rng.choice(_SEGMENTS, size=n, replace=False)]
    columns = np.stack([_shares(rng, float(r), n) for r in revenue], axis=1)
    rows = tuple((name, tuple(float(v) for v in columns[i])) for i, name in enumerate(names))
    return Table("Revenue by segment", years, rows + (("Total revenue", tuple(float(v) for v in revenue)),),
                 ruled=False)


def _balance(rng: np.random.Generator, years: tuple[int, ...], revenue: np.ndarray) -> tuple[Table, Table]:
    cash = np.round(revenue * rng.uniform(0.05, 0.4, size=len(years)))
    receivables = np.round(revenue * rng.uniform(0.08, 0.2, size=len(years)))
    inventory = np.round(revenue * rng.uniform(0.03, 0.15, size=len(years)))
    assets = cash + receivables + inventory + np.round(revenue * rng.uniform(0.6, 1.5, size=len(years)))
    liabilities = np.round(assets * rng.uniform(0.3, 0.7, size=len(years)))
    balance = {"Cash and cash equivalents": cash, "Accounts receivable, net": receivables,
               "Inventories": inventory, "Total assets": assets, "Total liabilities": liabilities,
               "Total shareholders' equity": assets - liabilities}
    operating = np.round(revenue * rng.uniform(0.08, 0.25, size=len(years)))
    capex = -np.round(revenue * rng.uniform(0.02, 0.1, size=len(years)))
    flows = {"Net cash from operating activities": operating, "Capital expenditures": capex,
             "Free cash flow": operating + capex}
    return _table("Consolidated balance sheets", years, balance, True), _table("Cash flows", years, flows, False)


def _table(title: str, years: tuple[int, ...], rows: dict[str, np.ndarray], ruled: bool) -> Table:
    return Table(title, years, tuple((k, tuple(float(x) for x in v)) for k, v in rows.items()), ruled)


def _charts(rng: np.random.Generator, level: Level, years: tuple[int, ...],
            income: dict[str, np.ndarray]) -> list[Chart]:
    per_year = level.quarters // 4
    labels, values = [], []
    for k in range(per_year - 1, -1, -1):
        labels += [f"Q{q} {years[k]}" for q in range(1, 5)]
        values += [float(v) for v in _shares(rng, float(income["Revenue"][k]), 4)]
    charts = [Chart("Quarterly revenue ($ millions)", "bar", tuple(labels), tuple(values), "million")]
    if level.line_chart:
        margin = [round(100 * o / r, 1) for o, r in zip(income["Operating income"], income["Revenue"])]
        charts.append(Chart("Operating margin (%)", "line", tuple(str(y) for y in reversed(years)),
                            tuple(float(m) for m in reversed(margin)), "percent"))
    return charts


def _narrative(rng: np.random.Generator, company: str, year: int) -> Paragraph:
    heads = int(rng.integers(800, 60000))
    dividend = rng.integers(10, 300) / 100
    buyback = int(rng.integers(50, 2000))
    return Paragraph(f"At the end of fiscal {year}, {company} had {heads:,} employees. The board declared "
                     f"dividends of ${dividend:.2f} per share and repurchased ${buyback:,} million of common "
                     "stock. Amounts in the tables below are in millions of U.S. dollars.")


def draw(rng: np.random.Generator, difficulty: str) -> Report:
    """A report of `difficulty` ("easy" / "medium" / "hard"), from `rng` alone."""
    level = LEVELS[difficulty]
    company = f"{rng.choice(_NAMES)} {rng.choice(_SUFFIXES)}"
    year = int(rng.integers(2016, 2026))
    years = tuple(year - i for i in range(level.years))
    income = _income(rng, years)
    blocks: list[Block] = [Paragraph(f"{company} Annual Report, Fiscal {year}", heading=True),
                           _narrative(rng, company, year), _table("Consolidated statements of income", years,
                                                                  income, True)]
    blocks.append(_segments(rng, years, income["Revenue"], level.segments))
    charts = _charts(rng, level, years, income)
    blocks.append(charts[0])
    for _ in range(level.filler_pages):
        risks = rng.choice(len(_RISKS), size=5, replace=False)
        blocks += [PageBreak(), Paragraph("Risk factors", heading=True)]
        blocks += [Paragraph(_RISKS[int(i)]) for i in risks]
    if level.balance:
        blocks += [PageBreak(), *_balance(rng, years, income["Revenue"])]
    blocks += charts[1:]
    return Report(company, year, tuple(blocks))


STATEMENT_ROWS = ("Revenue", "Operating income", "Net income")


def statement(rng: np.random.Generator) -> Report:
    """The brief rung's report: a heading and one ruled table, three lines of
    the income statement over two fiscal years (one page)."""
    company = f"{rng.choice(_NAMES)} {rng.choice(_SUFFIXES)}"
    year = int(rng.integers(2016, 2026))
    years = (year, year - 1)
    income = _income(rng, years)
    table = _table("Income ($ millions)", years, {k: income[k] for k in STATEMENT_ROWS}, True)
    return Report(company, year, (Paragraph(f"{company}, fiscal {year}", heading=True), table))
