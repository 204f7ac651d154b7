"""logformat.py on real deliveries: text log lines name the request, the hook and the reason, and escape every
control character a Phorge row can hold (the event keys of every call: tests/unit/test_logformat.py)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.receiver import Receiver
from webhook_delivery.worker.loop import build_worker


def _unsafe(text: str, ours: str = "\n") -> list[str]:
    """The control characters in `text` but those the output itself uses (`ours`)."""
    return [c for c in text if (ord(c) < 0x20 and c not in ours) or 0x7F <= ord(c) <= 0x9F or c == "\u202e"]


@PHORGE_DB
def test_text_log_lines_escape_control_characters_from_phorge_rows(phorge: Any, delivery_config: Any) -> None:
    import dataclasses
    import json
    import logging

    from tests.support.receiver import Receiver
    from webhook_delivery.logformat import JsonFormatter, TextFormatter
    from webhook_delivery.worker.loop import build_worker

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    evil = "PHID-HWBR-\x1b]0;owned\x07\x1b[2K\rforged\x7f\x85"
    handler = Keep()
    logging.getLogger("webhook_delivery").addHandler(handler)
    try:
        with Receiver() as receiver:
            hook = phorge.hook(receiver.url("/ctl/s503"))
            phorge.request(hook, phid=evil)
            build_worker(dataclasses.replace(delivery_config, retry_backoff_sec=0), once=True).run()
    finally:
        logging.getLogger("webhook_delivery").removeHandler(handler)
    failed = [r for r in records if r.__dict__.get("request") == evil]
    assert failed, [r.getMessage() for r in records]
    for record in failed:
        line = TextFormatter().format(record)
        assert _unsafe(line) == [] and "\n" not in line, repr(line)
        assert 'request="PHID-HWBR-\\u001b]0;owned\\u0007\\u001b[2K\\rforged\\u007f\\u0085"' in line
        entry = JsonFormatter().format(record)
        assert json.loads(entry)["request"] == evil  # JSON already escapes: still the same value
    record = logging.LogRecord("webhook_delivery", logging.ERROR, "", 0, "bad \x1b[2K name", None, None)
    assert TextFormatter().format(record).endswith("bad \\x1b[2K name")


@PHORGE_DB
def test_text_log_lines_name_the_request_the_hook_and_the_reason(phorge: Phorge, delivery_config: Any) -> None:
    from webhook_delivery.logformat import TextFormatter

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logging.getLogger("webhook_delivery").addHandler(handler)
    try:
        with Receiver() as receiver:
            hook = phorge.hook(receiver.url("/down/s503"))
            phid = phorge.request(hook)
            refused = phorge.request(phorge.hook("http://a..example.com/"))
            build_worker(dataclasses.replace(delivery_config, outbound_blacklist=()), once=True).run()
    finally:
        logging.getLogger("webhook_delivery").removeHandler(handler)
    lines = [TextFormatter().format(record) for record in records]
    failed = next(line for line in lines if "webhook request failed" in line and phid in line)
    assert f"request={phid}" in failed and f"hook={hook}" in failed and "error_type=http" in failed
    assert "error_code=503" in failed
    uri = next(line for line in lines if "webhook URI refused" in line)
    assert f"request={refused}" in uri and "reason=" in uri
    assert "a..example.com" not in "\n".join(lines)  # never the URI
