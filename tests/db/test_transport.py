"""SSRF protection end to end, and every transport failure recorded the way PHP's libcurl records it.

Here: what runs on Django's test databases; the rest is in tests/unit/test_transport.py."""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

from tests.support.helpers import PHORGE_DB, Phorge
from tests.support.receiver import Receiver
from webhook_delivery.config import default_blacklist, parse_blacklist
from webhook_delivery.phorge.netguard import make_resolver
from webhook_delivery.worker.dispatcher import Dispatcher
from webhook_delivery.worker.loop import build_worker


@PHORGE_DB
def test_default_blacklist_refuses_loopback_without_any_request(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver() as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/x/ok")), retry="forever")
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=default_blacklist()), once=True).run()
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"], row["lastRequestEpoch"]) == ("failed", "none", 0)
        assert row["properties"].endswith('"errorType":"hook","errorCode":"uri"}')
        assert receiver.requests == []


@PHORGE_DB
def test_ipv6_loopback_is_refused(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver(host="::1") as receiver:
        phid = phorge.request(phorge.hook(receiver.url("/v6/ok")))
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=default_blacklist()), once=True).run()
        assert phorge.row(phid)["properties"].endswith('"errorCode":"uri"}')
        assert receiver.requests == []
    with Receiver(host="::1") as receiver:  # and reachable when the operator allows it
        phid = phorge.request(phorge.hook(receiver.url("/v6/ok")))
        build_worker(dataclasses.replace(delivery_config, outbound_blacklist=()), once=True).run()
        assert phorge.row(phid)["status"] == "sent"
        assert receiver.requests[0].header("Host") == f"[::1]:{receiver.port}"


@PHORGE_DB
def test_redirect_into_the_blacklist_is_not_followed(phorge: Phorge, delivery_config: Any) -> None:
    with Receiver(host="127.0.0.2") as inside, Receiver() as outside:
        outside.state.redirect_to = inside.url("/internal/ok")
        phid = phorge.request(phorge.hook(outside.url("/public/away")))
        config = dataclasses.replace(delivery_config, outbound_blacklist=parse_blacklist("127.0.0.2/32"))
        build_worker(config, once=True).run()
        assert [r.path for r in outside.requests] == ["/public/away"]
        assert inside.requests == []
        row = phorge.row(phid)
        assert (row["status"], row["lastRequestResult"]) == ("failed", "none")
        assert row["properties"].endswith('"errorType":"hook","errorCode":"uri"}')


@PHORGE_DB
def test_temporary_dns_failure_is_retryable_http_6(phorge: Phorge, delivery_config: Any) -> None:
    def servfail(*args: Any) -> Any:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    phid = phorge.request(phorge.hook("http://flaky-dns.example/x"), retry="forever")
    dispatcher = Dispatcher(delivery_config, resolver=make_resolver(servfail))
    build_worker(delivery_config, once=True, dispatcher=dispatcher).run()
    row = phorge.row(phid)
    assert (row["status"], row["lastRequestResult"]) == ("queued", "fail")
    assert row["properties"].endswith('"errorType":"http","errorCode":6}')
