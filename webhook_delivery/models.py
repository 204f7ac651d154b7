"""Phorge's herald webhook tables, column for column (Phorge owns them: managed = False, no migrations).

Times are unix seconds written by the application, never Django date fields; `properties` is PHP
json_encode text and stays a TextField (a JSONField would normalise it). Secret columns (webhookURI,
hmacKey) are deferred by the default manager so no page or admin view loads them by accident.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class BinaryTextField(models.CharField):  # type: ignore[type-arg]
    """A varbinary column holding ASCII text (PHIDs, policies): the MySQL driver returns bytes."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8", "replace")
        return value


class HookStatus(models.TextChoices):
    FIREHOSE = "firehose", "Firehose"
    ENABLED = "enabled", "Enabled"
    DISABLED = "disabled", "Disabled"


class RequestStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class RequestResult(models.TextChoices):
    NONE = "none", "None"
    OKAY = "okay", "Okay"
    FAIL = "fail", "Fail"


class WithoutSecretsManager(models.Manager):  # type: ignore[type-arg]
    def get_queryset(self) -> models.QuerySet[Any]:
        return super().get_queryset().defer("webhook_uri", "hmac_key")


class HeraldWebhook(models.Model):
    id = models.AutoField(primary_key=True)
    phid = BinaryTextField(max_length=64, unique=True)
    name = models.CharField(max_length=128)
    webhook_uri = models.TextField(db_column="webhookURI")
    view_policy = BinaryTextField(max_length=64, db_column="viewPolicy")
    edit_policy = BinaryTextField(max_length=64, db_column="editPolicy")
    status = models.CharField(max_length=32, choices=HookStatus.choices)
    hmac_key = models.CharField(max_length=32, db_column="hmacKey")
    date_created = models.PositiveIntegerField(db_column="dateCreated")
    date_modified = models.PositiveIntegerField(db_column="dateModified")

    objects = WithoutSecretsManager()

    class Meta:
        managed = False
        db_table = "herald_webhook"
        ordering = ["id"]
        verbose_name = "webhook"

    def __str__(self) -> str:
        return f"{self.name} ({self.phid})"


class HeraldWebhookRequest(models.Model):
    id = models.AutoField(primary_key=True)
    phid = BinaryTextField(max_length=64, unique=True)
    webhook_phid = BinaryTextField(max_length=64, db_column="webhookPHID")
    object_phid = BinaryTextField(max_length=64, db_column="objectPHID")
    status = models.CharField(max_length=32, choices=RequestStatus.choices)
    properties = models.TextField()
    last_request_result = models.CharField(max_length=32, db_column="lastRequestResult", choices=RequestResult.choices)
    last_request_epoch = models.PositiveIntegerField(db_column="lastRequestEpoch")
    date_created = models.PositiveIntegerField(db_column="dateCreated")
    date_modified = models.PositiveIntegerField(db_column="dateModified")

    class Meta:
        managed = False
        db_table = "herald_webhookrequest"
        ordering = ["-id"]
        verbose_name = "webhook request"

    def __str__(self) -> str:
        return str(self.phid)
