"""The CA bundle PHP verifies a receiver's certificate against, found as arcanist's HTTPSFuture finds it, so
that an https hook PHP delivered is delivered here too, and one PHP refused is refused here too.

HTTPSFuture hands libcurl (CURLOPT_CAINFO) the first of: arcanist's `resources/ssl/custom.pem` when it
exists (where Phorge's administrators put a private CA), PHP's `curl.cainfo` when set, arcanist's shipped
`resources/ssl/default.pem`. Packagings that drop `default.pem` (and the `curl.cainfo` step) leave libcurl
its own store, the system's: where `default.pem` is absent, the service uses the system store too.
GORGE_WEBHOOK_CA_BUNDLE overrides all of it (`system`: the system store).

Arcanist is where GORGE_WEBHOOK_ARCANIST_ROOT says, else beside Phorge's root as Phorge's install docs lay
it out (`arcanist/` next to `phorge/`, Phorge's root being three levels above GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG).
PHP's `curl.cainfo` is an ini setting of the PHP that runs the daemons, which the service cannot read
without PHP on its host: GORGE_WEBHOOK_PHP_CURL_CAINFO gives it.
"""

from __future__ import annotations

import os
import ssl
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..config import Trust
from .filestamp import Recheck, Stamp, file_stamp

CA_BUNDLE_VARIABLE = "GORGE_WEBHOOK_CA_BUNDLE"
ARCANIST_VARIABLE = "GORGE_WEBHOOK_ARCANIST_ROOT"
CAINFO_VARIABLE = "GORGE_WEBHOOK_PHP_CURL_CAINFO"
LOCAL_CONFIG_VARIABLE = "GORGE_WEBHOOK_PHORGE_LOCAL_CONFIG"
SYSTEM = "system"
SSL_DIR = ("resources", "ssl")


def arcanist_beside(local_config: str) -> str:
    """Arcanist's directory as Phorge's install docs lay it out: next to Phorge's root, which holds
    `conf/local/local.json`; empty when the path is not that file's."""
    path = Path(local_config)
    if path.parts[-3:] != ("conf", "local", "local.json"):
        return ""
    return str(path.parents[3] / "arcanist")


def trust_from(override: str, arcanist: str, local_config: str, php_cainfo: str) -> Trust:
    if arcanist:
        return Trust(override, arcanist, ARCANIST_VARIABLE, php_cainfo)
    beside = arcanist_beside(local_config) if local_config else ""
    if beside and os.path.isdir(beside):
        return Trust(override, beside, LOCAL_CONFIG_VARIABLE, php_cainfo)
    why = (
        f"no {beside} beside Phorge's {local_config}"
        if beside
        else f"{LOCAL_CONFIG_VARIABLE} is not Phorge's conf/local/local.json"
        if local_config
        else f"neither {ARCANIST_VARIABLE} nor {LOCAL_CONFIG_VARIABLE} is set"
    )
    return Trust(override, "", why, php_cainfo)


@dataclass(frozen=True)
class CaBundle:
    """The bundle in force: a file (libcurl's CURLOPT_CAINFO), or None for libcurl's own store (the
    system's); `stamp` tells a changed file from the one kept connections were verified against."""

    path: str | None
    origin: Literal["variable", "arcanist", "unknown"]
    where: str  # what chose it, in HTTPSFuture's order
    variable: str = ""  # the setting that leads to it, named when it cannot be read
    stamp: Stamp | None = None

    @property
    def shown(self) -> str:
        return self.path or "the system store"


def _exists(path: str) -> bool:
    return os.path.exists(path)  # PHP's file_exists(): a directory or an unreadable file counts


def choose(trust: Trust, exists: Callable[[str], bool] = _exists) -> CaBundle:
    """The bundle HTTPSFuture would hand libcurl, with what chose it (no file is read here)."""
    if trust.override:
        path = None if trust.override == SYSTEM else trust.override
        return CaBundle(path, "variable", CA_BUNDLE_VARIABLE, CA_BUNDLE_VARIABLE)
    if trust.arcanist:
        ssl_dir = os.path.join(trust.arcanist, *SSL_DIR)
        found = f"arcanist at {trust.arcanist} ({trust.arcanist_from})"
        custom = os.path.join(ssl_dir, "custom.pem")
        if exists(custom):
            return CaBundle(custom, "arcanist", f"custom.pem, {found}", trust.arcanist_from)
        if trust.php_cainfo:
            cainfo = f"{CAINFO_VARIABLE}: PHP's curl.cainfo, no custom.pem in {ssl_dir}"
            return CaBundle(trust.php_cainfo, "variable", cainfo, CAINFO_VARIABLE)
        default = os.path.join(ssl_dir, "default.pem")
        if exists(default):
            where = f"default.pem: no custom.pem, no curl.cainfo; {found}"
            return CaBundle(default, "arcanist", where, trust.arcanist_from)
        return CaBundle(None, "arcanist", f"no default.pem in {ssl_dir} (a packaging without it): libcurl's own")
    if trust.php_cainfo:
        return CaBundle(trust.php_cainfo, "variable", f"{CAINFO_VARIABLE}: PHP's curl.cainfo", CAINFO_VARIABLE)
    return CaBundle(
        None,
        "unknown",
        f"arcanist not found ({trust.arcanist_from}), so neither its custom.pem nor its default.pem, which PHP "
        f"uses; set {ARCANIST_VARIABLE} or {CA_BUNDLE_VARIABLE}",
    )


def stamped(bundle: CaBundle) -> CaBundle:
    """The bundle with its file's stamp (None when it cannot be looked at: libcurl will say so)."""
    if bundle.path is None:
        return bundle
    try:
        stamp: Stamp | None = file_stamp(bundle.path)
    except OSError:
        stamp = None
    return CaBundle(bundle.path, bundle.origin, bundle.where, bundle.variable, stamp)


def unreadable(path: str) -> str:
    """Why libcurl could verify nothing against the file (OpenSSL reads it as libcurl does); empty when it
    holds a certificate."""
    try:
        # Non-blocking: a FIFO put at the path must not hang start-up.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return "not a regular file"
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except OSError as exc:
        if isinstance(exc, ssl.SSLError):
            return "holds no PEM certificate that can be read"
        return exc.strerror or type(exc).__name__
    return ""


class CaBundleFile:
    """The bundle in force, chosen again when a file of HTTPSFuture's order appears, goes or changes
    (looked at at most once a second, as local.json is); the same object while nothing changed."""

    def __init__(self, trust: Trust, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.trust = trust
        self._recheck = Recheck(clock)
        self._recheck.due()
        self._current = stamped(choose(trust))

    def current(self) -> CaBundle:
        with self._recheck.lock:
            if self._recheck.due():
                found = stamped(choose(self.trust))
                if found != self._current:
                    self._current = found
            return self._current
