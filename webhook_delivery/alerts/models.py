"""Alert state in Django's own database (never Phorge's): what is wrong now, what was told, to whom.

Every transition is won by one conditional UPDATE (or one INSERT on a unique key), so however many
watchers run, each condition is announced once when it starts and once when it ends.
"""

from __future__ import annotations

from django.db import models

CHANNEL_NAME_LENGTH = 255

# Every kind of condition (alerts/conditions.CONDITIONS has one object for each): the metrics show them all.
KINDS = ("receiver", "collection", "no_worker", "php_delivery", "stalled", "database")


class AlertCondition(models.Model):
    """One row per condition key (`receiver:<hook PHID>`, `collection:<hook PHID>`, `no_worker`, ...),
    reused by every episode of it; `episode` counts how often it started."""

    key = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=32)
    hook_phid = models.CharField(max_length=64, blank=True, verbose_name="hook PHID")
    hook_name = models.CharField(max_length=255, blank=True)
    active = models.BooleanField(default=True)
    episode = models.PositiveIntegerField(default=1)
    since = models.DateTimeField()  # when the condition started, as far as Phorge's tables tell
    entered_at = models.DateTimeField()  # when a watcher recorded it
    recovered_at = models.DateTimeField(null=True, blank=True)
    observed_epoch = models.BigIntegerField(default=0)  # Phorge's clock at the newest observation applied
    # Phorge's clock when it was first seen, while it has not held long enough to be told (episode not begun)
    pending_since = models.BigIntegerField(null=True, blank=True)
    # Phorge's clock when an active condition was first seen clear, while it has not been clear long enough
    clear_since = models.BigIntegerField(null=True, blank=True)
    summary = models.TextField(blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-active", "-entered_at"]
        indexes = [models.Index(fields=["active", "kind"])]

    def __str__(self) -> str:
        return self.key


class AlertNotification(models.Model):
    """One line to send on one channel; sent in a digest with every other pending line of the channel."""

    key = models.CharField(max_length=200)
    episode = models.PositiveIntegerField()
    transition = models.CharField(max_length=16)  # entered, recovered, or event (a loss)
    kind = models.CharField(max_length=32)
    channel = models.CharField(max_length=CHANNEL_NAME_LENGTH)  # email, chat, phorge, apprise:<scheme>://<host>#<n>
    subject = models.CharField(max_length=200, blank=True)  # one line: a lone notification's e-mail subject
    text = models.TextField()
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)  # sent, or given up (then given_up)
    given_up = models.BooleanField(default=False)  # the channel refused it again and again: not sent

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["key", "episode", "transition", "channel"], name="alert_once_per_channel")
        ]
        indexes = [models.Index(fields=["channel", "sent_at"])]

    def __str__(self) -> str:
        return f"{self.key} {self.transition} via {self.channel}"


class AlertChannel(models.Model):
    """A channel's sender lease (one watcher at a time sends on it) and its outage state (logged once)."""

    name = models.CharField(max_length=CHANNEL_NAME_LENGTH, unique=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    failing_since = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    last_sent_at = models.DateTimeField(null=True, blank=True)
    last_failed_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)  # failed sends in a row: the next waits longer
    retry_at = models.DateTimeField(null=True, blank=True)  # no send before this (backoff after a failure)
    refusals = models.PositiveIntegerField(default=0)  # sends in a row the channel refused as given (4xx)

    def __str__(self) -> str:
        return self.name


class AlertTask(models.Model):
    """The Phorge task of one episode of a condition: made once (the watcher that inserts the row makes
    it), commented on when the condition changes materially, resolved when it ends, left alone once someone
    else closed it."""

    CREATING = "creating"  # claimed by the watcher that inserted the row; no task in Phorge yet
    OPEN = "open"
    RESOLVED = "resolved"  # resolved by this service when the condition ended
    CLOSED = "closed"  # found closed by someone else (or gone): not touched again this episode

    key = models.CharField(max_length=200)
    episode = models.PositiveIntegerField()
    task_id = models.PositiveBigIntegerField(null=True, blank=True)  # T<id>: maniphest_task.id is `int unsigned`
    task_phid = models.CharField(max_length=64, blank=True, verbose_name="task PHID")
    uri = models.CharField(max_length=500, blank=True)  # Phorge's page of the task
    state = models.CharField(max_length=16, default=CREATING)
    claimed_until = models.DateTimeField(null=True, blank=True)  # a claim left by a dead watcher expires
    # a create whose answer never came (Phorge may have made the task): the next try looks for it first
    tried_at = models.DateTimeField(null=True, blank=True)
    told = models.JSONField(default=dict, blank=True)  # the facts the task last said (see phorge_tasks.material)
    told_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "episode"], name="alert_task_once_per_episode")]

    def __str__(self) -> str:
        return f"{self.key} #{self.episode}: {self.monogram or self.state}"

    @property
    def monogram(self) -> str:
        return f"T{self.task_id}" if self.task_id else ""


class WatchedRequest(models.Model):
    """A queued request seen close to Phorge's collection: if it disappears undelivered, it was lost."""

    request_id = models.PositiveBigIntegerField(unique=True)
    request_phid = models.CharField(max_length=64, verbose_name="request PHID")
    hook_phid = models.CharField(max_length=64, verbose_name="hook PHID")
    date_created = models.BigIntegerField()
    claimed_by = models.CharField(max_length=200, blank=True)  # the watcher that counts its loss

    def __str__(self) -> str:
        return self.request_phid


class HookLoss(models.Model):
    """Requests of a hook Phorge's garbage collection deleted before they were delivered, in all."""

    hook_phid = models.CharField(max_length=64, unique=True, verbose_name="hook PHID")
    hook_name = models.CharField(max_length=255, blank=True)
    lost_total = models.PositiveBigIntegerField(default=0)
    last_lost_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.hook_phid}: {self.lost_total}"
