from __future__ import annotations

from django.db import models


class WorkerHeartbeat(models.Model):
    """One row per deliver_webhooks process; `state` is the JSON snapshot documented in worker.py."""

    worker_id = models.CharField(max_length=200, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    state = models.JSONField(default=dict)

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.worker_id
