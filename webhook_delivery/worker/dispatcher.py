"""Decide and perform one claimed request, in the order Phorge's HeraldWebhookWorker checks things.

No database here: the worker passes in the row, its decoded properties and the hook, and writes back the
Outcome this returns.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..config import DeliveryConfig, IPNetwork
from ..phorge.cabundle import CaBundle, CaBundleFile
from ..phorge.delivery_id import HEADER as DELIVERY_ID_HEADER
from ..phorge.herald import Hook, RequestRow
from ..phorge.netguard import InvalidURI, Resolver, TemporaryDNSFailure, system_resolver
from ..phorge.outcomes import (
    DISABLED,
    INVALID_OBJECT,
    INVALID_URI,
    NOT_FOUND,
    SILENT,
    Outcome,
    configuration_failure,
    from_http,
    retries_forever,
)
from ..phorge.payload import build_payload, sign, transactions_newest_first
from . import metrics, transport

logger = logging.getLogger(__name__)
_HEADER_VALUE = re.compile(r"[\x21-\x7e]{1,255}")  # visible ASCII: a PHID, never a line break


class UnsendableRequest(Exception):
    """The stored request cannot be turned into Phorge's payload: nothing was sent."""


def _reason(exc: BaseException) -> str:
    """One line saying why, for the log: the exception's type and, shortened, its message."""
    message = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class SilentModeUnknown(Exception):
    """Phorge's `phabricator.silent` cannot be determined: nothing may be sent or failed."""


class ObjectLookup(Protocol):
    def transactions(self, object_phid: str, stored: Any) -> list[Any] | None:
        """Existing transactions newest first, or None when the object no longer exists."""


class StoredOrder:
    """Without access to Phorge's application databases: trust the stored list, in PHP's order."""

    def transactions(self, object_phid: str, stored: Any) -> list[Any] | None:
        return transactions_newest_first(stored)


class Dispatcher:
    def __init__(
        self,
        config: DeliveryConfig,
        *,
        resolver: Resolver = system_resolver,
        silent: Callable[[], bool | None] | None = None,
        blacklist: Callable[[], Sequence[IPNetwork]] | None = None,
        ca_bundle: Callable[[], CaBundle] | None = None,
        objects: ObjectLookup | None = None,
    ) -> None:
        self.config = config
        self.resolver = resolver
        self.silent = silent or (lambda: config.silent)
        self.blacklist = blacklist or (lambda: config.outbound_blacklist)
        self.ca_bundle = ca_bundle or CaBundleFile(config.trust).current
        self.objects = objects or StoredOrder()
        self.handles = transport.Handles()  # libcurl's, one set per hook, with the connections they keep

    def close(self) -> None:
        """Close the kept handles and their connections; a later delivery opens new ones."""
        self.handles.close()

    def process(
        self, row: RequestRow, properties: dict[str, Any], hook: Hook | None, *, started: float | None = None
    ) -> Outcome:
        """One processing, as PHP's worker checks and sends; the attempt's deadline runs from `started`
        (the claim). Raises UnsendableRequest, before any call, when no payload can be built, and
        SilentModeUnknown when Phorge's silent mode cannot be told."""
        if hook is None:
            return configuration_failure(NOT_FOUND)
        silent = self.silent()
        if silent is None:
            raise SilentModeUnknown
        if silent:
            return configuration_failure(SILENT)
        if hook.status == "disabled":
            return configuration_failure(DISABLED)
        began = time.monotonic()
        deadline = transport.Deadline.after(self.config.delivery_timeout, started=started)
        try:
            blacklist = self.blacklist()
            try:
                first_hop = transport.check_uri(hook.uri, blacklist, self.resolver, deadline)
            except (TemporaryDNSFailure, TimeoutError) as exc:  # the deadline, from the claim, may be gone already
                return from_http(transport.failure(exc, deadline), retry_forever=retries_forever(properties))
            body = self._payload(row, properties)
            if body is None:
                return configuration_failure(INVALID_OBJECT)
            http = transport.post(
                hook.uri,
                body,
                sign(body, hook.hmac_key),
                handles=self.handles,
                owner=hook.phid,
                first_hop=first_hop,
                blacklist=blacklist,
                deadline=deadline,
                ca=self.ca_bundle(),
                proxy=self.config.proxy,
                resolver=self.resolver,
                keep_body=self.config.attempt_log_body_bytes if self.config.attempt_log else 0,
                extra_headers=self._delivery_id(row, hook),
            )
            metrics.ATTEMPT_SECONDS.observe(time.monotonic() - began)
        except InvalidURI as exc:
            logger.warning(
                "webhook URI refused",
                extra={"event": "delivery.refused", "request": row.phid, "hook": hook.phid, "reason": str(exc)},
            )
            return configuration_failure(INVALID_URI)
        return from_http(http, retry_forever=retries_forever(properties))

    def _payload(self, row: RequestRow, properties: dict[str, Any]) -> bytes | None:
        """Phorge's payload; None when the object no longer exists. Raises UnsendableRequest."""
        try:  # the stored transactionPHIDs are read here already (their order): bad ones are unsendable
            transactions = self.objects.transactions(row.object_phid, properties.get("transactionPHIDs"))
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            raise UnsendableRequest(f"no payload can be built: {_reason(exc)}") from exc
        if transactions is None:
            return None
        try:
            return build_payload(
                object_phid=row.object_phid,
                properties=properties,
                date_created=row.date_created,
                transaction_phids=transactions,
            )
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            raise UnsendableRequest(f"no payload can be built: {type(exc).__name__}") from exc

    def _delivery_id(self, row: RequestRow, hook: Hook) -> tuple[tuple[str, str], ...]:
        """The opt-in `webhook-id` header: the request's PHID, the same on every retry and redelivery."""
        chosen = self.config.delivery_id_hooks
        if chosen is None or not chosen.applies_to(hook.phid):
            return ()
        if not _HEADER_VALUE.fullmatch(row.phid):  # a receiver that deduplicates must never get another id
            raise UnsendableRequest(f"the request PHID cannot be sent as the {DELIVERY_ID_HEADER} header")
        return ((DELIVERY_ID_HEADER, row.phid),)
