"""The bytes Phorge's HeraldWebhookWorker sends, and their signature. Pure, no database."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .phpjson import encode_formatted

SIGNATURE_HEADER = "X-Phabricator-Webhook-Signature"
_PHID_TYPE = re.compile(r"^PHID-([^-]{4})-")


def phid_get_type(phid: str) -> str:
    """PHP phid_get_type(): the four characters after PHID-, else '????'."""
    match = _PHID_TYPE.match(phid or "")
    return match.group(1) if match else "????"


def stored_values(value: Any) -> list[Any]:
    """The values of a PHP array read from properties, list or map, in document order."""
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def transactions_newest_first(value: Any) -> list[Any]:
    """Stored transactionPHIDs in PHP's order (id DESC) when the transactions cannot be looked up.

    Test requests store an ID-keyed map: sort by ID, descending. The edit path stores a PHID-keyed map
    in application order (ascending IDs), and lists are in stored order: reverse them.
    """
    if isinstance(value, Mapping) and value and all(str(key).isdigit() for key in value):
        return [value[key] for key in sorted(value, key=int, reverse=True)]
    return list(reversed(stored_values(value)))


def build_payload(
    *,
    object_phid: str,
    properties: Mapping[str, Any],
    date_created: int,
    transaction_phids: Iterable[Any],
) -> bytes:
    document = {
        "object": {"type": phid_get_type(object_phid), "phid": object_phid},
        "triggers": [{"phid": phid} for phid in stored_values(properties.get("triggerPHIDs"))],
        "action": {
            "test": properties.get("test", False),
            "silent": properties.get("silent", False),
            "secure": properties.get("secure", False),
            "epoch": int(date_created),
        },
        "transactions": [{"phid": phid} for phid in transaction_phids],
    }
    return encode_formatted(document).encode("ascii")


def sign(body: bytes, hmac_key: str) -> str:
    return hmac.new(hmac_key.encode("utf-8"), body, hashlib.sha256).hexdigest()
