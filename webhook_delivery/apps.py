from django.apps import AppConfig


class WebhookDeliveryConfig(AppConfig):
    name = "webhook_delivery"
    verbose_name = "Phorge webhooks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
