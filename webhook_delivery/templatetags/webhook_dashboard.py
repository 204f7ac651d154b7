"""Presentation helpers for the dashboard: times, Phorge's error labels and the server-side SVG chart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from ..phorge.herald import utc
from ..phorge.outcomes import HOOK_ERROR, curl_error_label, hook_error_label, http_status, is_success
from ..web import links
from ..web.history import DeliverySeries

register = template.Library()


@register.filter
def duration(seconds: int | float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86400)} d"


@register.filter
def ago(epoch: int | None, now: int) -> str:
    if not epoch:
        return "never"
    return f"{duration(max(0, now - epoch))} ago"


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
    """Phorge's wording for an errorType/errorCode pair (HeraldWebhookRequest display names)."""
    code = str(error_code)
    if not error_type and not code:  # marked failed by the poison rule, properties left as stored
        return "Unreadable request (left as stored)"
    if error_type == HOOK_ERROR:
        return f"Hook error: {hook_error_label(code)}"
    if error_type == "timeout":
        return f"Timeout ({code})"
    if error_type == "http":
        if is_success(error_type, code):
            return f"HTTP {code} (success)"
        if http_status(code) is not None:
            return f"HTTP {code}"
        reason = curl_error_label(code)
        return f"cURL {code}: {reason}" if reason else f"cURL {code[:20]}"
    return f"{error_type} {code}".strip()


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
