"""Receivers that answer oddly, for the differential tests of the delivery path against the real curl: one
raw server per case, answering each request of a connection in turn, and what PHP records for the case
(the issue's own measurements with curl 7.88.1 and Phorge's parse, where it gave one: the suite checks the
oracle against them too, so a broken oracle cannot pass unnoticed)."""

from __future__ import annotations

import gzip
import select
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.rawserver import RawServer, read_message

Answer = bytes | Callable[[socket.socket], None]

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
GZIPPED = gzip.compress(b'{"ok": true}')


def _then_close_hard(head: bytes) -> Callable[[socket.socket], None]:
    def answer(sock: socket.socket) -> None:
        sock.sendall(head)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()

    return answer


@dataclass(frozen=True)
class Case:
    name: str
    answers: tuple[Answer, ...]  # the answers to a connection's requests, in turn; then it is closed
    recorded: tuple[str, int] | None = None  # what PHP records for the last request, when measured
    requests: int = 1  # requests made on one connection; the last one's record is compared
    tls: str = ""  # "", "ok", "client-cert" (the server asks for one), "reset" (reset during the handshake)
    keep_open: bool = field(default=False)  # after the last answer, wait for the client to close

    @property
    def path(self) -> str:
        return "/" + self.name


def _gz(status: bytes, body: bytes) -> bytes:
    return status + b"\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body


CASES: tuple[Case, ...] = (
    Case("plain-200", (OK,), ("http", 200)),
    Case("lines-150", (b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 150 + b"Content-Length: 0\r\n\r\n",), ("http", 200)),
    Case(
        "line-70000", (b"HTTP/1.1 200 OK\r\nX-Long: " + b"x" * 70000 + b"\r\nContent-Length: 0\r\n\r\n",), ("http", 200)
    ),
    Case(
        "line-300k", (b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * 300_000 + b"\r\nContent-Length: 0\r\n\r\n",), ("http", 27)
    ),
    Case("head-310k", (b"HTTP/1.1 200 OK\r\n" + (b"X-B: " + b"z" * 1000 + b"\r\n") * 310 + b"\r\n",)),
    Case("length-abc", (b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nok",), ("http", 8)),
    Case("length-two", (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",), ("http", 18)),
    Case("length-list", (b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",), ("http", 200)),
    Case("status-http2", (b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",), ("http", 200)),
    Case("status-plus", (b"HTTP/1.1 +200 OK\r\nContent-Length: 0\r\n\r\n",), ("http", 1)),
    Case("status-underscore", (b"HTTP/1.1 2_00 OK\r\nContent-Length: 0\r\n\r\n",), ("http", 1)),
    Case("status-four-digits", (b"HTTP/1.1 2000 Big\r\nContent-Length: 0\r\n\r\n",)),
    Case("status-no-reason", (b"HTTP/1.1 204\r\n\r\n",)),
    Case("not-http", (b"SSH-2.0-OpenSSH_9.2\r\n\r\n",)),
    Case("empty-reply", (b"",), ("http", 52)),
    Case("partial-body", (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",), ("http", 18)),
    Case("close-after-head", (_then_close_hard(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"),)),
    Case("status-404", (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",), ("http", 404)),
    Case("no-length-until-close", (b"HTTP/1.0 200 OK\r\n\r\nuntil the end",), ("http", 200)),
    Case("204-with-length", (b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",)),
    Case("folded-field", (b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",)),
    Case("lf-only", (b"HTTP/1.1 201 Created\nContent-Length: 0\n\n",)),
    Case("chunked-ok", (CHUNKED + b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n",), ("http", 200)),
    Case("chunked-0x", (CHUNKED + b"0x2\r\nok\r\n0\r\n\r\n",), ("http", 43)),
    Case("chunked-bad-size", (CHUNKED + b"zz\r\nabc\r\n0\r\n\r\n",)),
    Case("chunked-cut", (CHUNKED + b"10\r\nabc",)),
    Case("chunked-no-end", (CHUNKED + b"2\r\nok\r\n",)),
    Case("continue-200", (b"HTTP/1.1 100 Continue\r\n\r\n" + OK,), ("http", 200)),
    Case("processing-200", (b"HTTP/1.1 102 Processing\r\n\r\n" + OK,), ("http", 102)),
    Case("early-hints-200", (b"HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\n" + OK,), ("http", 103)),
    Case(
        "continue-500", (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",), ("http", 500)
    ),
    Case(
        "processing-500",
        (b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",),
        ("http", 102),
    ),
    Case(
        "early-hints-500",
        (b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",),
        ("http", 103),
    ),
    Case("gzip-good", (_gz(b"HTTP/1.1 200 OK", GZIPPED),), ("http", 200)),
    Case("gzip-bad", (_gz(b"HTTP/1.1 200 OK", b"not gzip at all"),), ("http", 1)),
    Case("gzip-cut", (_gz(b"HTTP/1.1 200 OK", GZIPPED[:-4]),), ("http", 1)),
    Case("gzip-trailing", (_gz(b"HTTP/1.1 200 OK", GZIPPED + b"trailing bytes"),), ("http", 200)),
    Case("gzip-empty-204", (b"HTTP/1.1 204 No Content\r\nContent-Encoding: gzip\r\n\r\n",)),
    Case("gzip-uppercase", (_gz(b"HTTP/1.1 200 OK", b"plain").replace(b"gzip", b"GZIP"),), ("http", 200)),
    Case("gzip-500", (_gz(b"HTTP/1.1 500 Oops", b"not gzip"),), ("http", 1)),
    Case("leftover-after-answer", (OK + b"HTTP/1.1 500 Leftover\r\nContent-Length: 0\r\n\r\n", OK), ("http", 200), 2),
    Case("leftover-after-204", (b"HTTP/1.1 204 No Content\r\n\r\nsurprise body", OK), ("http", 200), 2),
    Case("tls-ok", (OK,), ("http", 200), tls="ok"),
    Case("tls-client-cert", (OK,), ("http", 56), tls="client-cert"),
    Case("tls-reset", (OK,), ("http", 35), tls="reset"),
)


def _slow_to_refuse(tls: ssl.SSLSocket) -> ssl.SSLSocket:
    """The server's half of a TLS 1.3 handshake, then a pause before it reads the client's (certificate-less)
    answer and refuses it: the client has finished its half and sent its request, as against a busy server,
    and reads the refusal where it waits for an answer."""
    tls.setblocking(False)
    select.select([tls], [], [], 2)  # the ClientHello: the first step below answers it
    paused = False
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            if not paused:
                time.sleep(1.0)
                paused = True
            select.select([tls], [], [], 2)
    tls.setblocking(True)
    return tls


def _linger_reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


class CaseServer:
    """A raw server answering `case` on every connection."""

    def __init__(self, case: Case, tls: TlsFiles | None = None) -> None:
        self.case = case
        self.heads: list[bytes] = []
        wrap = None
        if case.tls:
            assert tls is not None, "TLS cases need the throwaway CA"
            wrap = tls.wrapper(case.tls)
        self.server = RawServer(self._handle, wrap=wrap)

    @property
    def port(self) -> int:
        return self.server.port

    def url(self, host: str = "127.0.0.1") -> str:
        scheme = "https" if self.case.tls else "http"
        return f"{scheme}://{host}:{self.port}{self.case.path}"

    def _handle(self, sock: socket.socket) -> None:
        buffer = b""
        for answer in self.case.answers:
            message = read_message(sock, buffer)
            if message is None:
                return
            self.heads.append(message[0])
            buffer = message[2]
            if callable(answer):
                answer(sock)
                return
            sock.sendall(answer)
        time.sleep(0.05)  # let a client that reads on see the connection end, not an error

    def __enter__(self) -> CaseServer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


class Redirects:
    """A receiver that writes down the head and body of every request it gets: /final answers 200,
    /r<code> redirects there with that status, /loop redirects to itself, /away to `elsewhere`."""

    def __init__(self, host: str = "127.0.0.1", tls: TlsFiles | None = None) -> None:
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.elsewhere = ""
        self.scheme = "https" if tls else "http"
        self.host = host
        self.server = RawServer(self._handle, host=host, wrap=tls.wrapper("ok") if tls else None)

    def _handle(self, sock: socket.socket) -> None:
        buffer = b""
        while (message := read_message(sock, buffer)) is not None:
            head, body, buffer = message
            self.heads.append(head)
            self.bodies.append(body)
            path = head.split(b" ", 2)[1]
            if path == b"/final":
                sock.sendall(OK)
            else:
                status, target = (b"302", path) if path in (b"/loop", b"/away") else (path[2:], b"/final")
                if path == b"/away":
                    target = self.elsewhere.encode()
                sock.sendall(b"HTTP/1.1 %s Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (status, target))
            if b"\r\nconnection: close" in head.lower():  # as a proxy asks: else it relays the next request raw
                return

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.host}:{self.server.port}{path}"

    def __enter__(self) -> Redirects:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway CA and a server certificate for localhost, 127.0.0.1 and 127.0.0.3 signed by it."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        ca, ca_key = directory / "ca.pem", directory / "ca.key"
        cert, key, csr = directory / "cert.pem", directory / "key.pem", directory / "cert.csr"
        run = [
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
             "-days", "1", "-subj", "/CN=gorge test CA"],
            ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
             "-subj", "/CN=localhost"],
        ]  # fmt: skip
        for command in run:
            subprocess.run(command, check=True, capture_output=True)
        extensions = directory / "san.cnf"
        extensions.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1,IP:127.0.0.3\n")
        subprocess.run(
            ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(cert), "-days", "1", "-extfile", str(extensions)],
            check=True, capture_output=True,
        )  # fmt: skip
        return cls(ca, cert, key)

    def wrapper(self, mode: str) -> Callable[[socket.socket], socket.socket]:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        if mode == "client-cert":
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca)

        def wrap(sock: socket.socket) -> socket.socket:
            if mode == "client-cert":
                return _slow_to_refuse(context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False))
            if mode == "reset":
                sock.recv(1024)  # the ClientHello, then a reset
                _linger_reset(sock)
                sock.close()
                raise OSError("reset during the handshake")
            return context.wrap_socket(sock, server_side=True)

        return wrap
