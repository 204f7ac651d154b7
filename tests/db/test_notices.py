"""Requeue notices (records/notices.py): a notice left as a worker starts is taken by that worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from webhook_delivery.records.models import RequeueNotice
from webhook_delivery.records.notices import CLOCK_SLACK, RequeueNotices, announce

pytestmark = pytest.mark.django_db


def test_a_notice_left_after_the_start_but_before_the_first_read_is_taken() -> None:
    assert announce({"PHID-HWBH-before": 5})
    RequeueNotice.objects.update(created_at=datetime.now(UTC) - CLOCK_SLACK - timedelta(seconds=5))
    notices = RequeueNotices()  # the worker starts
    assert announce({"PHID-HWBH-started": 7, "PHID-HWBH-other": 9})  # its first action, carried out at once
    assert announce({"PHID-HWBH-started": 3})
    assert notices.take() == {"PHID-HWBH-started": 3, "PHID-HWBH-other": 9}, "none dropped, the lowest id"
    assert notices.take() == {}
    assert announce({"PHID-HWBH-later": 11})
    assert notices.take() == {"PHID-HWBH-later": 11}


def test_notices_from_before_the_start_are_left_to_the_start_up_sweep() -> None:
    assert announce({"PHID-HWBH-before": 5})
    RequeueNotice.objects.update(created_at=datetime.now(UTC) - CLOCK_SLACK - timedelta(seconds=5))
    notices = RequeueNotices()
    assert notices.take() == {}
