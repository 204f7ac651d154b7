"""Requeue notices (default database): `requeue_webhooks` leaves one per hook, running workers read them.

Both sides are best effort: without Django's database a requeue still happens, and the workers find the
rows at their queue window's next sweep instead of within a heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from django.db import DatabaseError
from django.db.models import Max

from .models import RequeueNotice

logger = logging.getLogger(__name__)
KEPT_FOR = timedelta(days=1)
CLOCK_SLACK = timedelta(minutes=1)  # notices carry the writer's clock; rewinding a hook once too often costs nothing


def announce(lowest_ids: Mapping[str, int]) -> bool:
    """Tell running workers which hooks have requests back in the queue; False if it could not."""
    now = datetime.now(UTC)
    try:
        RequeueNotice.objects.filter(created_at__lt=now - KEPT_FOR).delete()
        RequeueNotice.objects.bulk_create(
            RequeueNotice(hook_phid=phid, lowest_id=lowest, created_at=now) for phid, lowest in lowest_ids.items()
        )
    except DatabaseError:
        return False
    return True


class RequeueNotices:
    """The notices left since this process started (made before the worker starts): what came before is
    covered by its start-up sweep; one left as it starts (a pending requeue carried out in its first second)
    is taken at its first read, whenever that read comes."""

    def __init__(self, since: datetime | None = None) -> None:
        self._since = since or datetime.now(UTC)
        self._seen: int | None = None

    def take(self) -> dict[str, int]:
        """{hook PHID: lowest requeued id} of the notices not taken yet ({} when Django's database fails)."""
        try:
            if self._seen is None:
                top = RequeueNotice.objects.aggregate(top=Max("id"))["top"] or 0
                found = RequeueNotice.objects.filter(id__lte=top, created_at__gte=self._since - CLOCK_SLACK)
                self._seen = top
            else:
                found = RequeueNotice.objects.filter(id__gt=self._seen)
            fresh = list(found.values_list("id", "hook_phid", "lowest_id"))
        except DatabaseError:
            return {}
        lowest: dict[str, int] = {}
        for notice_id, phid, lowest_id in fresh:
            self._seen = max(self._seen, notice_id)
            lowest[phid] = min(lowest.get(phid, lowest_id), lowest_id)
        return lowest
