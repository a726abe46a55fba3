"""A `Report` laid out as a PDF (reportlab, matplotlib) and its text read back (pdfplumber).

Charts: matplotlib (a bare `Figure`, saved by Agg) draws the bars, lines, axes and grid as an image
with no text at all; every label (values over the bars and points, the
categories under them, the y-axis ticks) is drawn by reportlab as PDF text at
the place matplotlib's transforms give. So a chart's data is in its labels
only, and the labels are text an extractor reads, as in a report made from a
vector chart.

Reading (`text_of`): per page, ruled tables are found by their lines
(pdfplumber's `find_tables`) and written a row a line with " | " between
cells; text over an image (a chart's labels) keeps its layout (columns of
labels line up with their bars); everything else is read as text lines, which
is how a borderless table reads too (pdfplumber's table finder needs rules).
Blocks keep their order on the page.

Bytes are stable for a given report: reportlab's `invariant` fixes the
creation date and document id, and Agg draws the same pixels.
"""

from __future__ import annotations

import io
from typing import Any

from environments.finance.reports import Chart, PageBreak, Paragraph, Report, Table, money, percent

_DPI = 100
_CHART_W, _CHART_H = 430.0, 210.0   # points
_AXES = (0.1, 0.16, 0.86, 0.7)      # left, bottom, width, height as shares of the chart


def _chart_image(chart: Chart) -> tuple[bytes, list[tuple[float, float, str, str]]]:
    """(PNG without text, labels as (x, y in points from the chart's lower left, text, anchor))."""
    # A bare Figure, not pyplot: no global backend or figure registry is touched; PNG goes through Agg.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(_CHART_W / 72, _CHART_H / 72), dpi=_DPI)
    ax = fig.add_axes(_AXES)
    xs = list(range(len(chart.values)))
    top = max(max(chart.values), 0) * 1.25 or 1.0
    low = min(min(chart.values), 0) * 1.25
    if chart.kind == "bar":
        ax.bar(xs, chart.values, color="#4a78a8", width=0.6)
    else:
        ax.plot(xs, chart.values, color="#c0504d", marker="o")
        low = min(low, min(chart.values) - 0.25 * (top - min(chart.values)))
    ax.set_ylim(low, top)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ticks = [t for t in ax.get_yticks() if low <= t <= top]
    ax.set_yticks(ticks)
    ax.set_xticks(xs)
    ax.tick_params(labelbottom=False, labelleft=False)
    ax.grid(axis="y", color="#dddddd")
    scale = 72 / _DPI
    show = money if chart.unit == "million" else percent
    labels = []
    for x, v, name in zip(xs, chart.values, chart.labels):
        px, py = ax.transData.transform((x, v))
        labels.append((px * scale, py * scale + 4, show(v), "centre"))
        bx, by = ax.transData.transform((x, low))
        labels.append((bx * scale, by * scale - 12, name, "centre"))
    for t in ticks:
        px, py = ax.transData.transform((-0.6, t))
        labels.append((px * scale - 4, py * scale - 3, f"{t:g}", "right"))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue(), labels


def _chart_flowable(chart: Chart) -> Any:
    from reportlab.lib.utils import ImageReader
    from reportlab.platypus import Flowable

    png, labels = _chart_image(chart)

    class ChartFlowable(Flowable):
        def wrap(self, avail_w: float, avail_h: float) -> tuple[float, float]:
            return _CHART_W, _CHART_H

        def draw(self) -> None:
            c = self.canv
            c.drawImage(ImageReader(io.BytesIO(png)), 0, 0, _CHART_W, _CHART_H)
            c.setFont("Helvetica", 7)
            for x, y, text, anchor in labels:
                (c.drawRightString if anchor == "right" else c.drawCentredString)(x, y, text)

    return ChartFlowable()


def _table_flowable(table: Table) -> Any:
    from reportlab.lib import colors
    from reportlab.platypus import Table as RLTable, TableStyle

    data = [["", *(f"Fiscal {y}" for y in table.years)]]
    data += [[label, *(money(v) for v in values)] for label, values in table.rows]
    style = [("FONT", (0, 0), (-1, -1), "Helvetica", 8), ("ALIGN", (1, 0), (-1, -1), "RIGHT"),
             ("FONT", (0, 0), (-1, 0), "Helvetica-Bold", 8)]
    if table.ruled:
        style.append(("GRID", (0, 0), (-1, -1), 0.5, colors.black))
    return RLTable(data, style=TableStyle(style), hAlign="LEFT")


def render(report: Report) -> bytes:
    """The report as PDF bytes (letter pages)."""
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import KeepTogether, PageBreak as RLPageBreak, Paragraph as RLParagraph
    from reportlab.platypus import SimpleDocTemplate, Spacer

    styles = getSampleStyleSheet()
    story: list[Any] = []
    for block in report.blocks:
        if isinstance(block, Paragraph):
            story.append(RLParagraph(block.text, styles["Heading2" if block.heading else "BodyText"]))
        elif isinstance(block, (Table, Chart)):  # a title stays on its table's or chart's page
            body = _table_flowable(block) if isinstance(block, Table) else _chart_flowable(block)
            story.append(KeepTogether([RLParagraph(block.title, styles["Heading4"]), body]))
        elif isinstance(block, PageBreak):
            story.append(RLPageBreak())
        story.append(Spacer(1, 6))
    buf = io.BytesIO()
    doc = SimpleDocTemplate(buf, pagesize=letter, invariant=True, title=f"{report.company} {report.year}",
                            author="rlpt", creator="rlpt", producer="rlpt")
    doc.build(story)
    return buf.getvalue()


def _inside(obj: dict, box: tuple[float, float, float, float]) -> bool:
    x0, top, x1, bottom = box
    return obj["x0"] >= x0 - 1 and obj["x1"] <= x1 + 1 and obj["top"] >= top - 1 and obj["bottom"] <= bottom + 1


def _layout_lines(page: Any, box: tuple[float, float, float, float]) -> str:
    text = page.crop(box).extract_text(layout=True, x_density=4.5)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    return "\n".join(line[indent:] for line in lines)


def _page_text(page: Any) -> str:
    blocks: list[tuple[float, str]] = []
    boxes = []
    for table in page.find_tables():
        rows = table.extract()
        blocks.append((table.bbox[1], "\n".join(" | ".join(" ".join((c or "").split()) for c in r) for r in rows)))
        boxes.append(table.bbox)
    for image in page.images:
        box = (max(image["x0"], 0), max(image["top"], 0), min(image["x1"], page.width), min(image["bottom"],
                                                                                            page.height))
        blocks.append((box[1], _layout_lines(page, box)))
        boxes.append(box)
    rest = page.filter(lambda obj: not any(_inside(obj, b) for b in boxes))
    blocks += [(line["top"], line["text"]) for line in rest.extract_text_lines()]
    return "\n".join(text for _, text in sorted(blocks, key=lambda b: b[0]) if text.strip())


def text_of(pdf: bytes) -> str:
    """The text of every page of `pdf`, each after a "--- page N ---" line."""
    import pdfplumber

    with pdfplumber.open(io.BytesIO(pdf)) as doc:
        return "\n".join(f"--- page {i} ---\n{_page_text(p)}" for i, p in enumerate(doc.pages, 1))
