"""One Apprise send, in a process of its own: `python -m webhook_delivery.alerts.apprise_send`, started by
apprise_channels.py with the project's Python, its environment naming the send's guard (apprise_guard.py) as
its proxy, and killed at the send's deadline.

It reads one JSON object on its standard input: the plugin's class (`plugin`, `module:Class`, as the watcher
read the URL: only that module of Apprise's is loaded, not its hundred others) and either the Apprise URL
(`url`) or the plugin's options (`options`: the chat webhook's), the `title`, the `body` and the `format`
they are written in. It sends
them with Apprise as published, redirects not followed (Apprise's own switch, `http_redirects`), and writes
one JSON object on its standard output: whether the plugin took the message (`accepted`), the HTTP statuses
the servers answered (`statuses`, from urllib3's log records: a plugin says only yes or no) and the class of
an exception the plugin let out (`error`). Nothing of the URL, the message or an answer is written: Apprise's
log lines, which can hold a URL with its token, go nowhere, and standard error is not read.

It imports Apprise and nothing of Django's or ours, so that it starts quickly (docs/operate/security.md
gives the cost of a send).
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from typing import Any

# urllib3's line for each answer (urllib3/connectionpool.py): scheme, host, port, method, URL, version,
# status, length. Only the status is kept.
ANSWER_LINE = '%s://%s:%s "%s %s %s" %s %s'
# The asset of every send (the watcher's reads of a URL too): nothing kept on disk between sends (Apprise's
# persistent store caches lookups, tokens among them, set by each caller), no redirect followed, and no image of
# Apprise's: its default icon is a GitHub address that every chat client showing an alert would fetch
# (Mattermost, Slack and others send it as the message's icon); an icon_url= of the URL still counts.
ASSET: dict[str, Any] = {"http_redirects": False, "image_url_mask": "", "image_url_logo": ""}


class Statuses(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if record.msg == ANSWER_LINE and isinstance(args, tuple) and len(args) == 8 and isinstance(args[6], int):
            self.seen.append(args[6])


def plugin_for(job: dict[str, Any]) -> Any:
    """The plugin, made as Apprise.instantiate makes it (the URL read by the plugin's own parse_url, or by its
    parse_native_url for a service's own address, such as https://hooks.slack.com/...), from its class."""
    import apprise

    asset = apprise.AppriseAsset(storage_mode=apprise.PersistentStoreMode.MEMORY, **ASSET)
    module, name = job["plugin"].split(":")
    cls = getattr(importlib.import_module(module), name)
    if "options" in job:
        return cls(asset=asset, **job["options"])
    url = job["url"].replace("/#", "/%23")  # as Apprise.instantiate reads it
    schemes: set[str] = set()
    for protocols in (cls.protocol, cls.secure_protocol):
        schemes |= {protocols} if isinstance(protocols, str) else set(protocols or ())
    written = url.split("://", 1)[0].lower() in {scheme.lower() for scheme in schemes}
    results = cls.parse_url(url) if written else cls.parse_native_url(url)
    try:
        return None if not results else cls(**(results | {"asset": asset}))
    except Exception:  # noqa: BLE001 - as Apprise.instantiate: a URL its plugin cannot take
        return None


def send(job: dict[str, Any], statuses: Statuses) -> dict[str, Any]:
    import apprise

    plugin = plugin_for(job)
    if plugin is None:
        return {"accepted": False, "statuses": [], "error": "not a URL Apprise knows"}
    plugin.redirects = False  # as the asset says, whatever the URL asks (`?redirect=yes`)
    error = None
    try:
        accepted = bool(
            plugin.notify(body=job["body"], title=job["title"], body_format=apprise.NotifyFormat(job["format"]))
        )
    except Exception as exc:  # noqa: BLE001 - told to the watcher by its kind
        accepted, error = False, type(exc).__name__
    return {"accepted": accepted, "statuses": statuses.seen, "error": error}


def main() -> int:
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger("apprise").setLevel(logging.CRITICAL + 1)
    statuses = Statuses()
    answers = logging.getLogger("urllib3.connectionpool")
    answers.setLevel(logging.DEBUG)
    answers.addHandler(statuses)
    answers.propagate = False
    result = send(json.load(sys.stdin), statuses)
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
