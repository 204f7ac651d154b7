"""The demo's hooks and queued requests, written the way Phorge writes them, and what became of them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from webhook_delivery.phorge import seeding
from webhook_delivery.phorge.phpjson import decode_properties
from webhook_delivery.phorge.seeding import random_phid

from .receiver import DemoReceiver

# A link-local cloud metadata address: Phorge's default outbound blacklist refuses it.
BLOCKED_URI = "http://169.254.169.254/latest/meta-data/"


@dataclass(frozen=True)
class HookSpec:
    name: str
    status: str
    path: str | None  # None: BLOCKED_URI
    requests: tuple[str, ...]  # request shapes, see _properties


HOOKS = (
    HookSpec("Team chat", "enabled", "/hooks/chat/ok", ("rule", "test")),
    HookSpec("Audit firehose", "firehose", "/hooks/firehose/ok", ("firehose",)),
    HookSpec("Flaky CI (fails once, retried)", "enabled", "/hooks/ci/flaky", ("rule",)),
    HookSpec("Broken receiver (HTTP 500)", "enabled", "/hooks/broken/broken", ("test",)),
    HookSpec("Disabled hook", "disabled", "/hooks/disabled/ok", ("rule",)),
    HookSpec("Cloud metadata (blocked URI)", "enabled", None, ("test",)),
)


@dataclass
class Seeded:
    hook_names: dict[str, str] = field(default_factory=dict)
    request_hooks: dict[str, str] = field(default_factory=dict)
    request_objects: dict[str, str] = field(default_factory=dict)


def _properties(shape: str, hook_phid: str, user_phid: str) -> str:
    """`properties` as Phorge's three creators write it (see the golden captures)."""
    if shape == "test":  # "New Test Request" in the web UI: the hook's own transactions, keyed by ID
        return seeding.web_test_properties(
            user_phid, {"7": random_phid("XACT", "HWBH"), "6": random_phid("XACT", "HWBH")}
        )
    xactions = [random_phid("XACT", "TASK") for _ in range(3)]
    trigger = hook_phid if shape == "firehose" else random_phid("HRUL")
    return seeding.properties(retry="forever", transactions={phid: phid for phid in xactions}, triggers=[trigger])


def seed(cursor: Any, receiver: DemoReceiver, now: int) -> Seeded:
    """Insert the demo hooks and requests with every column, as Phorge's Lisk INSERTs do."""
    seeded = Seeded()
    user_phid = random_phid("USER")
    for spec in HOOKS:
        uri = BLOCKED_URI if spec.path is None else receiver.url(spec.path)
        hook = seeding.hook_row(uri, now=now, name=spec.name, status=spec.status, edit_policy=user_phid)
        if spec.path is not None:
            receiver.expect(spec.path, hook["hmacKey"])
        seeding.insert(cursor, seeding.HOOK_TABLE, [hook])
        seeded.hook_names[hook["phid"]] = spec.name
        for shape in spec.requests:
            request = seeding.request_row(hook["phid"], _properties(shape, hook["phid"], user_phid), now=now)
            seeding.insert(cursor, seeding.REQUEST_TABLE, [request])
            seeded.request_hooks[request["phid"]] = hook["phid"]
            seeded.request_objects[request["phid"]] = request["objectPHID"]
    return seeded


@dataclass(frozen=True)
class RequestState:
    phid: str
    hook_name: str
    status: str
    result: str
    error: str
    attempts: int


def read_requests(cursor: Any, seeded: Seeded, attempts: Counter[str]) -> list[RequestState]:
    cursor.execute(
        "SELECT phid, webhookPHID, status, lastRequestResult, properties FROM herald_webhookrequest ORDER BY id"
    )
    states = []
    for phid, hook_phid, status, result, properties in cursor.fetchall():
        decoded = decode_properties(properties)
        error_type = decoded.get("errorType")
        error = f"{error_type}/{decoded.get('errorCode')}" if error_type else "-"
        states.append(
            RequestState(
                phid=phid,
                hook_name=seeded.hook_names.get(hook_phid, "?"),
                status=status,
                result=result,
                error=error,
                attempts=attempts[seeded.request_objects.get(phid, "")],
            )
        )
    return states


@dataclass(frozen=True)
class Summary:
    requests: int
    delivered: int
    failed: int
    queued: int
    retried: int
    failures: dict[str, int]
    receiver_calls: int
    signatures_valid: int
    signatures_invalid: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarize(states: list[RequestState], receiver: DemoReceiver) -> Summary:
    calls = list(receiver.calls)
    return Summary(
        requests=len(states),
        delivered=sum(1 for s in states if s.status == "sent"),
        failed=sum(1 for s in states if s.status == "failed"),
        queued=sum(1 for s in states if s.status == "queued"),
        retried=sum(1 for s in states if s.attempts > 1),
        failures=dict(sorted(Counter(s.error for s in states if s.status == "failed").items())),
        receiver_calls=len(calls),
        signatures_valid=sum(1 for c in calls if c.signature_valid),
        signatures_invalid=sum(1 for c in calls if not c.signature_valid),
    )
