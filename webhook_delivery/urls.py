from django.urls import path, re_path

from . import api, views

app_name = "webhook_delivery"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    # Everything under the prefix reaches the API's own router, so authentication runs before routing.
    re_path(r"^api/webhook(?:/(?P<rest>.*))?$", api.dispatch, name="api"),
]
