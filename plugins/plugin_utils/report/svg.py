"""A tiny SVG writer for the reports' charts: horizontal bars and columns per day with a rate line, inline in the page
(no script, no charting library, nothing from the network)."""

from __future__ import annotations

from typing import Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import esc

BAR_HEIGHT = 16
LABEL_WIDTH = 260
COLUMN_WIDTH = 36
# about how wide a character of the charts' 11px text is, so a title is not cut
CHARACTER_WIDTH = 7
CHART_HEIGHT = 120
BAR_COLOUR = "#4a7ab5"
RATE_COLOUR = "#2a2"
MARK_COLOUR = "#c33"


def _number(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


def _clip(label: str, length: int = 42) -> str:
    return label if len(label) <= length else label[:length - 1] + "…"


def hbars(items: Sequence[tuple[str, float]], *, title: str, unit: str = "", width: int = 640) -> str:
    """One bar per item, longest bar for the largest value, its label left and its value right."""
    if not items:
        return f"<p class='muted'>{esc(title)}: nothing in this window</p>"
    top = max(value for _label, value in items) or 1
    room = width - LABEL_WIDTH - 60
    rows = []
    for index, (label, value) in enumerate(items):
        y = 20 + index * (BAR_HEIGHT + 4)
        length = max(1, round(room * value / top))
        rows.append(f"<text x='0' y='{y + 12}'><title>{esc(label)}</title>{esc(_clip(label))}</text>"
                    f"<rect x='{LABEL_WIDTH}' y='{y}' width='{length}' height='{BAR_HEIGHT}' fill='{BAR_COLOUR}'/>"
                    f"<text x='{LABEL_WIDTH + length + 4}' y='{y + 12}'>{esc(_number(value))}{esc(unit)}</text>")
    height = 24 + len(items) * (BAR_HEIGHT + 4)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' role='img' width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
            f"<title>{esc(title)}</title><text x='0' y='12' font-weight='bold'>{esc(title)}</text>{''.join(rows)}</svg>")


def columns(labels: Sequence[str], counts: Sequence[float], *, title: str, rates: Sequence[float | None] = (),
            marks: Sequence[float] = (), marked: str = "") -> str:
    """A column per label (a day) for ``counts``, and, when given, ``rates`` (0 to 1) as a line over them (heal rate)
    and ``marks`` as the part of each column that is ``marked`` (relapsed), at its foot in another colour."""
    width = max(40 + len(labels) * COLUMN_WIDTH + 40, len(title) * CHARACTER_WIDTH)
    top = max(counts, default=0) or 1
    base = 20 + CHART_HEIGHT
    right = 34 + len(labels) * COLUMN_WIDTH
    parts = [f"<text x='0' y='12' font-weight='bold'>{esc(title)}</text>",
             f"<line x1='30' y1='{base}' x2='{right}' y2='{base}' stroke='#999'/>"]
    points = []
    for index, (label, count) in enumerate(zip(labels, counts, strict=True)):
        x = 34 + index * COLUMN_WIDTH
        height = round(CHART_HEIGHT * count / top)
        parts.append(f"<rect x='{x}' y='{base - height}' width='{COLUMN_WIDTH - 6}' height='{height}' fill='{BAR_COLOUR}'>"
                     f"<title>{esc(label)}: {esc(_number(count))}</title></rect>")
        mark = marks[index] if index < len(marks) else 0
        if mark:
            marked_height = round(CHART_HEIGHT * mark / top)
            parts.append(f"<rect x='{x}' y='{base - marked_height}' width='{COLUMN_WIDTH - 6}' height='{marked_height}' fill='{MARK_COLOUR}'>"
                         f"<title>{esc(label)}: {esc(_number(mark))} {esc(marked)}</title></rect>")
        if count:
            parts.append(f"<text x='{x + 2}' y='{base - height - 2}'>{esc(_number(count))}</text>")
        if index % max(1, len(labels) // 10) == 0:
            parts.append(f"<text x='{x}' y='{base + 12}'>{esc(label[5:])}</text>")
        rate = rates[index] if index < len(rates) else None
        if rate is not None:
            points.append(f"{x + (COLUMN_WIDTH - 6) // 2},{base - round(CHART_HEIGHT * rate)}")
    if points:
        parts.append(f"<polyline points='{' '.join(points)}' fill='none' stroke='{RATE_COLOUR}' stroke-width='2'/>"
                     f"<text x='{right + 2}' y='26' fill='{RATE_COLOUR}'>100%</text>")
    height = base + 18
    return (f"<svg xmlns='http://www.w3.org/2000/svg' role='img' width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
            f"<title>{esc(title)}</title>{''.join(parts)}</svg>")
