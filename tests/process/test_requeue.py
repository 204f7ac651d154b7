"""`manage.py requeue_webhooks`: failed requests back to the queue, exactly the ones selected, delivered once.

Here: what runs real processes or MariaDB servers of its own; the rest is in tests/db/test_requeue.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helpers import PHORGE_DB, Phorge, failed, with_event, worker_env
from tests.support.processes import SiteDatabase, manage
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = PHORGE_DB


@pytest.mark.slow
def test_a_running_worker_delivers_requeued_requests_without_waiting_for_its_sweep(
    phorge: Phorge, workers: Any, site: SiteDatabase
) -> None:
    """The worker's window has read past the failed rows; the command's notice sends it back for them
    (its own full sweep comes only every ten minutes)."""
    with Receiver() as receiver:
        hook = phorge.hook(receiver.url("/back/ok"))
        phids = [failed(phorge, hook) for _ in range(3)]
        worker = workers("requeue", "--poll-interval-ms", "100", **site.env).start()
        probe = phorge.request(hook)  # delivered: the worker is running and its window is past the failed rows
        wait_for(lambda: phorge.row(probe)["status"] == "sent", 30, "the probe delivery")
        done = site.command("requeue_webhooks", "--hook", hook)
        assert "Requeued 3 requests." in done.stdout and "could not be told" not in done.stdout
        wait_for(lambda: all(phorge.row(p)["status"] == "sent" for p in phids), 60, "the requeued deliveries")
        assert len(receiver.requests) == 4
    assert with_event(worker.lines(), "requeue.notice_taken")


@PHORGE_DB
def test_requeue_exits_with_an_error_and_no_traceback_for_a_huge_age(phorge: Any) -> None:
    done = manage(
        "requeue_webhooks", "--since", "99999999999999999999d", "--dry-run", env=worker_env(), ok=False, timeout=60
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "--since '99999999999999999999d' is out of range" in done.stderr
