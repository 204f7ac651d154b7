"""What the web side knows of Phorge beyond its herald rows: its settings in force, whether its own PHP
worker delivers too, whether its databases are partitioned, and whether its herald database answers at
all. One reader of each per process, so their short caches spare Phorge's databases however many pages ask.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.db import DatabaseError, connections

from ..config import PHORGE_ALIAS, DeliveryConfig
from ..phorge.config import PhorgeConfig, PhorgeSettings
from ..phorge.databases import Masters, herald_connection
from ..phorge.php_guard import PhpWorkerGuard
from ..state import PhpDelivery


@functools.cache
def _masters(config: DeliveryConfig) -> Masters:
    # One reader of the partition map, and the way to each master, for the settings and the PHP guard.
    return Masters.single(config.namespace, herald_connection, configured=config.cluster)


@functools.cache
def _phorge_settings(config: DeliveryConfig) -> PhorgeSettings:
    return PhorgeSettings(config, masters=_masters(config))  # one per process and configuration, cached a few seconds


def phorge_settings(config: DeliveryConfig | None = None) -> PhorgeConfig | None:
    """Phorge's settings in force (silent mode, blacklist, base URI, retention) and where each came from, for
    `config` (the service's settings when None); None when Phorge's database is unreachable."""
    try:
        return _phorge_settings(config or settings.GORGE_WEBHOOK).current()
    except DatabaseError:
        return None


def phorge_base_uri() -> str | None:
    """Phorge's `phabricator.base-uri` (for links into its UI), when it is known."""
    resolved = phorge_settings()
    return None if resolved is None else resolved.base_uri.value


@functools.cache
def _php_guard(namespace: str) -> PhpWorkerGuard:
    masters = _masters(settings.GORGE_WEBHOOK)
    return PhpWorkerGuard(namespace, masters=masters)  # one per process, so its short cache spares the database


def php_delivery_state() -> PhpDelivery:
    """Whether Phorge's PHP HeraldWebhookWorker is delivering too, from `<ns>_worker`; while Phorge's settings
    say delivery is delegated, a task phd ran only handed its request over and is not counted (handed_over).

    Never raises: a missing grant or an unreachable database reads "unknown", never "idle".
    """
    try:
        found = _php_guard(settings.GORGE_WEBHOOK.namespace).current()
    except DatabaseError:
        return PhpDelivery.unknown("Phorge's worker database is unreachable")
    resolved = phorge_settings()
    return found.handed_over() if resolved is not None and resolved.delegation.state == "delegated" else found


def partition_warning() -> str | None:
    """What is not done because Phorge's databases are partitioned (other masters are not reached); None
    when they are not, or that is not known. Never raises."""
    try:
        return _php_guard(settings.GORGE_WEBHOOK.namespace).partitions.current().warning()
    except DatabaseError:
        return None


def phorge_database_answers() -> None:
    """Raises DatabaseError unless Phorge's herald database answers a trivial query."""
    with connections[PHORGE_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1", {})
        cursor.fetchall()
