"""What PHP would record for an answer, from the real thing: Debian's `curl` (libcurl 7.88.1, the library
php8.2-curl links) with the options arcanist's HTTPSFuture sets, then Phorge's parse of the raw buffer run by
PHP itself (phorge_parse.php). Needs `curl` and `php` (Debian's php-cli): .ci/run installs both."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from webhook_delivery.phorge.payload import SIGNATURE_HEADER
from webhook_delivery.worker.curl import MAX_REDIRECTS, USER_AGENT

PARSE = Path(__file__).with_name("phorge_parse.php")
TOOLS = ("curl", "php")


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


@dataclass(frozen=True)
class Recorded:
    """errorType and errorCode as PHP's HeraldWebhookWorker would store them."""

    error_type: str
    error_code: int


def php_records(
    urls: list[str], body: bytes, signature: str, *, timeout: float, cacert: Path | None = None, proxy: str = ""
) -> list[Recorded]:
    """One curl run over `urls` in turn (reusing its connections, as a PHP worker's pooled handle does), and
    what PHP records of each transfer: with `cacert`, HTTPSFuture's CURLOPT_CAINFO (the bundle it found);
    with `proxy`, the CURLOPT_PROXY a Phorge HTTP engine extension gives it."""
    with tempfile.TemporaryDirectory(prefix="curl-oracle-") as scratch:
        directory = Path(scratch)
        (directory / "body").write_bytes(body)
        command = [
            "curl",
            "--silent",
            "--include",  # CURLOPT_HEADER: every header block in the output, as in PHP's buffer
            "--request",
            "POST",
            "--data-binary",
            f"@{directory / 'body'}",
            "--header",
            "Content-Type: application/json",
            "--header",
            f"{SIGNATURE_HEADER}: {signature}",
            "--header",
            "Expect:",
            "--header",
            "Accept-Encoding: gzip",
            "--user-agent",
            USER_AGENT,
            "--location",
            "--max-redirs",
            str(MAX_REDIRECTS),
            "--proto",
            "=http,https",
            "--proto-redir",
            "=http,https",
            "--http1.1",
            "--max-time",
            f"{timeout:g}",
            "--write-out",
            "%{exitcode} %{num_redirects}\\n",
        ]
        if cacert is not None:
            command += ["--cacert", str(cacert)]
        if proxy:
            command += ["--proxy", proxy, "--noproxy", ""]  # not the proxy variables of the test's environment
        for index, url in enumerate(urls):
            command += ["--output", str(directory / f"raw{index}"), url]
        run = subprocess.run(command, capture_output=True, timeout=timeout * len(urls) + 10, check=False)
        lines = run.stdout.decode().split()
        records = []
        for index in range(len(urls)):
            exit_code, redirects = int(lines[2 * index]), int(lines[2 * index + 1])
            if exit_code == 28:
                records.append(Recorded("timeout", 28))
            elif exit_code:
                records.append(Recorded("http", exit_code))
            else:
                raw = directory / f"raw{index}"
                if not raw.exists():
                    raw.write_bytes(b"")
                parsed = subprocess.run(
                    ["php", str(PARSE), str(raw), str(redirects)], capture_output=True, check=True, timeout=30
                )
                kind, code = parsed.stdout.decode().split()
                records.append(Recorded(kind, int(code)))
        return records
