from django.urls import path, re_path

from .web import api, views

app_name = "webhook_delivery"
PHID = r"PHID-[A-Z0-9]{4}-[A-Za-z0-9]{1,54}"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    re_path(rf"^hooks/(?P<phid>{PHID})/$", views.hook_page, name="hook"),
    re_path(rf"^requests/(?P<phid>{PHID})/$", views.request_page, name="request"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    # Everything under the prefix reaches the API's own router, so authentication runs before routing.
    re_path(r"^api/webhook(?:/(?P<rest>.*))?$", api.dispatch, name="api"),
]
