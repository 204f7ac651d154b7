"""The bytes Phorge's HeraldWebhookWorker sends, and their signature. Pure, no database."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .phpjson import encode_formatted, encode_scalar

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
        return [value[key] for key in sorted(value, key=_transaction_id_order, reverse=True)]
    return list(reversed(stored_values(value)))


def _transaction_id_order(key: Any) -> tuple[int, str]:
    """The order of the decimal ID `key`, as int() would give it but without converting it (a key may have
    thousands of digits). A key that is a digit string only for Unicode ("²", "٣") is no transaction ID
    and gives no order: ValueError, with the reason."""
    text = str(key)
    if not text.isascii():
        raise ValueError(f"transactionPHIDs has the key {ascii(text)[:40]}, which is not a transaction ID")
    digits = text.lstrip("0")
    return len(digits), digits


def payload_document(
    *, object_phid: str, properties: Mapping[str, Any], date_created: int, transaction_phids: Iterable[Any]
) -> dict[str, Any]:
    """What HeraldWebhookWorker encodes, key order included."""
    return {
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


def _phid_list(values: list[str]) -> str:
    if not values:
        return "[]"
    # One join over the encoded values: no string per item on top of them (edits can carry 100,000s).
    return '[\n    {\n      "phid": ' + '\n    },\n    {\n      "phid": '.join(values) + "\n    }\n  ]"


def build_payload(
    *,
    object_phid: str,
    properties: Mapping[str, Any],
    date_created: int,
    transaction_phids: Iterable[Any],
) -> bytes:
    """PhutilJSON::encodeFormatted of the payload, from a template: the document always has this shape.
    Built without the document's per-transaction dicts, which for a large edit cost more than the bytes."""
    transactions = list(transaction_phids)
    epoch = int(date_created)
    scalars = [
        phid_get_type(object_phid),
        object_phid,
        properties.get("test", False),
        properties.get("silent", False),
        properties.get("secure", False),
    ]
    try:
        t, p, test, silent, secure = (encode_scalar(v) for v in scalars)
        trigger_list = _phid_list([encode_scalar(v) for v in stored_values(properties.get("triggerPHIDs"))])
        transaction_list = _phid_list([encode_scalar(v) for v in transactions])
    except TypeError:  # a stored value that is not a string, integer or boolean: the general encoder
        document = payload_document(
            object_phid=object_phid, properties=properties, date_created=epoch, transaction_phids=transactions
        )
        return encode_formatted(document).encode("ascii")
    return (
        f'{{\n  "object": {{\n    "type": {t},\n    "phid": {p}\n  }},\n  "triggers": {trigger_list},\n'
        f'  "action": {{\n    "test": {test},\n    "silent": {silent},\n    "secure": {secure},\n'
        f'    "epoch": {epoch}\n  }},\n  "transactions": {transaction_list}\n}}\n'
    ).encode("ascii")


def sign(body: bytes, hmac_key: str) -> str:
    return hmac.new(hmac_key.encode("utf-8"), body, hashlib.sha256).hexdigest()
