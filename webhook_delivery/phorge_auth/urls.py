from django.urls import path

from . import ended, views

app_name = "phorge_auth"

urlpatterns = [
    path("login/", views.start, name="login"),
    path("callback/", views.callback, name="callback"),
    path("ended/", ended.ended, name="ended"),
]
