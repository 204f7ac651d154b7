"""Deliveries through an outbound proxy (GORGE_WEBHOOK_PROXY), against a real forward proxy that administrators
run (Debian's tinyproxy, CONNECT for https): the receiver gets the bytes PHP's libcurl sends through the same
proxy and the row holds what PHP would record (the real curl with `--proxy` is the oracle); a hop into the
outbound blacklist is refused without the proxy ever being asked for it, the proxy's own address being the only
one exempt; a proxy that is down or refuses is recorded as libcurl numbers it."""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.support.arcanist import arcanist_tree, bundle_in_force
from tests.support.curl_oracle import php_records
from tests.support.forward_proxy import ForwardProxy
from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.odd_answers import Redirects, TlsFiles
from tests.support.rawserver import RawServer
from webhook_delivery.config import parse_blacklist
from webhook_delivery.egress import Proxy
from webhook_delivery.phorge.cabundle import CaBundle
from webhook_delivery.phorge.formats import load_config
from webhook_delivery.phorge.netguard import InvalidURI, make_resolver, system_resolver
from webhook_delivery.worker import transport
from webhook_delivery.worker.curl import Handles
from webhook_delivery.worker.loop import build_worker

pytestmark = pytest.mark.needs_tool("tinyproxy", "curl", "php")

BODY, SIGNATURE = b'{"object": {"phid": "PHID-TASK-1"}}', "7" * 64


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return TlsFiles.make(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def trusted(tls: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> CaBundle:
    """The throwaway CA in arcanist's custom.pem, as a Phorge administrator trusts a private CA."""
    return bundle_in_force(
        GORGE_WEBHOOK_ARCANIST_ROOT=str(arcanist_tree(tmp_path_factory.mktemp("phorge"), custom=tls.ca))
    )


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ForwardProxy]:
    with ForwardProxy(tmp_path) as running:
        yield running


def setting(url: str, no_proxy: str = "") -> Proxy:
    """GORGE_WEBHOOK_PROXY (and _NO_PROXY) as the service reads them."""
    env = {"GORGE_WEBHOOK_PROXY": url, **({"GORGE_WEBHOOK_NO_PROXY": no_proxy} if no_proxy else {})}
    loaded = load_config(env)
    assert not loaded.errors and loaded.delivery.proxy is not None, loaded.errors
    return loaded.delivery.proxy


@pytest.fixture
def handles() -> Iterator[Handles]:
    """The hooks' libcurl handles, as a worker's dispatcher owns them: this test's own, closed after it."""
    with closing(Handles()) as own:
        yield own


def deliver(
    handles: Handles,
    url: str,
    via: Proxy,
    ca: CaBundle,
    *,
    owner: str,
    blacklist: Any = (),
    resolver: Any = system_resolver,
) -> Any:
    deadline = transport.Deadline.after(5.0)
    hop = transport.check_uri(url, blacklist, resolver, deadline)
    http = transport.post(
        url,
        BODY,
        SIGNATURE,
        handles=handles,
        owner=owner,
        first_hop=hop,
        blacklist=blacklist,
        deadline=deadline,
        ca=ca,
        proxy=via,
        resolver=resolver,
    )
    return http.error_type, http.error_code


def php(url: str, proxy_url: str, ca: CaBundle, *, timeout: float = 5.0) -> tuple[str, int]:
    cacert = None if ca.path is None else Path(ca.path)
    [recorded] = php_records([url], BODY, SIGNATURE, timeout=timeout, cacert=cacert, proxy=proxy_url)
    return recorded.error_type, recorded.error_code


def _fields(head: bytes) -> list[bytes]:
    return head.split(b"\r\n")


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("path", ["/final", "/r301", "/r302", "/r303", "/r307", "/r308", "/away"])
def test_the_receiver_gets_what_phps_libcurl_sends_through_the_proxy_and_the_row_is_phps(
    handles: Handles, scheme: str, path: str, proxy: ForwardProxy, tls: TlsFiles, trusted: CaBundle
) -> None:
    """Plain http as an absolute-URI request to the proxy, https in a CONNECT tunnel (the proxy's "200
    Connection established" block in libcurl's buffer, as PHP's parse sees it); redirects followed as libcurl
    follows them, across hosts too."""
    secure = tls if scheme == "https" else None
    with Redirects(tls=secure) as receiver, Redirects("localhost", tls=secure) as other:
        receiver.elsewhere = other.url("/final")
        url = receiver.url(path)
        expected = php(url, proxy.url, trusted)
        by_curl = (len(receiver.heads), len(other.heads))
        assert deliver(handles, url, setting(proxy.url), trusted, owner=f"PHID-HOOK-{scheme}{path}") == expected
    # Through a CONNECT tunnel, HTTPSFuture's strip of one block per redirect takes the proxy's "Connection
    # established" block instead: PHP records the redirect's own status.
    assert expected == (
        ("http", int(path[2:]) if path != "/away" else 302) if scheme == "https" and path != "/final" else ("http", 200)
    )
    for server, curl_made in zip((receiver, other), by_curl, strict=True):
        assert [_fields(head) for head in server.heads[curl_made:]] == [
            _fields(head) for head in server.heads[:curl_made]
        ]
        assert server.bodies[curl_made:] == server.bodies[:curl_made]
    assert BODY in receiver.bodies
    asked = proxy.asked()
    assert len(asked) == 2 * len(asked[: len(asked) // 2]) and asked[: len(asked) // 2] == asked[len(asked) // 2 :]


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_hop_into_the_blacklist_is_refused_before_the_proxy_is_asked_for_it(
    handles: Handles, scheme: str, proxy: ForwardProxy, tls: TlsFiles, trusted: CaBundle
) -> None:
    """The proxy listens on 127.0.0.1, itself in the blacklist: its own address and port are exempt, nothing
    else. A receiver allowed (127.0.0.3) redirects into the blacklist: to 127.0.0.2, and to the proxy's own
    address on another port. Neither is ever asked of the proxy, and neither receiver hears of it."""
    secure = tls if scheme == "https" else None
    blacklist = parse_blacklist("127.0.0.1/32,127.0.0.2/32")
    with Redirects("127.0.0.3", tls=secure) as allowed, Redirects("127.0.0.2") as inside, Redirects() as beside:
        for target in (inside, beside):
            allowed.elsewhere = target.url("/final")
            with pytest.raises(InvalidURI):
                deliver(
                    handles,
                    allowed.url("/away"),
                    setting(proxy.url),
                    trusted,
                    owner="PHID-HOOK-in",
                    blacklist=blacklist,
                )
        followed = deliver(
            handles, allowed.url("/r302"), setting(proxy.url), trusted, owner="PHID-HOOK-ok", blacklist=blacklist
        )
        assert followed == ("http", 302 if secure else 200)  # PHP's record through a tunnel (above)
    assert inside.heads == [] and beside.heads == []
    asked = proxy.asked()
    assert asked, "the deliveries went through the proxy"
    assert not [line for line in asked if "127.0.0.2" in line or f"127.0.0.1:{beside.server.port}" in line], asked
    if scheme == "https":
        assert set(asked) == {f"CONNECT 127.0.0.3:{allowed.server.port}"}
    else:
        assert {line.split(" ")[1].rsplit("/", 1)[0] for line in asked} == {f"http://127.0.0.3:{allowed.server.port}"}


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_named_by_host_is_reached_where_its_name_was_looked_up(
    handles: Handles, scheme: str, proxy: ForwardProxy, tls: TlsFiles, trusted: CaBundle
) -> None:
    """A name only the service's resolver knows: libcurl reaches the proxy at the address pinned for the
    attempt, the one exempt from the blacklist (which holds it, and not the receiver, 127.0.0.3)."""

    def lookup(host: str, port: int, *args: Any) -> list[Any]:
        assert host == "proxy.gorge-test.invalid", host
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    blacklist = parse_blacklist("127.0.0.1/32,127.0.0.2/32,::1/128")
    with Redirects("127.0.0.3", tls=tls if scheme == "https" else None) as receiver:
        via = setting(f"http://proxy.gorge-test.invalid:{proxy.port}")
        url = receiver.url("/final")
        assert deliver(
            handles, url, via, trusted, owner="PHID-HOOK-named", blacklist=blacklist, resolver=make_resolver(lookup)
        ) == (
            "http",
            200,
        )
    assert len(receiver.heads) == 1 and len(proxy.asked()) == 1


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = int(probe.getsockname()[1])
    probe.close()
    return port


def _hang_up(sock: socket.socket) -> None:
    sock.recv(1024)


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("down", ["refused", "no such host", "hangs up", "refuses CONNECT"])
def test_a_proxy_that_is_down_or_refuses_is_recorded_as_libcurl_numbers_it(
    handles: Handles, scheme: str, down: str, tmp_path: Path, tls: TlsFiles, trusted: CaBundle
) -> None:
    secure = tls if scheme == "https" else None
    with (
        Redirects(tls=secure) as receiver,
        RawServer(_hang_up) as hanging,
        ForwardProxy(tmp_path, connect_ports=(1,)) as strict,
    ):
        proxy_url = {
            "refused": f"http://127.0.0.1:{_closed_port()}",
            "no such host": "http://proxy.invalid:3128",
            "hangs up": f"http://127.0.0.1:{hanging.port}",
            "refuses CONNECT": strict.url,
        }[down]
        url = receiver.url("/final")
        expected = php(url, proxy_url, trusted)
        assert deliver(handles, url, setting(proxy_url), trusted, owner=f"PHID-HOOK-{down}") == expected
    assert (
        expected
        == {
            ("http", "refused"): ("http", 7),
            ("https", "refused"): ("http", 7),
            ("http", "no such host"): ("http", 5),
            ("https", "no such host"): ("http", 5),
            ("http", "hangs up"): ("http", 52),
            ("https", "hangs up"): ("http", 56),
            ("http", "refuses CONNECT"): ("http", 200),  # plain http is no CONNECT: ConnectPort does not apply
            ("https", "refuses CONNECT"): ("http", 56),
        }[(scheme, down)]
    )


def test_hosts_in_no_proxy_are_reached_directly_and_still_checked(
    handles: Handles, proxy: ForwardProxy, trusted: CaBundle
) -> None:
    with Redirects() as direct, Redirects("127.0.0.2") as inside:
        via = setting(proxy.url, "127.0.0.1,127.0.0.2")
        assert deliver(handles, direct.url("/final"), via, trusted, owner="PHID-HOOK-direct") == ("http", 200)
        direct.elsewhere = inside.url("/final")
        with pytest.raises(InvalidURI):
            deliver(
                handles,
                direct.url("/away"),
                via,
                trusted,
                owner="PHID-HOOK-direct",
                blacklist=parse_blacklist("127.0.0.2/32"),
            )
    assert proxy.asked() == []
    assert len(direct.heads) == 2 and inside.heads == []


@PHORGE_DB
def test_the_worker_delivers_through_the_proxy_and_writes_the_row(
    phorge: Phorge, delivery_config: Any, proxy: ForwardProxy
) -> None:
    with Redirects() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/final")))
        config = dataclasses.replace(delivery_config, outbound_blacklist=(), proxy=setting(proxy.url))
        build_worker(config, once=True).run()
        row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"]) == ("sent", "okay")
    assert json.loads(row["properties"])["errorCode"] == 200
    assert proxy.asked() == [f"POST {receiver.url('/final')}"]
    assert b"Via: 1.1 " in receiver.heads[0]
