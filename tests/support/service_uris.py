"""Values of Phorge's `gorge.webhook.uri`, as a hand-written `local.json` or an old config row may hold them,
and what the patch's predicate and the service make of each: unset, a base URI, or the problem named.

One table for both readers: tests/unit/test_delegation.py holds the service to it, and
tests/process/test_phorge_patch.py runs the patch's PHP over the same values."""

from __future__ import annotations

from typing import Any

UNSET = "unset"
VALID = "valid"

SERVICE_URIS: tuple[tuple[Any, str], ...] = (
    (None, UNSET),
    ("", UNSET),
    ("http://gorge-webhook:8160/", VALID),
    ("https://gorge.example.com", VALID),
    ("https://gorge.example.com.:443/", VALID),
    ("http://127.0.0.1:8160", VALID),
    ("http://[::1]:8160/", VALID),
    ("http://[::ffff:10.0.0.1]/", VALID),
    ("http://gorge_webhook:8160/", VALID),
    ("http://GORGE.example.com/", VALID),
    (True, "it is not a string"),
    (False, "it is not a string"),
    (0, "it is not a string"),
    (8160, "it is not a string"),
    (1.5, "it is not a string"),
    ([], "it is not a string"),
    ({"uri": "http://gorge/"}, "it is not a string"),
    (["http://gorge/"], "it is not a string"),
    (" ", "it is blank"),
    ("\t\n", "it is blank"),
    (" http://gorge-webhook:8160/", "it has a leading or trailing blank"),
    ("http://gorge-webhook:8160/ ", "it has a leading or trailing blank"),
    ("http://gorge-webhook:8160/\n", "it has a leading or trailing blank"),
    ("http://gorge-webhook:8160/\x00", "it has a leading or trailing blank"),
    ("http://gorge webhook:8160/", "it contains a blank or a control character"),
    ("HTTP://gorge-webhook:8160/", "its scheme is not in lower case (http:// or https://)"),
    ("Https://gorge.example.com/", "its scheme is not in lower case (http:// or https://)"),
    ("gorge-webhook:8160", "it does not start with http:// or https://"),
    ("gorge.example.com", "it does not start with http:// or https://"),
    ("//gorge.example.com/", "it does not start with http:// or https://"),
    ("http:/gorge.example.com/", "it does not start with http:// or https://"),
    ("ftp://gorge.example.com/", "it does not start with http:// or https://"),
    ("http://", "it names no host"),
    ("http:///api", "it names no host"),
    ("http://:8160/", "it names no host"),
    ("http://ops:secret@gorge.example.com/", "it carries a user name or password"),
    ("http://gorge-webhook:0/", "its port is not a number from 1 to 65535"),
    ("http://gorge-webhook:65536/", "its port is not a number from 1 to 65535"),
    ("http://gorge-webhook:/", "its port is not a number from 1 to 65535"),
    ("http://gorge-webhook:http/", "its port is not a number from 1 to 65535"),
    ("http://gorge-webhook:81:82/", "its port is not a number from 1 to 65535"),
    ("http://-gorge/", "its host is not a valid host name"),
    ("http://görge.example.com/", "its host is not a valid host name"),
    ("http://[zz]/", "its host is not a valid IPv6 address"),
    ("http://[1::2::3]/", "its host is not a valid IPv6 address"),
    ("http://gorge-webhook:8160/api", "it has a path (the base URI ends after the host and port)"),
    ("http://gorge-webhook:8160//", "it has a path (the base URI ends after the host and port)"),
    ("http://gorge-webhook:8160/\u00a0", "it has a path (the base URI ends after the host and port)"),
    ("http://gorge-webhook:8160/?token=x", "it has a query"),
    ("http://gorge-webhook:8160?", "it has a query"),
    ("http://gorge-webhook:8160/#top", "it has a fragment"),
)
