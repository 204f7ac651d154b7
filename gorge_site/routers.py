"""Send every webhook_delivery model to Phorge's herald database, and never migrate anything there."""

from __future__ import annotations

from typing import Any

from webhook_delivery.config import PHORGE_ALIAS, is_phorge_alias

PHORGE_APP = "webhook_delivery"


class PhorgeRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        if model._meta.app_label != PHORGE_APP:
            return None
        from webhook_delivery.reads.replica import read_alias  # the admin's reads may go to a replica

        return read_alias()

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        # Named for writes too, as the admin opens its (read-only) transactions there; every ORM write to
        # these models is refused by the models themselves (webhook_delivery.models.ReadOnlyQuerySet).
        return PHORGE_ALIAS if model._meta.app_label == PHORGE_APP else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        if obj1._meta.app_label == PHORGE_APP and obj2._meta.app_label == PHORGE_APP:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        # Phorge owns its schema: nothing is ever created, altered or dropped there.
        return not is_phorge_alias(db) and app_label != PHORGE_APP
