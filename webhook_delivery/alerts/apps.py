from django.apps import AppConfig


class DeliveryAlertsConfig(AppConfig):
    name = "webhook_delivery.alerts"
    label = "delivery_alerts"
    verbose_name = "Delivery alerts"
    default_auto_field = "django.db.models.BigAutoField"
