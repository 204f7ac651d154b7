"""alerts/apprise_guard.py, the proxy every Apprise send goes out through, against real local servers and
requests itself as its client (as the send's process uses it: the proxy named, nothing else changed): the
outbound blacklist holds before any connection, over http and inside a CONNECT tunnel (https), the servers'
bytes are counted and cut off past the limit, close() ends whatever is under way, and a request reaches the
server as it was written, one per connection."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.odd_answers import TlsFiles
from tests.support.rawserver import RawServer, endless_http, read_message, trickling_http
from webhook_delivery.alerts.apprise_guard import Guard

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def through(guard: Guard) -> dict[str, str]:
    return {"http": guard.url, "https": guard.url}


def ok_http(sock: socket.socket) -> None:
    """Answers each request 200 with the request's head as the body."""
    buffer = b""
    while (message := read_message(sock, buffer)) is not None:
        head, _body, buffer = message
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return TlsFiles.make(Path(tmp_path_factory.mktemp("tls")))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_server_in_the_blacklist_is_refused_before_any_connection(host: str, tls: TlsFiles) -> None:
    with RawServer(ok_http) as plain, RawServer(ok_http, wrap=tls.wrapper("ok")) as secure:
        with Guard(LOOPBACK, 10_000, time.monotonic() + 5) as guard:
            answer = requests.post(f"http://{host}:{plain.port}/x", proxies=through(guard), timeout=5)
            assert answer.status_code == 403, "answered by the guard in the server's place"
            with pytest.raises(requests.exceptions.ProxyError):
                requests.post(f"https://{host}:{secure.port}/x", proxies=through(guard), timeout=5, verify=str(tls.ca))
            assert guard.report.blocked and guard.report.error is None
        assert plain.connections == secure.connections == 0


def test_a_plain_request_reaches_the_server_as_written_one_per_connection() -> None:
    with RawServer(ok_http) as server, Guard((), 10_000, time.monotonic() + 5) as guard:
        url = f"http://127.0.0.1:{server.port}/hooks/T0%2FB1/x%20y?channel=ops&token=a%2Bb"
        with requests.Session() as session:
            first = session.post(url, data=b"{}", headers={"Authorization": "Basic eA=="}, proxies=through(guard))
            second = session.get(f"http://localhost:{server.port}/again", proxies=through(guard))
        head = first.content.decode()
        assert head.startswith("POST /hooks/T0%2FB1/x%20y?channel=ops&token=a%2Bb HTTP/1.1\r\n")
        assert "Authorization: Basic eA==" in head and "Connection: close" in head
        assert "Proxy-Connection" not in head and "keep-alive" not in head.lower()
        assert second.content.decode().startswith("GET /again HTTP/1.1\r\n")
        assert server.connections == 2 and not guard.report.blocked


def test_a_tunnel_carries_tls_end_to_end(tls: TlsFiles) -> None:
    with RawServer(ok_http, wrap=tls.wrapper("ok")) as server, Guard((), 20_000, time.monotonic() + 5) as guard:
        answer = requests.get(
            f"https://localhost:{server.port}/tunnel", proxies=through(guard), verify=str(tls.ca), timeout=5
        )
        assert answer.status_code == 200 and answer.content.startswith(b"GET /tunnel HTTP/1.1\r\n")
        assert 0 < guard.report.received < 20_000


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_endless_answer_is_cut_off_past_the_limit(scheme: str, tls: TlsFiles) -> None:
    wrap: dict[str, Any] = {"wrap": tls.wrapper("ok")} if scheme == "https" else {}
    with RawServer(endless_http, **wrap) as server, Guard((), 50_000, time.monotonic() + 10) as guard:
        with pytest.raises(requests.RequestException):
            requests.get(f"{scheme}://localhost:{server.port}/", proxies=through(guard), verify=str(tls.ca), timeout=9)
        assert guard.report.too_large and guard.report.received > 50_000
        assert guard.report.received < 50_000 + 20 * 65536, "read no further than the chunk that went past"


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_close_ends_a_trickling_answer_at_once(scheme: str, tls: TlsFiles) -> None:
    wrap: dict[str, Any] = {"wrap": tls.wrapper("ok")} if scheme == "https" else {}
    failed: list[BaseException] = []

    def call(guard: Guard, port: int) -> None:
        try:
            requests.get(f"{scheme}://localhost:{port}/", proxies=through(guard), verify=str(tls.ca), timeout=60)
        except requests.RequestException as exc:
            failed.append(exc)

    with RawServer(trickling_http, **wrap) as server:
        guard = Guard((), 10_000, time.monotonic() + 60).__enter__()
        caller = threading.Thread(target=call, args=(guard, server.port))
        caller.start()
        time.sleep(1)
        started = time.monotonic()
        guard.close()
        caller.join(10)
        assert not caller.is_alive() and failed, "the call ended with the guard"
        assert time.monotonic() - started < 5


def test_a_server_that_cannot_be_reached_is_told_by_kind() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with Guard((), 10_000, time.monotonic() + 5) as guard:
        answer = requests.get(f"http://127.0.0.1:{port}/", proxies=through(guard), timeout=5)
        assert answer.status_code == 502 and guard.report.error == "ConnectionError"
        with pytest.raises(requests.exceptions.ProxyError):
            requests.get(f"https://127.0.0.1:{port}/", proxies=through(guard), timeout=5)
