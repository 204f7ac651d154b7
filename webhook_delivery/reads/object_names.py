"""Phorge's names of the objects that the pages, the admin and the alerts show (T123, D45, rXYZabc123def456,
P12, ...): the selectors over phorge/object_names.py with the web side's Masters (web/links.py shows them)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from django.conf import settings

from ..phorge.databases import Masters
from ..phorge.names import ObjectName
from ..phorge.object_names import ObjectNames
from . import phorge_status


@functools.cache
def _resolver(namespace: str, masters: Masters) -> ObjectNames:
    # One per process and way to the masters, so that its short cache spares Phorge's databases.
    return ObjectNames(namespace, masters)


def _current() -> ObjectNames:
    config = settings.GORGE_WEBHOOK
    return _resolver(config.namespace, phorge_status._masters(config))


def object_names(phids: Iterable[str]) -> dict[str, ObjectName]:
    """Phorge's name of each of these objects (PHIDs), for a page, the admin or an alert message.

    Returns {PHID: ObjectName} for the objects that can be named: `name` (the monogram, `T123`, or the
    object's own name where its type has no monogram), `full_name` (`T123: <title>`, untrusted text to
    escape) and `path` (its page, to follow Phorge's `phabricator.base-uri`). A PHID is absent when its
    object is gone, its type is not one this service names, or its table cannot be read (no grant, a master
    this service cannot reach, SQLite): show the PHID then. One SELECT per Phorge application for the whole
    batch, cached a few seconds; never raises.
    """
    return _current().names(phids)


def object_phids(term: str) -> list[str]:
    """The PHIDs of the objects the monograms in `term` name (`T123`, `D45`, `rXYZabc12`, `R4:abc12`,
    `@alice`, ...); none for anything else. Never raises."""
    return _current().find(term)
