"""alerts/apprise_channels.py's chat webhook (GORGE_ALERT_WEBHOOK_URL), database-free, against real local
servers: Apprise's JSON plugin posts exactly the JSON Slack and Mattermost take, to exactly the URL given, and
is bounded as every Apprise send is (in time, in answer size, no redirect followed, no address in Phorge's
outbound blacklist), over http and https. The other Apprise channels: tests/process/test_apprise_channels.py."""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import socket
import time
from pathlib import Path

import pytest

from tests.support.alert_channels import channel_config
from tests.support.odd_answers import TlsFiles
from tests.support.rawserver import Counting, RawServer, endless_http, read_message, trickling_http
from tests.support.receiver import Receiver
from webhook_delivery.alerts.apprise_channels import send_chat
from webhook_delivery.alerts.channels import ChannelError
from webhook_delivery.alerts.config import AlertConfig


def test_the_chat_webhook_gets_only_the_text_it_always_got_at_the_url_as_written() -> None:
    body = 'Hook `ci <b>&</b>` failing since 14:02 UTC\n\u00fcber "quotes" \U0001f525 a%2Fb'
    with Receiver() as receiver:
        path = "/hooks/T0%2FB1/x%20y?channel=ops&token=a%2Bb"
        url = f"http://us%40er:p%3Ass@127.0.0.1:{receiver.port}{path}"
        send_chat(channel_config(chat_url=url), "the subject", body)
        (got,) = receiver.requests
    assert (got.method, got.path) == ("POST", path)
    assert json.loads(got.body) == {"text": body.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")}
    assert got.header("Content-Type") == "application/json"
    assert got.header("Authorization") == "Basic " + base64.b64encode(b"us@er:p:ss").decode()


def test_the_chat_webhook_reaches_an_ipv6_literal_and_a_default_path() -> None:
    with Receiver("::1") as receiver:
        send_chat(channel_config(chat_url=f"http://[::1]:{receiver.port}"), "s", "b")
        (got,) = receiver.requests
    assert (got.path, json.loads(got.body)) == ("/", {"text": "b"})


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/x", "http://:8080/x", "http://[::1/x"])
def test_a_chat_url_that_cannot_be_read_is_refused_without_a_word_of_it(url: str) -> None:
    with pytest.raises(ChannelError) as raised:
        send_chat(channel_config(chat_url=url), "s", "b")
    assert raised.value.refused and "GORGE_ALERT_WEBHOOK_URL" in str(raised.value)
    assert "99999" not in str(raised.value) and "8080" not in str(raised.value)


@pytest.mark.parametrize(("status", "refused"), [(404, True), (429, False), (500, False)])
def test_a_refusal_is_told_by_its_status(status: int, refused: bool) -> None:
    with Receiver() as receiver:
        with pytest.raises(ChannelError, match=rf"^HTTP {status}$") as raised:
            send_chat(channel_config(chat_url=receiver.url(f"/hooks/SECRET/s{status}")), "s", "b")
    assert raised.value.refused is refused and "SECRET" not in str(raised.value)


def test_a_trickling_chat_server_costs_one_channel_timeout() -> None:
    with RawServer(trickling_http) as server:
        started = time.monotonic()
        with pytest.raises(ChannelError, match=r"no complete answer within 1\.5 s"):
            send_chat(channel_config(chat_url=f"http://127.0.0.1:{server.port}/hook"), "s", "b")
        assert time.monotonic() - started < 4


def test_an_endless_chat_answer_is_cut_off_and_read_only_so_far() -> None:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with RawServer(endless_http) as server:
        started = time.monotonic()
        send_chat(channel_config(chat_url=f"http://127.0.0.1:{server.port}/hook"), "s", "b")  # 200: accepted
        assert time.monotonic() - started < 4
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 50, f"the answer was kept in memory: +{grown_mb:.0f} MB"


def test_the_chat_webhook_follows_no_redirect_either() -> None:
    with Counting(200, lambda: "") as elsewhere, Counting(307, lambda: f"{elsewhere.url}/x") as server:
        config = dataclasses.replace(AlertConfig(channel_timeout_sec=3), chat_url=f"{server.url}/hooks/SECRET")
        with pytest.raises(ChannelError, match=r"^HTTP 307: a redirect, not followed$"):
            send_chat(config, "subject", "body")
        assert len(server.lines) == 1 and elsewhere.lines == []


# -- the guard: Phorge's outbound blacklist, and the limits inside a TLS tunnel ----------------------------

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_a_chat_server_in_the_outbound_blacklist_is_refused_without_a_connection(host: str) -> None:
    with Counting(200, lambda: "") as server, Counting(200, lambda: "") as v6:
        port = v6.server.port if host == "[::1]" else server.server.port
        config = channel_config(chat_url=f"http://{host}:{port}/hooks/SECRET")
        with pytest.raises(ChannelError, match=r"^the chat server's address is in the outbound blacklist$") as raised:
            send_chat(config, "s", "b", LOOPBACK)
        assert raised.value.refused, "given up after a few refusals, as a URI Phorge refuses"
        assert server.server.connections == v6.server.connections == 0
        send_chat(
            channel_config(chat_url=f"{server.url}/hooks/SECRET"), "s", "b", (ipaddress.ip_network("10.0.0.0/8"),)
        )
        assert server.lines == ["POST /hooks/SECRET HTTP/1.1"], "another list leaves it open"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return TlsFiles.make(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture
def trusted(tls: TlsFiles, monkeypatch: pytest.MonkeyPatch) -> TlsFiles:
    """The send's process trusts the throwaway CA (REQUESTS_CA_BUNDLE is passed on to it)."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca))
    return tls


def test_an_https_chat_server_gets_the_text_through_the_tunnel_and_is_refused_in_the_blacklist(
    trusted: TlsFiles,
) -> None:
    seen: list[bytes] = []

    def answer(sock: socket.socket) -> None:
        message = read_message(sock)
        if message is not None:
            seen.append(message[0].split(b"\r\n", 1)[0] + b" " + message[1])
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with RawServer(answer, wrap=trusted.wrapper("ok")) as server:
        send_chat(channel_config(chat_url=f"https://localhost:{server.port}/hooks/SECRET"), "s", "b")
        assert seen == [b'POST /hooks/SECRET HTTP/1.1 {"text": "b"}']
        with pytest.raises(ChannelError, match="outbound blacklist"):
            send_chat(channel_config(chat_url=f"https://localhost:{server.port}/hooks/SECRET"), "s", "b", LOOPBACK)
        assert server.connections == 1


def test_a_trickling_https_chat_server_costs_one_channel_timeout(trusted: TlsFiles) -> None:
    with RawServer(trickling_http, wrap=trusted.wrapper("ok")) as server:
        with pytest.raises(ChannelError, match=r"^no complete answer within 1\.5 s$"):
            send_chat(channel_config(chat_url=f"https://localhost:{server.port}/hook"), "s", "b")


def test_an_endless_https_answer_is_cut_off_in_the_tunnel(trusted: TlsFiles) -> None:
    with RawServer(endless_http, wrap=trusted.wrapper("ok")) as server:
        send_chat(channel_config(chat_url=f"https://localhost:{server.port}/hook"), "s", "b")  # 200: accepted


def test_an_https_redirect_is_not_followed_either(trusted: TlsFiles) -> None:
    def redirect(sock: socket.socket) -> None:
        if read_message(sock) is not None:
            sock.sendall(f"HTTP/1.1 307 X\r\nLocation: {elsewhere.url}/x\r\nContent-Length: 0\r\n\r\n".encode())

    with Counting(200, lambda: "") as elsewhere, RawServer(redirect, wrap=trusted.wrapper("ok")) as server:
        config = channel_config(chat_url=f"https://localhost:{server.port}/hooks/SECRET", channel_timeout_sec=5)
        with pytest.raises(ChannelError, match=r"^HTTP 307: a redirect, not followed$"):
            send_chat(config, "s", "b")
        assert server.connections == 1 and elsewhere.lines == []
