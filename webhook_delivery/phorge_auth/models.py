"""The link from a Django user to the Phorge account that signed it in, keyed by Phorge's user PHID (a
user name can change in Phorge, the PHID never does). Kept in Django's `default` database."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class PhorgeAccount(models.Model):
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="phorge_account")
    phid = models.CharField(max_length=64, unique=True)
    user_name = models.CharField(max_length=255, blank=True)  # as last seen in Phorge, for reading only
    # Phorge's access tokens never expire: the token is kept encrypted (Fernet, key derived from SECRET_KEY),
    # is never shown in the admin (the model is not registered) and is cleared when Phorge refuses it.
    token_encrypted = models.TextField(blank=True, editable=False)
    checked_at = models.DateTimeField()  # the last time Phorge was asked (sign-in or re-check)
    unreachable_since = models.DateTimeField(null=True, blank=True)  # first failed re-check of a failing run
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "Phorge account"

    def __str__(self) -> str:
        return self.phid

    def __repr__(self) -> str:
        return f"<PhorgeAccount {self.phid}>"
