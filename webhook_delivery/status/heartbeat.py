"""Writes a worker's heartbeat row (default database). Failures are logged and never stop delivery."""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime

from django.db import DatabaseError

from ..state import WorkerState
from .models import WorkerHeartbeat

logger = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self) -> None:
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = datetime.now(UTC)
        self.worker_id = f"{self.hostname}:{self.pid}:{int(self.started_at.timestamp())}"
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
