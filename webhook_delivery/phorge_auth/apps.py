from django.apps import AppConfig


class PhorgeAuthConfig(AppConfig):
    name = "webhook_delivery.phorge_auth"
    label = "phorge_auth"
    verbose_name = "Sign in with Phorge"
    default_auto_field = "django.db.models.BigAutoField"
