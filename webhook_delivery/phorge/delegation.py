"""Whether Phorge hands webhook delivery to this service: the predicate of contrib/phorge's patch
(`gorge.webhook.uri` set and `phabricator.silent` off), read from the settings the service already reads.

The soulteary/phorge fork has a switch of its own: its newer revisions ask their service registry whether
`webhook` is owned by `gorge` (PhabricatorGorgeServiceSpec::getOwner()): `gorge.webhook.owner` set to
`gorge` or `phorge` decides; unset or `auto`, the owner is `gorge` exactly when `gorge.webhook.uri` is a
non-empty string; any other value makes Phorge itself fail, so it is unknown here. Pure: the values come
from config.py's layers.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

SERVICE_URI = "gorge.webhook.uri"
FORK_OWNER = "gorge.webhook.owner"
DELEGATION_KEYS = (FORK_OWNER, SERVICE_URI)  # in the order they decide
OWNER_SHOWN_MAX = 40

DelegationState = Literal["delegated", "not delegated", "unknown"]


_BLANK = "\x00-\x20\x7f"  # a space or a control character, as the patch's PHP spells it
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)")
_BRACKETED = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::(.*))?")
_HOST_PORT = re.compile(r"([^:]*)(?::(.*))?")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\.?")
_PORT = re.compile(r"[0-9]{1,5}")


def service_uri_problem(value: Any) -> str | None:
    """Why a set value of `gorge.webhook.uri` is not the service's base URI, in the words of the patch's
    HeraldGorgeWebhookDelivery::getURIProblem() (the same checks in the same order, kept together by
    tests/process/test_phorge_patch.py); None for a base URI (http or https, a host, a port from 1 to
    65535, no user, path, query or fragment) and for an unset one (null or the empty string)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return "it is not a string"
    if re.fullmatch(f"[{_BLANK}]*", value):
        return "it is blank"
    if re.match(f"[{_BLANK}]", value) or re.search(f"[{_BLANK}]$", value):
        return "it has a leading or trailing blank"
    if re.search(f"[{_BLANK}]", value):
        return "it contains a blank or a control character"
    scheme = _SCHEME.fullmatch(value)
    if scheme is None or scheme[1].lower() not in ("http", "https"):
        return "it does not start with http:// or https://"
    if scheme[1] not in ("http", "https"):
        return "its scheme is not in lower case (http:// or https://)"
    authority, tail = re.fullmatch(r"([^/?#]*)(.*)", scheme[2]).groups()  # type: ignore[union-attr]
    if "@" in authority:
        return "it carries a user name or password"
    parts = _BRACKETED.fullmatch(authority) or _HOST_PORT.fullmatch(authority)
    host, port = parts.groups() if parts is not None else ("", None)
    if host == "":
        return "it names no host"
    if authority.startswith("[") and not _ipv6(host):
        return "its host is not a valid IPv6 address"
    if not authority.startswith("[") and not _HOST_NAME.fullmatch(host):
        return "its host is not a valid host name"
    if port is not None and not (_PORT.fullmatch(port) and 1 <= int(port) <= 65535):
        return "its port is not a number from 1 to 65535"
    path = re.match(r"[^?#]*", tail)[0]  # type: ignore[index]
    if path not in ("", "/"):
        return "it has a path (the base URI ends after the host and port)"
    if tail[len(path) :].startswith("?"):
        return "it has a query"
    if tail[len(path) :]:
        return "it has a fragment"
    return None


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def service_uri_set(value: Any) -> bool:
    """Whether the patch's predicate reads the option as set: a base URI of the service (an unset or invalid
    value is not delegated, in Phorge's web, its daemons and this service alike)."""
    return value is not None and value != "" and service_uri_problem(value) is None


def fork_owner(value: Any) -> bool | None:
    """The fork's owner option as the fork reads it: True (`gorge`), False (`phorge`), None for a value the
    fork refuses (compared exactly, as PHP's `===`)."""
    if value == "gorge":
        return True
    if value == "phorge":
        return False
    return None


def read_switch(option: str, value: Any) -> tuple[bool | None, str]:
    """Whether this stored value of `option` turns delegation on (None: Phorge refuses the value), and the
    value as text for the pages and the log: never the URI itself (it may carry credentials)."""
    if option == FORK_OWNER:
        text = value if isinstance(value, str) else repr(value)
        return fork_owner(value), repr(text[:OWNER_SHOWN_MAX])
    if value is None or value == "":
        return False, "not set"
    problem = service_uri_problem(value)
    if problem is None:
        return True, "set"
    return False, f"invalid: {problem}"


def first_switch(
    stored: Callable[[str], tuple[Any, str, Any] | None],
) -> tuple[str, bool | None, Any, str, str] | None:
    """The switch option that decides, from `stored` (option -> (source, where, value) where it is set):
    (option, on or None when Phorge refuses the value, source, where, value as text); None when neither is
    set. The fork's owner decides unless it is `auto`, which leaves it to the URI, as the fork does."""
    for option in DELEGATION_KEYS:
        found = stored(option)
        if found is None or (option == FORK_OWNER and found[2] == "auto"):
            continue
        on, shown = read_switch(option, found[2])
        return option, on, found[0], found[1], shown
    return None


@dataclass(frozen=True)
class Delegation:
    """What Phorge's PHP does with a new request, as this service reads Phorge's settings: "delegated" (no
    HeraldWebhookWorker task, the request is this service's alone), "not delegated" (PHP schedules its task
    as upstream Phorge does) or "unknown"; `why` says what decided, in words for people."""

    state: DelegationState
    why: str

    @property
    def line(self) -> str:
        return f"PHP delivery: {self.state} ({self.why})"


def decide(
    option: str, switch: bool | None, switch_where: str, silent: bool | None, silent_where: str, shown: str = ""
) -> Delegation:
    """The patch's predicate: delegated when the switch is on and silent mode is off; `shown` is the switch's
    value as text (read_switch), which says why an invalid value is not delegated."""
    named = f"{option} = 'gorge'" if option == FORK_OWNER else f"{option} is set"
    if switch is None:
        if option == FORK_OWNER:
            return Delegation(
                "unknown", f"{option} is neither 'gorge', 'phorge' nor 'auto' ({switch_where}): Phorge refuses it"
            )
        return Delegation("unknown", f"{option} cannot be told: {switch_where}")
    if not switch:
        unset = f"{option} is not 'gorge'" if option == FORK_OWNER else f"{option} is not set"
        if shown.startswith("invalid"):
            unset = f"{option} is {shown}, which Phorge's web and its daemons read as not set"
        return Delegation(
            "not delegated",
            f"{unset} ({switch_where}): Phorge's PHP worker gets a task for every request and the requests "
            "with a task are left to it",
        )
    if silent is None:
        return Delegation("unknown", f"{named} ({switch_where}), but phabricator.silent is unknown")
    if silent:
        return Delegation(
            "not delegated",
            f"{named} ({switch_where}), but phabricator.silent is on ({silent_where}): Phorge's PHP worker "
            "fails every request (hook/silent), as this service does",
        )
    return Delegation(
        "delegated",
        f"{named} ({switch_where}) and phabricator.silent is off: Phorge schedules no HeraldWebhookWorker "
        "task, this service delivers every request",
    )
