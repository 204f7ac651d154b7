"""The outbound blacklist on every hop of a delivery made through a proxy (GORGE_WEBHOOK_PROXY).

Without a proxy, libcurl resolves each hop's host itself and curl.py checks every address it connects to.
With one, libcurl connects only to the proxy, which resolves the receivers: so each hop's host is resolved
and checked here, before libcurl asks the proxy for it. libcurl still follows the redirects as it follows
them for PHP (what is sent, recorded and counted stays libcurl's); this only foresees where it goes next:

* the next hop is the first non-empty `Location` of a 3xx answer, made absolute against the current URL
  by libcurl's own parser (CurlUrl, with the flags libcurl's redirect code uses);
* it is checked at the first moment libcurl moves on to it: when it opens a socket (to the proxy, which is
  then asked with CONNECT, a SOCKS request or the request itself) or, on a kept connection, just before
  the request is sent (CURLOPT_PREREQFUNCTION); header blocks that arrive in between are the proxy's own
  answer to CONNECT;
* a hop libcurl starts after an answer without a foreseen URL is refused (fail closed); a hop started
  again before any answer (libcurl retrying a kept connection that died) is the same URL.

The proxy's own addresses, pinned for the transfer, are the only ones exempt from the blacklist.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import pycurl

from ..config import IPNetwork
from ..phorge.netguard import InvalidURI, Resolver, TemporaryDNSFailure, check_host

_STATUS = re.compile(rb"[ \t]*HTTP/(?:[0-9](?:\.[0-9])?)[ \t]+([0-9]{3})")
_BLANKS = b" \t\r\n\v\f"
# How libcurl makes a redirect's URL absolute (Curl_follow, FOLLOW_REDIR) and parses a request's URL.
_FOLLOW_FLAGS = pycurl.U_URLENCODE | pycurl.U_ALLOW_SPACE
_FIRST_FLAGS = pycurl.U_GUESS_SCHEME | pycurl.U_NON_SUPPORT_SCHEME
COULDNT_RESOLVE_HOST, OPERATION_TIMEDOUT = 6, 28


class ProxyHops:
    """One transfer's hops through the proxy: fed libcurl's header lines, asked before each hop starts."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.reset(b"", (), 0.0)

    def reset(self, url: bytes, blacklist: Sequence[IPNetwork], deadline: float) -> None:
        self.blacklist = blacklist
        self.deadline = deadline  # on time.monotonic()
        self.refused = False
        self.error = 0  # libcurl's number for a hop whose host could not be looked up in time
        self._current = url.decode("utf-8", "surrogateescape")
        self._next: str | None = None  # the URL a 3xx answer sends libcurl to
        self._unknown = False  # a 3xx answer named a URL libcurl's parser refuses
        self._answered = False  # a header line of the hop's answer came (not the proxy's to CONNECT)
        self._requested = False  # the hop's request is on its way: header lines are its answer's
        self._status = 0
        self._location: bytes | None = None

    def header(self, line: bytes) -> None:
        if not self._requested:
            return  # the proxy's answer to CONNECT
        self._answered = True
        if status := _STATUS.match(line):
            self._status, self._location = int(status[1]), None
        elif line.strip(_BLANKS) == b"":
            if 300 <= self._status < 400 and self._location is not None:
                self._foresee(self._location)
            self._status = 0
        elif 300 <= self._status < 400 and self._location is None and line[:9].lower() == b"location:":
            value = line[9:].lstrip(_BLANKS)
            value = re.split(rb"[\r\n]", value, maxsplit=1)[0].rstrip(_BLANKS)
            self._location = value or None

    def _foresee(self, location: bytes) -> None:
        try:
            following = _url(self._current, _FIRST_FLAGS)
            following.setpart(pycurl.UPART_URL, location.decode("utf-8", "surrogateescape"), _FOLLOW_FLAGS)
            self._next, self._unknown = str(following.getpart(pycurl.UPART_URL, 0)), False
        except (pycurl.error, UnicodeError):
            self._next, self._unknown = None, True

    def opening(self) -> bool:
        """A socket is being opened: to the proxy for the hop libcurl moves on to, or to a receiver named in
        GORGE_WEBHOOK_NO_PROXY (whose address curl.py checks too). False: refused, or not looked up."""
        allowed = self._moving_on()
        self._requested = False
        return allowed

    def sending(self) -> bool:
        """The hop's request is about to be sent (on a kept connection, or through the tunnel just made)."""
        allowed = self._moving_on()
        self._requested = True
        return allowed

    def _moving_on(self) -> bool:
        if self.refused or self.error:
            return False
        if self._next is None:
            if self._answered or self._unknown:  # libcurl follows a redirect this did not foresee
                self.refused = True
            return not self.refused
        self._current, self._next = self._next, None
        self._answered = False
        return self._check(self._current)

    def _check(self, url: str) -> bool:
        try:
            hop = _url(url, _FIRST_FLAGS)
            host = str(hop.getpart(pycurl.UPART_HOST, 0)).strip("[]")
            port = int(str(hop.getpart(pycurl.UPART_PORT, pycurl.U_DEFAULT_PORT)))
            check_host(host, port, self.blacklist, self.resolver, self.deadline - time.monotonic())
        except (InvalidURI, pycurl.error, ValueError):
            self.refused = True
        except TemporaryDNSFailure:
            self.error = COULDNT_RESOLVE_HOST
        except TimeoutError:
            self.error = OPERATION_TIMEDOUT
        return not (self.refused or self.error)


def _url(url: str, flags: int) -> pycurl.CurlUrl:
    parsed = pycurl.CurlUrl()
    parsed.setpart(pycurl.UPART_URL, url, flags)
    return parsed
