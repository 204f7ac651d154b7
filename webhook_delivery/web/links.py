"""Links to our own pages about one of Phorge's rows. A PHID is whatever a row holds: one outside the URL
pattern (PHID-HWBH-odd.phid) gets no link, never a NoReverseMatch that turns the whole page into a 500."""

from __future__ import annotations

from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..phorge.names import ObjectName


def page_url(page: str, phid: object) -> str | None:
    """The URL of our `hook` or `request` page for this PHID, None when no page can be named by it."""
    try:
        return reverse(f"webhook_delivery:{page}", args=[str(phid)])
    except NoReverseMatch:
        return None


def page_link(page: str, phid: object, label: object, *, code: bool = False) -> SafeString:
    """`label` linked to that page, or `label` alone; escaped either way."""
    url = page_url(page, phid)
    shown = format_html("<code>{}</code>", label) if code else format_html("{}", label)
    return shown if url is None else format_html('<a href="{}">{}</a>', url, shown)


def object_link(name: ObjectName, base: str | None) -> SafeString:
    """The full name with its name linked into Phorge when its base URI is known: `<a>T123</a>: <title>`."""
    if base is None:
        return format_html("{}{}", name.name, name.rest)
    return format_html('<a href="{}{}" rel="noreferrer">{}</a>{}', base, name.path, name.name, name.rest)
