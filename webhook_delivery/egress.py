"""How deliveries leave this host, from the environment: the outbound proxy, as libcurl takes it (the CA
bundle receivers' certificates are verified against is found as PHP finds it, phorge/cabundle.py). Pure: no
Django import; each problem is (variable, message) for config.py's ConfigError."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

PROXY_VARIABLE = "GORGE_WEBHOOK_PROXY"
NO_PROXY_VARIABLE = "GORGE_WEBHOOK_NO_PROXY"
# The port libcurl gives a proxy URL without one (CURL_DEFAULT_PROXY_PORT, and 443 for an https proxy).
PROXY_PORTS = {"http": 1080, "https": 443, "socks5h": 1080}
_PROXY_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\.?")
_NO_PROXY = re.compile(r"[A-Za-z0-9.:,*/_\[\]\s-]*")


@dataclass(frozen=True)
class Proxy:
    """The outbound proxy every delivery goes through (but to the hosts of `no_proxy`), as libcurl takes it:
    `url` for CURLOPT_PROXY (it may carry a user and password: never shown), `no_proxy` for CURLOPT_NOPROXY."""

    url: str = field(repr=False)
    scheme: str
    host: str
    port: int
    no_proxy: str = ""

    @property
    def shown(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}" + (f", not for {self.no_proxy}" if self.no_proxy else "")


def parse_proxy(raw: str) -> Proxy:
    """GORGE_WEBHOOK_PROXY: http://, https:// or socks5h:// (the proxy resolves the receivers' names), a
    host and an optional port; ValueError saying what is wrong, never showing the value."""
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise ValueError("expected http://, https:// or socks5h:// and the proxy's host[:port]") from exc
    if parts.scheme not in PROXY_PORTS or not raw.startswith(f"{parts.scheme}://"):
        raise ValueError("expected a proxy URL starting with http://, https:// or socks5h:// (in lower case)")
    host = parts.hostname or ""
    bracketed = parts.netloc.rsplit("@", 1)[-1].startswith("[")
    if bracketed:
        try:
            host = str(ipaddress.IPv6Address(host))
        except ValueError:
            host = ""
    if not host or not (bracketed or _PROXY_HOST.fullmatch(host)):
        raise ValueError("the proxy's host is missing or is not a host name or IP address")
    if port == 0 or parts.path not in ("", "/") or parts.query or parts.fragment or "#" in raw or "?" in raw:
        raise ValueError("expected only a scheme, the proxy's host and a port from 1 to 65535")
    return Proxy(raw, parts.scheme, host, port or PROXY_PORTS[parts.scheme])


def load_proxy(raw: Callable[[str], str]) -> tuple[Proxy | None, list[tuple[str, str]]]:
    """`raw(name)`: the variable's value, stripped, empty when unset."""
    errors: list[tuple[str, str]] = []
    return _proxy(raw, errors), errors


def _proxy(raw: Callable[[str], str], errors: list[tuple[str, str]]) -> Proxy | None:
    url, no_proxy = raw(PROXY_VARIABLE), raw(NO_PROXY_VARIABLE)
    if no_proxy and not url:
        errors.append((NO_PROXY_VARIABLE, f"hosts reached without a proxy, but {PROXY_VARIABLE} is unset"))
    if no_proxy and not _NO_PROXY.fullmatch(no_proxy):
        errors.append((NO_PROXY_VARIABLE, "expected host names, domains and addresses, comma-separated"))
        no_proxy = ""
    if not url:
        return None
    try:
        return dataclasses.replace(parse_proxy(url), no_proxy=no_proxy)
    except ValueError as exc:
        errors.append((PROXY_VARIABLE, str(exc)))
        return None
