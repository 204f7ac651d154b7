from django.urls import path, re_path

from .web import actions, api, retry_now, views

app_name = "webhook_delivery"
PHID = r"PHID-[A-Z0-9]{4}-[A-Za-z0-9]{1,54}"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    re_path(rf"^hooks/(?P<phid>{PHID})/$", views.hook_page, name="hook"),
    re_path(rf"^hooks/(?P<phid>{PHID})/hold/$", actions.hold, name="hook_hold"),
    re_path(rf"^hooks/(?P<phid>{PHID})/release/$", actions.release, name="hook_release"),
    re_path(rf"^hooks/(?P<phid>{PHID})/requeue/$", actions.hook_requeue, name="hook_requeue"),
    re_path(rf"^hooks/(?P<phid>{PHID})/retry/$", retry_now.hook_retry, name="hook_retry"),
    re_path(rf"^requests/(?P<phid>{PHID})/$", views.request_page, name="request"),
    re_path(rf"^requests/(?P<phid>{PHID})/requeue/$", actions.requeue_request, name="request_requeue"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    # Everything under the prefix reaches the API's own router, so authentication runs before routing.
    re_path(r"^api/webhook(?:/(?P<rest>.*))?$", api.dispatch, name="api"),
]
