"""Presentation helpers for the dashboard: times, Phorge's error labels and the server-side SVG chart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from .. import wording
from ..phorge import outcomes
from ..phorge.herald import utc
from ..reads.attempt_digest import DeliverySeries
from ..web import links

register = template.Library()


register.filter("duration", wording.duration)
register.filter("ago", wording.ago)
register.filter("moment", wording.moment)
register.filter("utc", utc)


@register.filter
def ms(value: int | float | None) -> str:
    if value is None:
        return "-"
    return f"{round(value)} ms" if value < 10_000 else f"{value / 1000:.1f} s"


@register.filter
def percent(share: float | None) -> str:
    if share is None:
        return "-"
    return f"{share * 100:.1f} %" if share < 1 else "100 %"


@register.filter
def days(seconds: int) -> str:
    """Whole days, as a retention is spoken of: `7 days`."""
    count = seconds // 86400
    return f"{count} day{'' if count == 1 else 's'}"


@register.simple_tag
def page_link(page: str, phid: object, label: object, code: bool = False) -> SafeString:
    """`{% page_link "hook" phid name %}`: a link to our page about the row, or the label alone."""
    return links.page_link(page, phid, label, code=code)


@register.simple_tag
def error_label(error_type: str, error_code: str) -> str:
    """Phorge's wording for an errorType/errorCode pair (outcomes.error_label)."""
    return outcomes.error_label(error_type, error_code)


@dataclass(frozen=True)
class Panel:
    title: str
    css: str
    top: float
    bottom: float
    peak: int
    total: int
    path: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


WIDTH, LEFT, RIGHT = 1200.0, 52.0, 12.0
PANEL_HEIGHTS = (120.0, 64.0)
PANEL_GAP, TOP = 34.0, 22.0
UTC_LABEL_ROOM = 60.0


def _bars(values: tuple[int, ...], peak: int, top: float, bottom: float) -> str:
    width = (WIDTH - LEFT - RIGHT) / max(1, len(values))
    parts = []
    for index, value in enumerate(values):
        if value:
            height = max(1.0, (bottom - top) * value / peak)
            x = LEFT + index * width
            parts.append(f"M{x:.1f} {bottom:.1f}V{bottom - height:.1f}h{width:.2f}V{bottom:.1f}Z")
    return "".join(parts)


@register.inclusion_tag("webhook_delivery/_chart.html")
def delivery_chart(series: DeliverySeries) -> dict[str, Any]:
    panels = []
    top = TOP
    for (title, css, values), height in zip(
        (("Delivered", "sent", series.sent), ("Failed attempts", "failed", series.failed)),
        PANEL_HEIGHTS,
        strict=True,
    ):
        peak = max(values, default=0)
        bottom = top + height
        panels.append(Panel(title, css, top, bottom, peak, sum(values), _bars(values, max(1, peak), top, bottom)))
        top = bottom + PANEL_GAP
    width = (WIDTH - LEFT - RIGHT) / max(1, len(series.sent))
    ticks = [
        Tick(LEFT + index * width, datetime.fromtimestamp(start, UTC).strftime("%H:%M"))
        for index in range(len(series.sent))
        if (start := series.start + index * series.step) % 3600 == 0
        and LEFT + index * width < WIDTH - RIGHT - UTC_LABEL_ROOM  # an hour label would overprint "UTC"
    ]
    return {
        "series": series,
        "panels": panels,
        "ticks": ticks,
        "width": WIDTH,
        "height": top - PANEL_GAP + 22,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "axis_y": top - PANEL_GAP,
        "sent_total": panels[0].total,
        "failed_total": panels[1].total,
        "buckets": len(series.sent),
        "hours": len(series.sent) * series.step // 3600,
    }
