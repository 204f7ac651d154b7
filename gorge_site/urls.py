from django.contrib import admin
from django.urls import include, path

# The admin's modules are found here, where pages are served, not when an app starts (SimpleAdminConfig):
# a worker process never loads them.
admin.autodiscover()

handler403 = "webhook_delivery.web.access.permission_denied"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("auth/phorge/", include("webhook_delivery.phorge_auth.urls")),
    path("", include("webhook_delivery.urls")),
]
