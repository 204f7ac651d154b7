"""Whether Phorge hands webhook delivery to this service: the predicate of contrib/phorge's patch
(`gorge.webhook.uri` set and `phabricator.silent` off), read from the settings the service already reads.

The soulteary/phorge fork has a switch of its own: its newer revisions ask their service registry whether
`webhook` is owned by `gorge` (PhabricatorGorgeServiceSpec::getOwner()): `gorge.webhook.owner` set to
`gorge` or `phorge` decides; unset or `auto`, the owner is `gorge` exactly when `gorge.webhook.uri` is a
non-empty string; any other value makes Phorge itself fail, so it is unknown here. Pure: the values come
from config.py's layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

SERVICE_URI = "gorge.webhook.uri"
FORK_OWNER = "gorge.webhook.owner"
DELEGATION_KEYS = (FORK_OWNER, SERVICE_URI)  # in the order they decide
OWNER_SHOWN_MAX = 40

DelegationState = Literal["delegated", "not delegated", "unknown"]


def service_uri_set(value: Any) -> bool:
    """Whether Phorge reads the option as set: the patch's options class accepts only an http(s) URI with a
    host, and Phorge replaces anything else by the default (unset); an empty string is unset too."""
    if not isinstance(value, str) or not value:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


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
    on = service_uri_set(value)
    if on:
        return on, "set"
    if value is None or value == "":
        return on, "not set"
    return on, "not an http(s) URI with a host, which Phorge replaces by its default: not set"


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


def decide(option: str, switch: bool | None, switch_where: str, silent: bool | None, silent_where: str) -> Delegation:
    """The patch's predicate: delegated when the switch is on and silent mode is off."""
    named = f"{option} = 'gorge'" if option == FORK_OWNER else f"{option} is set"
    if switch is None:
        if option == FORK_OWNER:
            return Delegation(
                "unknown", f"{option} is neither 'gorge', 'phorge' nor 'auto' ({switch_where}): Phorge refuses it"
            )
        return Delegation("unknown", f"{option} cannot be told: {switch_where}")
    if not switch:
        unset = f"{option} is not 'gorge'" if option == FORK_OWNER else f"{option} is not set"
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
