from __future__ import annotations

from datetime import UTC, datetime

from django.db import models


class WorkerHeartbeat(models.Model):
    """One row per deliver_webhooks process; `state` is the JSON snapshot documented in state.py (WorkerState)."""

    worker_id = models.CharField(max_length=200, unique=True, verbose_name="worker ID")
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField(verbose_name="PID")
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    state = models.JSONField(default=dict)
    # Added in 0.2.0. A default in the database, not only in Django, so that a worker of a release without
    # this column still inserts its rows: it is shown as an unknown version.
    version = models.CharField(max_length=64, blank=True, db_default="")

    class Meta:
        ordering = ["-last_seen"]

    def __str__(self) -> str:
        return self.worker_id


class DeliveryAttempt(models.Model):
    """One processing of a Phorge webhook request by a worker: an HTTP attempt, or a refusal without a call
    (a refused URI, a disabled hook, ...). Phorge keeps only the last result of a request; this keeps each.

    Never our request body or signature (Phorge can rebuild both), never a URI or a key; the first bytes of
    the receiver's answer only when GORGE_WEBHOOK_ATTEMPT_LOG_BODY_BYTES asks for them.
    """

    request_phid = models.CharField(max_length=64, db_index=True, verbose_name="request PHID")
    hook_phid = models.CharField(max_length=64, verbose_name="hook PHID")
    object_phid = models.CharField(max_length=64, verbose_name="object PHID")
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    status = models.CharField(max_length=16)  # what the row became: queued, sent or failed
    result = models.CharField(max_length=16)  # okay, fail, or none (no call)
    error_type = models.CharField(max_length=16)
    error_code = models.CharField(max_length=64)
    http_status = models.PositiveSmallIntegerField(null=True, verbose_name="HTTP status")
    response_bytes = models.PositiveIntegerField(null=True)
    redirects = models.PositiveSmallIntegerField(default=0)
    worker_id = models.CharField(max_length=200, verbose_name="worker ID")
    response_prefix = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        # (started_at, result) serves the retention purge and covers the dashboard chart's grouped read;
        # (started_at, id) is the admin list's order, read through the index a page at a time.
        indexes = [
            models.Index(fields=["hook_phid", "started_at"]),
            models.Index(fields=["started_at", "result"]),
            models.Index(fields=["started_at", "id"], name="attempt_list_order"),
        ]

    def __str__(self) -> str:
        return f"{self.request_phid} {self.started_at:%Y-%m-%d %H:%M:%S}"


class BreakerEvent(models.Model):
    """A hook entering Phorge's error backoff (too many failed attempts in the window), as a worker saw it."""

    hook_phid = models.CharField(max_length=64, verbose_name="hook PHID")
    entered_at = models.DateTimeField()
    until = models.DateTimeField()
    worker_id = models.CharField(max_length=200, verbose_name="worker ID")

    class Meta:
        ordering = ["-entered_at"]
        indexes = [models.Index(fields=["hook_phid", "entered_at"])]

    def __str__(self) -> str:
        return f"{self.hook_phid} {self.entered_at:%Y-%m-%d %H:%M:%S}"


class RequeueNotice(models.Model):
    """`requeue_webhooks` put failed requests of a hook back in the queue, the lowest at `lowest_id`.

    Running workers read these to look again below where their queue window has already read, so
    requeued requests go out within seconds rather than at the window's next full sweep.
    """

    hook_phid = models.CharField(max_length=64, verbose_name="hook PHID")
    lowest_id = models.PositiveBigIntegerField(verbose_name="lowest ID")
    created_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.hook_phid} from {self.lowest_id}"


class HookHold(models.Model):
    """An operator held this hook (`manage.py hold_webhooks`): workers claim none of its requests, which stay
    queued in Phorge, untouched, until the hold is released. Reason and author are untrusted text, checked
    by status.holds before they are stored."""

    hook_phid = models.CharField(max_length=64, unique=True, verbose_name="hook PHID")
    reason = models.CharField(max_length=200, blank=True)
    held_by = models.CharField(max_length=150)
    held_at = models.DateTimeField()

    class Meta:
        ordering = ["held_at", "id"]

    def __str__(self) -> str:
        return f"{self.hook_phid} held by {self.held_by}"


class OperatorAction(models.Model):
    """What an operator asked for: hold or release a hook, requeue failed requests (of a hook, or one), make a
    hook's requests waiting on their retry backoff due at once (retry now).

    The dashboard only writes these (never Phorge's tables): a worker, which holds the grant, takes a pending
    one, carries it out and records what came of it. The commands (`hold_webhooks`, `requeue_webhooks`) do it
    themselves and write the row done, by `cli`. Who, why and what came of it are untrusted text, checked
    before they are stored (records/holds.py) and escaped where shown.
    """

    HOLD, RELEASE, REQUEUE, RETRY = "hold", "release", "requeue", "retry"
    PENDING, TAKEN, DONE, NOT_DONE, EXPIRED = "pending", "taken", "done", "not-done", "expired"
    KINDS = [(HOLD, "hold"), (RELEASE, "release"), (REQUEUE, "requeue"), (RETRY, "retry now")]
    STATES = [(PENDING, "pending"), (TAKEN, "taken"), (DONE, "done"), (NOT_DONE, "not done"), (EXPIRED, "expired")]

    kind = models.CharField(max_length=16, choices=KINDS)
    hook_phid = models.CharField(max_length=64, blank=True, verbose_name="hook PHID")  # blank: every hook (cli)
    request_phid = models.CharField(max_length=64, blank=True, verbose_name="request PHID")
    reason = models.CharField(max_length=200, blank=True)
    choices = models.JSONField(default=dict)  # a requeue's selection: since, until, errors, request ids
    requested_by = models.CharField(max_length=150)
    requested_from = models.CharField(max_length=200, blank=True)  # the client's address; user@host for cli
    requested_at = models.DateTimeField()
    form_key = models.CharField(max_length=64, unique=True)  # one per form shown: a double submit is one action
    state = models.CharField(max_length=16, choices=STATES, default=PENDING)
    taken_by = models.CharField(max_length=200, blank=True, verbose_name="carried out by")  # a worker, or cli
    taken_at = models.DateTimeField(null=True)
    done_at = models.DateTimeField(null=True)
    requeued = models.PositiveIntegerField(null=True)
    outcome = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        indexes = [
            models.Index(fields=["state", "requested_at"]),
            models.Index(fields=["hook_phid", "requested_at"]),
            models.Index(fields=["requested_by", "kind", "requested_at"]),
        ]
        permissions = [("operate_webhooks", "Can operate webhooks: hold, release and requeue from the dashboard")]

    def __str__(self) -> str:
        return f"{self.kind} {self.request_phid or self.hook_phid or 'every hook'} by {self.requested_by}"

    @property
    def pending(self) -> bool:
        return self.state in (self.PENDING, self.TAKEN)

    @property
    def what(self) -> str:
        """The action in words, with a requeue's choices: `requeue 3 requests shown, http/503, failed since
        2026-12-03 09:00:00 UTC`."""
        if self.kind == self.RETRY:
            return "retry now"
        if self.kind != self.REQUEUE:
            return self.kind
        if self.request_phid:
            return "requeue one request"
        choices = self.choices if isinstance(self.choices, dict) else {}
        ids = choices.get("ids")
        parts = ["requeue" if ids is None else f"requeue {len(ids)} request{'' if len(ids) == 1 else 's'} shown"]
        parts += [str(error) for error in choices.get("errors") or []]
        for key, word in (("since", "failed since"), ("until", "until")):
            if isinstance(choices.get(key), int) and choices[key]:
                parts.append(f"{word} {datetime.fromtimestamp(choices[key], UTC):%Y-%m-%d %H:%M:%S} UTC")
        return ", ".join(parts)


class ActionQuota(models.Model):
    """One row per user who asked for an action from the pages: the lock that makes counting the user's recent
    actions and writing the new one a single step (records/actions.ask), whatever the number of web workers."""

    requested_by = models.CharField(max_length=150, unique=True)
    touched_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.requested_by


class RetryOrder(models.Model):
    """Retry now: a hook's queued requests whose last attempt failed at or before `failed_up_to` (Phorge's
    clock) are due at once, whatever their retry backoff says; workers read these at each heartbeat. Phorge's
    rows are not changed. From `lapses_at` (that moment plus the retry backoff) Phorge's own rule makes them
    due, and the order means nothing more. One row per hook, raised by each new order."""

    hook_phid = models.CharField(max_length=64, unique=True, verbose_name="hook PHID")
    failed_up_to = models.BigIntegerField()
    lapses_at = models.BigIntegerField(db_index=True)
    asked_by = models.CharField(max_length=150)
    asked_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.hook_phid} up to {self.failed_up_to}"


class HeraldTally(models.Model):
    """The counts of one Phorge herald database's retained requests, kept by one process at a time so that no
    page or JSON answer recounts the history (reads/tally.py says what they count; records/tally.py keeps this
    row). `as_of` is Phorge's database clock at the last refresh: every count is exact as of then."""

    source = models.CharField(max_length=255, unique=True)  # which herald database: engine, host, port, name
    as_of = models.BigIntegerField(null=True)
    complete = models.BooleanField(default=False)  # False while the history is still being counted
    refreshed_at = models.DateTimeField(null=True)
    next_at = models.DateTimeField(null=True)  # no refresh before this: the rate bound
    holder = models.CharField(max_length=200, blank=True)  # the process refreshing now
    held_until = models.DateTimeField(null=True)
    key_status = models.BooleanField(null=True)  # whether Phorge's table has key_status (status, id)
    cost = models.JSONField(default=dict)  # what the last refresh read: statements, ids, seconds
    state = models.JSONField(default=dict)  # the refresher's own bookkeeping (tally_refresh.py)
    settled = models.JSONField(default=dict)  # per hook: the settled requests of every chunk, summed
    waiting = models.JSONField(default=dict)  # per hook: the queued requests as of as_of
    refusals = models.JSONField(default=list)  # the newest failures without a call: [dateModified, id, hook]
    attempts = models.JSONField(default=dict)  # the attempt log's chart and latency (reads/attempt_digest.py)

    def __str__(self) -> str:
        return self.source


class TallyChunk(models.Model):
    """The settled requests of ids number * 10,000 .. number * 10,000 + 9,999 of a tally's database, per hook."""

    tally = models.ForeignKey(HeraldTally, on_delete=models.CASCADE, related_name="chunks")
    number = models.PositiveIntegerField()
    hooks = models.JSONField(default=dict)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tally", "number"], name="tally_chunk_number")]

    def __str__(self) -> str:
        return f"{self.tally_id}/{self.number}"
