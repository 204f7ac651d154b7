import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gorge_site.settings")

application = get_wsgi_application()

from webhook_delivery.checks import raise_for_config_errors  # noqa: E402

raise_for_config_errors()
