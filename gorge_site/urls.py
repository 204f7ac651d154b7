from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("auth/phorge/", include("webhook_delivery.phorge_auth.urls")),
    path("", include("webhook_delivery.urls")),
]
