"""outbound.py: the limits live on sessions and clients of ours (OutgoingSession, WatchedSMTP), and nothing
of requests, urllib3 or smtplib is replaced or reached into; a call is bounded in time and size and follows
no redirect, through our own calls (Apprise's sends are bounded by a guard of their own:
tests/unit/test_apprise_guard.py)."""

from __future__ import annotations

import ast
import inspect
import smtplib
import socket
import time

import pytest
import requests

from tests.support import ROOT
from tests.support.rawserver import RawServer, endless_http, read_message, trickling_http
from webhook_delivery import outbound


def _library(cls: type) -> bool:
    return cls.__module__.split(".")[0] in {"requests", "urllib3", "smtplib", "http"}


def test_no_class_of_ours_overrides_a_private_method_of_requests_urllib3_or_smtplib() -> None:
    overridden = []
    for name, cls in inspect.getmembers(outbound, inspect.isclass):
        if cls.__module__ != outbound.__name__:
            continue
        for attribute in vars(cls):
            if not attribute.startswith("_") or (attribute.startswith("__") and attribute.endswith("__")):
                continue
            if any(_library(base) and attribute in vars(base) for base in cls.__mro__[1:]):
                overridden.append(f"{name}.{attribute}")
    assert overridden == []


def test_no_private_attribute_of_another_object_is_set_anywhere_in_the_package() -> None:
    """`x._name = ...` only on `self` or `cls`: a response's `_content`, a pool's `_put_conn` are theirs."""
    found = []
    for path in sorted((ROOT / "webhook_delivery").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr.startswith("_")
                    and not (isinstance(target.value, ast.Name) and target.value.id in {"self", "cls"})
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(target)}")
    assert found == []


def test_requests_stays_as_it_is_while_and_after_a_bounded_call_runs() -> None:
    before = {name: vars(requests.Session)[name] for name in ("get_adapter", "send", "request")}
    with RawServer(trickling_http) as server:
        with pytest.raises(outbound.OutboundError):
            outbound.get(f"http://127.0.0.1:{server.port}/", timeout=0.5, max_bytes=10)
    assert requests.Session().get_adapter("http://x/").__class__ is requests.adapters.HTTPAdapter
    assert before == {name: vars(requests.Session)[name] for name in before}
    assert all(function.__module__ == "requests.sessions" for function in before.values())


def answering(status: int, headers: str = "", body: bytes = b"ok") -> RawServer:
    def answer(sock: socket.socket) -> None:
        buffer = b""
        while (message := read_message(sock, buffer)) is not None:
            buffer = message[2]
            sock.sendall(f"HTTP/1.1 {status} X\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body)

    return RawServer(answer)


def test_an_endless_answer_is_cut_off_at_the_size() -> None:
    with RawServer(endless_http) as server:
        answer = outbound.get(f"http://127.0.0.1:{server.port}/", timeout=5, max_bytes=1000)
        assert (answer.status, len(answer.body), answer.too_large) == (200, 1000, True)


def test_a_trickling_answer_costs_the_calls_time() -> None:
    with RawServer(trickling_http) as server:
        started = time.monotonic()
        with pytest.raises(outbound.OutboundError, match=r"^no complete answer within 1 s$"):
            outbound.post(f"http://127.0.0.1:{server.port}/", timeout=1.0, max_bytes=1000)
        assert time.monotonic() - started < 3


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_answered_and_never_followed(status: int) -> None:
    with answering(200) as elsewhere, answering(status, f"Location: http://127.0.0.1:{elsewhere.port}/x\r\n") as server:
        answer = outbound.post(f"http://127.0.0.1:{server.port}/", timeout=3, max_bytes=100)
        assert answer == outbound.Answer(status, b"ok", False)
        assert elsewhere.connections == 0


def test_an_smtp_server_slow_to_greet_costs_the_calls_time_not_the_sockets_timeout() -> None:
    def greeting(sock: socket.socket) -> None:
        time.sleep(4)  # under the socket's timeout, over the call's
        for byte in b"220 mail.example ESMTP ready\r\n":
            sock.sendall(bytes([byte]))
            time.sleep(0.3)

    with RawServer(greeting) as server:
        started = time.monotonic()
        with outbound.watched(1.0) as watchdog, pytest.raises((smtplib.SMTPException, OSError)):
            outbound.WatchedSMTP("127.0.0.1", server.port, timeout=5)
        assert watchdog.fired and time.monotonic() - started < 3
