"""What a Phorge answer makes of the Django user: a Phorge administrator is staff with the view
permissions (the dashboard's and the admin's) and `operate webhooks` (hold, release and requeue from the
pages), never a superuser; anyone else loses them."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import transaction
from django.utils import timezone

from .models import PhorgeAccount
from .phorge import WhoAmI, seal

VIEW_APPS = ("webhook_delivery",)  # the dashboard's permission and the read-only admin's
OPERATE = ("delivery_status", "operate_webhooks")  # web/access.OPERATE_PERMISSION


def view_permissions() -> list[Permission]:
    return list(Permission.objects.filter(content_type__app_label__in=VIEW_APPS, codename__startswith="view_"))


def operator_permissions() -> list[Permission]:
    """What a Phorge administrator is given: the view permissions, and `operate webhooks`."""
    app_label, codename = OPERATE
    operate = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
    return view_permissions() + list(operate)


USERNAME = re.compile(r"[\w.@+-]{1,150}", re.ASCII)  # Django's ASCII user-name rule, as Phorge names users


def username_for(wanted: str, phid: str, user_pk: int | None) -> str:
    """The Django user name of a Phorge account: Phorge's user name in NFKC (a fullwidth "admin" reads admin), or
    `phorge-<PHID>` when that has any other character, or is any other account's name in any letter case
    (`ADMIN` beside a local `admin` would pass for it)."""
    name = unicodedata.normalize("NFKC", wanted)
    fallback = f"phorge-{phid}"[:150]
    if not USERNAME.fullmatch(name):
        return fallback
    others = get_user_model().objects.filter(username__iexact=name)
    if user_pk is not None:
        others = others.exclude(pk=user_pk)
    return fallback if others.exists() else name


@transaction.atomic
def admit(who: WhoAmI, token: str) -> Any:
    """The Django user for this Phorge administrator, created or brought up to date, with the token stored."""
    user_model = get_user_model()
    account = PhorgeAccount.objects.select_for_update().filter(phid=who.phid).select_related("user").first()
    user = account.user if account is not None else user_model()
    user.username = username_for(who.user_name, who.phid, user.pk)
    user.first_name = who.real_name[:150]
    user.email = who.email[:254]
    user.is_active = True
    user.is_staff = True
    user.is_superuser = False
    user.set_unusable_password()  # only Phorge signs this account in
    user.save()
    user.user_permissions.set(operator_permissions())
    if account is None:
        account = PhorgeAccount(user=user, phid=who.phid)
    account.user_name = who.user_name
    account.token_encrypted = seal(token)
    account.checked_at = timezone.now()
    account.unreachable_since = None
    account.save()
    return user


@transaction.atomic
def revoke(phid: str, *, forget_token: bool) -> None:
    """Phorge says no: the linked Django user keeps nothing it could see the pages with."""
    account = PhorgeAccount.objects.select_for_update().filter(phid=phid).select_related("user").first()
    if account is None:
        return
    user = account.user
    user.is_staff = False
    user.is_superuser = False
    user.save(update_fields=["is_staff", "is_superuser"])
    user.user_permissions.clear()
    if forget_token:
        account.token_encrypted = ""
        account.save(update_fields=["token_encrypted"])
