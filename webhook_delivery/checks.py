"""System checks: configuration problems are reported by manage.py check and stop every command."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.checks import CheckMessage, Error, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

from .config import CLUSTER_KEY, CLUSTER_VARIABLE, LOCAL_CONFIG_VARIABLE, DeliveryConfig
from .phorge.cabundle import ARCANIST_VARIABLE, CA_BUNDLE_VARIABLE, choose
from .phorge.config import ConfigDatabase, resolve
from .phorge.databases import Masters, PartitionMap, herald_connection
from .phorge.netguard import local_gaps
from .phorge.php_guard import PhpWorkerGuard
from .phorge.watched import LocalConfigFile
from .version import PROBLEM


@register("gorge")
def configuration(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = [Error(str(error), id="gorge.E001") for error in settings.GORGE_CONFIG_ERRORS]
    if PROBLEM is not None:
        messages.append(
            Error(PROBLEM, hint="pyproject.toml belongs beside manage.py, in the image too", id="gorge.E004")
        )
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
    messages.extend(_egress(config, deploy=False))
    messages.extend(_partitioned(config)[0])
    messages.extend(_alert_channels())
    return messages


@register("gorge", deploy=True)
def php_delivery(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`check --deploy` only: it reads Phorge's config and worker tables, which no other command (the worker's
    start included) should wait on or hold a connection to."""
    config = settings.GORGE_WEBHOOK
    egress = _egress(config, deploy=True)
    if not _partitioned(config)[1]:
        return [_delivery_info("unknown (Phorge's database did not answer)"), *egress]
    return [*_php_delivery(config), *_key_status(config), *egress]


def _egress(config: DeliveryConfig, *, deploy: bool) -> list[CheckMessage]:
    """How deliveries leave: the CA bundle in force and the proxy (`check --deploy`), and a warning when
    Phorge's install is given but arcanist, and so the bundle PHP uses, is not found beside it."""
    bundle = choose(config.trust)
    if deploy:
        proxy = "none" if config.proxy is None else config.proxy.shown
        return [
            checks.Info(
                f"https deliveries trust the CA bundle {bundle.shown} ({bundle.where}); outbound proxy: {proxy}",
                id="gorge.I002",
            )
        ]
    if bundle.origin == "unknown" and config.phorge_local_config:
        return [
            checks.Warning(
                f"the CA bundle PHP uses cannot be found: {bundle.where}",
                hint=f"mount arcanist's directory and set {ARCANIST_VARIABLE} to it, or give the bundle PHP uses in "
                f"{CA_BUNDLE_VARIABLE} (docs/operate/configuration.md)",
                id="gorge.W007",
            )
        ]
    return []


def _key_status(config: DeliveryConfig) -> list[CheckMessage]:
    """Whether Phorge's request table has the optional key_status (contrib/phorge), as the counts use it."""
    from .config import PHORGE_ALIAS
    from .reads.tally_sql import TallyReader

    try:
        present = TallyReader(connections[PHORGE_ALIAS], config).has_key_status()
    except DatabaseError:
        return []
    if present:
        text = "herald_webhookrequest has key_status (status, id): requests put back in the queue are counted at once"
        return [checks.Info(text, id="gorge.I003")]
    return [
        checks.Info(
            "herald_webhookrequest has no key_status (status, id): optional; without it the counts find requests "
            "put back in the queue from this service's requeue notices, and the rest within a sweep",
            hint="apply contrib/phorge/gorge-webhook-key-status.patch to Phorge, then ./bin/storage upgrade",
            id="gorge.I003",
        )
    ]


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


def _partitioned(config: DeliveryConfig) -> tuple[list[CheckMessage], bool]:
    """The partition warning, and whether Phorge's database answered at all."""
    try:
        warning = PartitionMap(config.namespace, configured=config.cluster).current().warning()
    except DatabaseError:
        return [], False  # an unreachable database is the worker's to report, and must not stop every command
    if warning is None:
        return [], True
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
    return [checks.Warning(warning, hint=f"{hint} (docs/operate/partitions.md)", id="gorge.W004")], True


_DELIVERY_HINTS = {
    "not delegated": "to hand delivery over: apply contrib/phorge/gorge-webhook.patch to Phorge and set "
    "gorge.webhook.uri there (docs/operate/handover.md)",
    "unknown": f"{LOCAL_CONFIG_VARIABLE}: Phorge's conf/local/local.json, where bin/config set writes "
    "gorge.webhook.uri and phabricator.silent",
}


def _delivery_info(text: str, state: str = "") -> CheckMessage:
    return checks.Info(f"PHP delivery: {text}", hint=_DELIVERY_HINTS.get(state), id="gorge.I001")


def _php_delivery(config: DeliveryConfig) -> list[CheckMessage]:
    """What Phorge's PHP does with a new request, as its settings say (contrib/phorge's predicate); a warning
    when webhook tasks are left while delivery is delegated. Read without the settings' log lines."""
    masters = Masters.single(config.namespace, herald_connection, configured=config.cluster)
    local = LocalConfigFile(config.phorge_local_config).read() if config.phorge_local_config else None
    database = ConfigDatabase(config.namespace, masters=masters)
    try:
        delegation = resolve(config, local, database.values(), database.table).delegation
        php = PhpWorkerGuard(config.namespace, masters=masters).current() if delegation.state == "delegated" else None
    except DatabaseError:
        return [_delivery_info("unknown (Phorge's database did not answer)")]
    messages = [_delivery_info(f"{delegation.state} ({delegation.why})", delegation.state)]
    if php is not None and php.active_tasks:
        messages.append(
            checks.Warning(
                f"{php.active_tasks} HeraldWebhookWorker task(s) are still in Phorge's queue although delivery is "
                "delegated: until each runs (and leaves its request queued) or is cancelled, this service leaves "
                "its request to it",
                hint="./bin/phd stop; ./bin/worker cancel --class HeraldWebhookWorker --active; ./bin/phd start "
                "(docs/operate/handover.md, step 3)",
                id="gorge.W006",
            )
        )
    return messages


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
