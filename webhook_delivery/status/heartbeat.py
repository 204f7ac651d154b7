"""Writes a worker's heartbeat row (default database). Failures are logged and never stop delivery."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from datetime import UTC, datetime

from django.db import DatabaseError

from ..state import WorkerState
from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)


WORKER_ID_MAX = WorkerHeartbeat._meta.get_field("worker_id").max_length or 200


def worker_id(hostname: str, pid: int) -> str:
    """`host:pid:suffix`, readable where it is shown; the random suffix keeps a restart that reuses the pid
    (a container's pid 1) apart from the process before it. A long hostname is cut to fit the column."""
    tail = f":{pid}:{secrets.token_hex(3)}"
    return f"{hostname[: WORKER_ID_MAX - len(tail)]}{tail}"


class Heartbeat:
    def __init__(self) -> None:
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.worker_id = worker_id(self.hostname, self.pid)
        self._failing = False

    def publish(self, state: WorkerState) -> None:
        try:
            WorkerHeartbeat.objects.update_or_create(
                worker_id=self.worker_id,
                defaults={
                    "hostname": self.hostname,
                    "pid": self.pid,
                    "started_at": self.started_at,
                    "last_seen": datetime.now(UTC),
                    "state": state,
                },
            )
            if self._failing:
                logger.info("worker heartbeat written again")
            self._failing = False
        except DatabaseError:
            if not self._failing:
                logger.warning("cannot write the worker heartbeat to Django's database (DATABASE_URL)")
            self._failing = True

    def retire(self) -> None:
        try:
            WorkerHeartbeat.objects.filter(worker_id=self.worker_id).delete()
        except DatabaseError:
            logger.warning("cannot remove the worker heartbeat")
