"""An alert's text made neutral in the markup of the service an Apprise URL sends it to. Pure: no Django.

messages.plain() has already put Phorge's text on one line and broken its mentions (`@here`), bare links and
Markdown links; but each service reads more than that. Mattermost turns `<!channel>` into `@channel` and renders
Markdown; Slack reads `<!here>` and `<url|label>`; Discord renders Markdown, `<@id>` mentions and `||spoilers||`
in what Apprise hands it as plain text; Teams, Zulip and Rocket.Chat render Markdown; Telegram and Matrix
take HTML. Apprise converts a declared plain text only for some of them (its Markdown escaping leaves `<`
alone, and a direct call to the Telegram plugin skips the conversion), so the whole text is rendered here,
in the format the plugin will send (`plugin.resolve_format`), and declared in that format, so that Apprise
converts nothing:

* html: every character escaped (`&lt;`, `&amp;`), line breaks as `<br/>`;
* markdown, and plain text to the services that render it as Markdown: every character that starts
  Markdown's or a chat service's own markup escaped with a backslash, `<` followed by a word joiner (no tag,
  autolink, `<!channel>` or `<@id>` can start there, even on a server that expands them before any Markdown),
  `www.` broken the same way (no autolink); our own addresses (the indented link lines, and `https://...`,
  which Phorge's text cannot hold any more) are left as they are, so that they stay links;
* plain text to the services that show it as it is (generic JSON, form and XML receivers, ntfy, Gotify,
  Slack's plain `text`, which Apprise escapes itself, Matrix's plain `body`): `<` and `www.` broken only.
"""

from __future__ import annotations

import html
import re

from ..wording import LINK_INDENT
from .messages import JOINER

# Plugin families (apprise_channels._module) that show plain text as it is, or escape it themselves.
PLAIN = frozenset({"custom_json", "custom_form", "custom_xml", "ntfy", "gotify", "slack", "matrix"})
_MARKUP = re.compile(r"([\\`*_~\[\]|#>$!&{}])")
_OURS = re.compile(r"https?://[A-Za-z0-9._~%/:?=&+\-]+")  # Phorge's text has no "://" left (messages.plain)
_WWW = re.compile(r"(www)(\.)", re.IGNORECASE)


def _angles(text: str) -> str:
    return _WWW.sub(rf"\1{JOINER}\2", text.replace("<", "<" + JOINER))


def _markdown_line(line: str) -> str:
    if line.startswith(LINK_INDENT):
        return line
    parts = []
    last = 0
    for found in _OURS.finditer(line):
        parts.append(_angles(_MARKUP.sub(r"\\\1", line[last : found.start()])))
        parts.append(found.group())
        last = found.end()
    parts.append(_angles(_MARKUP.sub(r"\\\1", line[last:])))
    return "".join(parts)


def markdown(text: str) -> str:
    return "\n".join(_markdown_line(line) for line in text.split("\n"))


def as_html(text: str) -> str:
    escaped = html.escape(text, quote=False).replace("\r\n", "\n").replace("\n", "<br/>\n")
    return _WWW.sub(rf"\1{JOINER}\2", escaped)


def render(family: str, form: str, text: str) -> str:
    """`text` (plain, as messages.py writes it) for a plugin of `family` that sends `form` ("text",
    "markdown" or "html": what Apprise's plugin.resolve_format() says)."""
    if form == "html":
        return as_html(text)
    if form == "markdown" or family not in PLAIN:
        return markdown(text)
    return _angles(text)
