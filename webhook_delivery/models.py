"""Phorge's herald webhook tables, column for column (Phorge owns them: managed = False, no migrations).

Times are unix seconds written by the application, never Django date fields; `properties` is PHP
json_encode text and stays a TextField (a JSONField would normalise it). Secret columns (webhookURI,
hmacKey) are deferred by the default manager so no page or admin view loads them by accident.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .phorge.herald import HOOKS, REQUESTS, HookStatus, RequestResult, RequestStatus, text


class BinaryTextField(models.CharField):  # type: ignore[type-arg]
    """A varbinary column holding ASCII text (PHIDs, policies): the MySQL driver returns bytes."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return text(value) if isinstance(value, (bytes, bytearray, memoryview)) else value


class PhorgeIsReadOnly(RuntimeError):
    """An ORM write to one of Phorge's tables: webhook_delivery.worker.store writes, through its own guarded SQL."""


class ReadOnlyQuerySet(models.QuerySet):  # type: ignore[type-arg]
    """Every ORM way to write refuses: the read-only rule held by the structure, not by convention."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise PhorgeIsReadOnly(f"{self.model.__name__} is Phorge's table: the ORM never writes it")

    create = get_or_create = update_or_create = bulk_create = bulk_update = update = delete = _refuse


class ReadOnlyManager(models.Manager.from_queryset(ReadOnlyQuerySet)):  # type: ignore[misc]
    pass


class ReadOnlyModel(models.Model):
    objects: ReadOnlyManager = ReadOnlyManager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise PhorgeIsReadOnly(f"{type(self).__name__} is Phorge's table: the ORM never writes it")

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise PhorgeIsReadOnly(f"{type(self).__name__} is Phorge's table: the ORM never writes it")


class WithoutSecretsManager(ReadOnlyManager):
    def get_queryset(self) -> models.QuerySet[Any]:
        queryset: models.QuerySet[Any] = super().get_queryset()
        return queryset.defer("webhook_uri", "hmac_key")


class HeraldWebhook(ReadOnlyModel):
    id = models.AutoField(primary_key=True, verbose_name="ID")
    phid = BinaryTextField(max_length=64, unique=True, verbose_name="PHID")
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
        db_table = HOOKS
        ordering = ["id"]
        verbose_name = "webhook"

    def __str__(self) -> str:
        return f"{self.name} ({self.phid})"


class HeraldWebhookRequest(ReadOnlyModel):
    id = models.AutoField(primary_key=True, verbose_name="ID")
    phid = BinaryTextField(max_length=64, unique=True, verbose_name="PHID")
    webhook_phid = BinaryTextField(max_length=64, db_column="webhookPHID", verbose_name="webhook PHID")
    object_phid = BinaryTextField(max_length=64, db_column="objectPHID", verbose_name="object PHID")
    status = models.CharField(max_length=32, choices=RequestStatus.choices)
    properties = models.TextField()
    last_request_result = models.CharField(max_length=32, db_column="lastRequestResult", choices=RequestResult.choices)
    last_request_epoch = models.PositiveIntegerField(db_column="lastRequestEpoch")
    date_created = models.PositiveIntegerField(db_column="dateCreated")
    date_modified = models.PositiveIntegerField(db_column="dateModified")

    class Meta:
        managed = False
        db_table = REQUESTS
        ordering = ["-id"]
        verbose_name = "webhook request"

    def __str__(self) -> str:
        return str(self.phid)
