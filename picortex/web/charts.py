"""The overview's spend chart, drawn on the server as inline SVG (no script, no CDN)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final
from xml.sax.saxutils import escape

from picortex.core.money import usd

WIDTH: Final = 640
HEIGHT: Final = 180
MARGIN_LEFT: Final = 56
MARGIN_BOTTOM: Final = 28
MARGIN_TOP: Final = 12
# Workspaces past this many share one colour: a chart of many series is unreadable anyway.
PALETTE: Final = ("#2f6fde", "#d9822b", "#2e9e5b", "#a34fc2", "#c23b3b", "#5b6b7a")


def spend_chart(series: Mapping[str, Sequence[tuple[str, float]]]) -> str:
    """Stacked bars of USD per day, one colour per workspace; empty string without data.

    Args:
        series: workspace -> [(day `YYYY-MM-DD`, USD)], every workspace on the same days.
    """
    if not series:
        return ""
    days = [day for day, _ in next(iter(series.values()))]
    totals = [sum(values[i][1] for values in series.values()) for i in range(len(days))]
    top = max(totals) if totals and max(totals) > 0 else 1.0
    plot_w = WIDTH - MARGIN_LEFT - 8
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    slot = plot_w / max(len(days), 1)
    bar = max(slot * 0.7, 1.0)
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="Spend per day, last {len(days)} days" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{MARGIN_LEFT}" y1="{HEIGHT - MARGIN_BOTTOM}" x2="{WIDTH - 8}" '
        f'y2="{HEIGHT - MARGIN_BOTTOM}" stroke="#888"/>',
        f'<text x="{MARGIN_LEFT - 6}" y="{MARGIN_TOP + 4}" text-anchor="end" '
        f'font-size="11">{usd(top)}</text>',
        f'<text x="{MARGIN_LEFT - 6}" y="{HEIGHT - MARGIN_BOTTOM}" text-anchor="end" '
        f'font-size="11">{usd(0)}</text>',
    ]
    for i, day in enumerate(days):
        x = MARGIN_LEFT + i * slot + (slot - bar) / 2
        y = float(HEIGHT - MARGIN_BOTTOM)
        for n, (workspace, values) in enumerate(series.items()):
            amount = values[i][1]
            if amount <= 0:
                continue
            h = amount / top * plot_h
            y -= h
            colour = PALETTE[min(n, len(PALETTE) - 1)]
            title = escape(f"{workspace} {day}: {usd(amount)}")
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{title}</title></rect>'
            )
        if i == 0 or i == len(days) - 1 or i % 7 == 0:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle" '
                f'font-size="11">{escape(day[5:])}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def legend(series: Mapping[str, Sequence[tuple[str, float]]]) -> list[tuple[str, str, float]]:
    """(workspace, colour, total USD over the chart's days) for the chart's legend."""
    return [
        (ws, PALETTE[min(n, len(PALETTE) - 1)], sum(usd for _, usd in values))
        for n, (ws, values) in enumerate(series.items())
    ]
