"""System checks: configuration problems are reported by manage.py check and stop every command."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from .config import CLUSTER_KEY, CLUSTER_VARIABLE, LOCAL_CONFIG_VARIABLE, DeliveryConfig
from .phorge.config import LocalConfigFile
from .phorge.databases import PartitionMap
from .phorge.netguard import local_gaps


@register("gorge")
def configuration(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = [Error(str(error), id="gorge.E001") for error in settings.GORGE_CONFIG_ERRORS]
    config = settings.GORGE_WEBHOOK
    if config.lease_was_clamped:
        messages.append(
            checks.Warning(
                f"GORGE_WEBHOOK_CLAIM_LEASE_SEC: {config.requested_lease_sec} s is shorter than the delivery "
                f"timeout plus a margin; using {config.claim_lease_sec} s",
                id="gorge.W001",
            )
        )
    open_ranges = local_gaps(config.outbound_blacklist)
    if open_ranges:
        messages.append(
            checks.Warning(
                "GORGE_WEBHOOK_OUTBOUND_BLACKLIST leaves open "
                + ", ".join(open_ranges)
                + ": hooks whose host is or resolves there are called, and these reach this host or its "
                "private networks (we check AAAA records too)",
                hint="add "
                + ", ".join(gap.rsplit(" ", 1)[1] for gap in open_ranges)
                + ", as Phorge's default list has",
                id="gorge.W002",
            )
        )
    messages.extend(_phorge_settings(config))
    messages.extend(_partitioned(config))
    messages.extend(_alert_channels())
    return messages


def _alert_channels() -> list[CheckMessage]:
    """Apprise URLs Apprise cannot use (loaded only when GORGE_ALERT_URLS is set), and a Phorge token with no
    address to send it to."""
    alert = settings.GORGE_ALERT
    found: list[CheckMessage] = []
    if alert.apprise_urls:
        from .alerts.apprise_channels import problems

        found += [Error(f"GORGE_ALERT_URLS: {problem}", id="gorge.E003") for problem in problems(alert.apprise_urls)]
    if alert.phorge_token and not alert.phorge_url:
        from .phorge_auth.phorge import PhorgeUnknown, phorge_url

        try:
            phorge_url()
        except PhorgeUnknown as exc:
            found.append(
                checks.Warning(
                    f"GORGE_ALERT_PHORGE_TOKEN is set, but {exc}",
                    hint="set GORGE_ALERT_PHORGE_URL to Phorge's address (https://...)",
                    id="gorge.W005",
                )
            )
    return found


def _partitioned(config: DeliveryConfig) -> list[CheckMessage]:
    try:
        warning = PartitionMap(config.namespace, configured=config.cluster).current().warning()
    except DatabaseError:
        return []  # an unreachable database is the worker's to report, and must not stop every command
    if warning is None:
        return []
    if config.cluster is not None:
        hint = f"the map in force is from {config.cluster.origin}: it must place the applications as hoststate does"
    elif config.phorge_local_config:
        hint = (
            f"{config.phorge_local_config} has no {CLUSTER_KEY}: give Phorge's there, or in {CLUSTER_VARIABLE}, "
            "so that each application is read on its own master"
        )
    else:
        hint = (
            f"set {LOCAL_CONFIG_VARIABLE} to Phorge's conf/local/local.json (its {CLUSTER_KEY} is read), or "
            f"{CLUSTER_VARIABLE} to Phorge's {CLUSTER_KEY}, so that each application is read on its own master"
        )
    return [checks.Warning(warning, hint=f"{hint} (docs/operate/partitions.md)", id="gorge.W004")]


def _phorge_settings(config: DeliveryConfig) -> list[CheckMessage]:
    if config.phorge_local_config:
        local = LocalConfigFile(config.phorge_local_config).read()
        if local.values is None:
            return [
                Error(
                    f"{LOCAL_CONFIG_VARIABLE}: cannot read {local.path}: {local.problem}",
                    hint="give the path of Phorge's conf/local/local.json (in a container, a read-only mount)",
                    id="gorge.E002",
                )
            ]
        return []
    if config.silent is None:
        return [
            checks.Warning(
                "phabricator.silent can be known only from a value in Phorge's config database: bin/config set "
                "writes it to conf/local/local.json, which the service is not given, and while it is unknown "
                "nothing is delivered",
                hint="set GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG to Phorge's conf/local/local.json, or "
                "GORGE_WEBHOOK_SILENT=false",
                id="gorge.W003",
            )
        ]
    return []


def raise_for_config_errors() -> None:
    if settings.GORGE_CONFIG_ERRORS:
        lines = "\n".join(f"  {error}" for error in settings.GORGE_CONFIG_ERRORS)
        raise ImproperlyConfigured(f"invalid configuration:\n{lines}")
