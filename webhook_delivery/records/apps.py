from django.apps import AppConfig


class DeliveryStatusConfig(AppConfig):
    name = "webhook_delivery.records"
    label = "delivery_status"
    verbose_name = "Delivery workers"
    default_auto_field = "django.db.models.BigAutoField"
