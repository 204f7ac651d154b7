"""models.py: the models match Phorge's real tables column for column, and no ORM write reaches them."""

from __future__ import annotations

import pytest
from django.db import connections

from tests.support.helpers import PHORGE_DB
from webhook_delivery.models import HeraldWebhook, HeraldWebhookRequest


@PHORGE_DB
@pytest.mark.parametrize("model", [HeraldWebhook, HeraldWebhookRequest])
def test_models_match_phorge_tables_column_for_column(model: type) -> None:
    connection = connections["phorge"]
    table = model._meta.db_table  # type: ignore[attr-defined]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, CHARACTER_MAXIMUM_LENGTH, COLUMN_KEY "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (table,),
        )
        actual = cursor.fetchall()
    fields = model._meta.concrete_fields  # type: ignore[attr-defined]
    assert [f.column for f in fields] == [row[0] for row in actual]
    expected_types = {
        "AutoField": "int(10) unsigned",
        "PositiveIntegerField": "int(10) unsigned",
        "BinaryTextField": "varbinary",
        "CharField": "varchar",
        "TextField": "longtext",
    }
    for field, (column, column_type, nullable, max_length, key) in zip(fields, actual, strict=True):
        kind = type(field).__name__
        assert column_type.startswith(expected_types[kind]), (column, column_type, kind)
        assert nullable == "NO" and not field.null, column
        if kind in ("BinaryTextField", "CharField"):
            assert field.max_length == max_length, column
        assert field.unique == (key in ("PRI", "UNI")), column


@pytest.mark.django_db(transaction=True, databases=["default", "phorge"])
def test_every_orm_write_to_phorges_tables_is_refused() -> None:
    """Phorge owns these tables: only webhook_delivery.worker.store writes, through its guarded SQL."""
    from gorge_site.routers import PhorgeRouter
    from webhook_delivery.models import PhorgeIsReadOnly

    assert PhorgeRouter().db_for_write(HeraldWebhook) == "phorge"
    assert not PhorgeRouter().allow_migrate("phorge", "webhook_delivery")
    writes = [
        lambda: HeraldWebhook.objects.create(name="x"),
        lambda: HeraldWebhook.objects.get_or_create(name="x"),
        lambda: HeraldWebhook.objects.update_or_create(name="x"),
        lambda: HeraldWebhook.objects.bulk_create([HeraldWebhook(name="x")]),
        lambda: HeraldWebhook.objects.filter(name="x").update(name="y"),
        lambda: HeraldWebhook.objects.all().delete(),
        lambda: HeraldWebhookRequest.objects.filter(id=1).update(status="sent"),
        lambda: HeraldWebhookRequest.objects.all().delete(),
        lambda: HeraldWebhookRequest(status="sent").save(),
        lambda: HeraldWebhook(name="x").delete(),
    ]
    for write in writes:
        with pytest.raises(PhorgeIsReadOnly):
            write()
