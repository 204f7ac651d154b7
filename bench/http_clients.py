"""Which HTTP client the delivery path uses, by measurement (issue 38): CPU per exchange of one thread against
the bench's nginx receiver (keep-alive, `return 200`), the same ~650-byte body and headers, rounds alternating
so that the machine's noise falls on all of them alike:

  http1    the delivery path's own HTTP/1.1 up to issue 38 (worker/http1.py of --base, read from git)
  curl     this tree's transport.post: libcurl through pycurl, a handle per hook, Phorge's parse of the answer
  pycurl   a bare pycurl easy handle and no callbacks: what libcurl itself costs, the floor of the second

    .venv/bin/python bench/http_clients.py [--base 9837ade] [--rounds 5] [--exchanges 3000]

It prints the median µs of CPU and of wall time per exchange of each, and each as a ratio of http1's.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pycurl  # noqa: E402

from bench.common import BenchError  # noqa: E402
from bench.receivers import make_receiver  # noqa: E402

BODY = b'{"object":{"type":"TASK","phid":"PHID-TASK-abcdefghijklmnopqrst"},"triggers":[],"action":{}}\n' * 7
SIGNATURE = "5" * 64


def _base_http1(base: str, directory: Path) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{base}:webhook_delivery/worker/http1.py"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    path = directory / "http1_base.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("http1_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["http1_base"] = module
    spec.loader.exec_module(module)
    return module


def _clients(base: str, port: int, directory: Path) -> dict[str, Callable[[], None]]:
    import django

    django.setup()
    from webhook_delivery.phorge.cabundle import CaBundle
    from webhook_delivery.phorge.netguard import system_resolver
    from webhook_delivery.worker import transport
    from webhook_delivery.worker.curl import Handles

    system = CaBundle(None, "variable", "GORGE_WEBHOOK_CA_BUNDLE=system")  # plain http: no bundle is read

    url = f"http://127.0.0.1:{port}/x"
    http1 = _base_http1(base, directory)
    pools = http1.Pools()
    key = http1.Key("http", "127.0.0.1", port, "")
    head = (
        f"POST /x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: Arcanist/1.0 cURL/7.88.1\r\nAccept: */*\r\n"
        f"Content-Type: application/json\r\nX-Phabricator-Webhook-Signature: {SIGNATURE}\r\n"
        f"Accept-Encoding: gzip\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode()

    def with_http1() -> None:
        answer = pools.exchange(key, ("127.0.0.1",), head + BODY, transport.Deadline.after(15), 0)
        assert answer.status == 200

    handles = Handles()  # the process's for this run, as a worker's dispatcher owns them

    def with_curl() -> None:
        deadline = transport.Deadline.after(15)
        hop = transport.check_uri(url, (), system_resolver, deadline)
        http = transport.post(
            url,
            BODY,
            SIGNATURE,
            handles=handles,
            owner="PHID-HOOK-bench",
            first_hop=hop,
            blacklist=(),
            deadline=deadline,
            ca=system,
        )
        assert http.error_code == 200

    bare = pycurl.Curl()
    bare.setopt(pycurl.URL, url)
    bare.setopt(pycurl.POSTFIELDS, BODY)
    bare.setopt(pycurl.HTTPHEADER, ["Content-Type: application/json", f"X-Phabricator-Webhook-Signature: {SIGNATURE}"])
    bare.setopt(pycurl.WRITEFUNCTION, len)

    def with_pycurl() -> None:
        bare.perform()
        assert bare.getinfo(pycurl.RESPONSE_CODE) == 200

    return {"http1": with_http1, "curl": with_curl, "pycurl": with_pycurl}


def _measure(client: Callable[[], None], exchanges: int) -> tuple[float, float]:
    for _ in range(200):
        client()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(exchanges):
        client()
    return (time.process_time() - cpu) / exchanges * 1e6, (time.perf_counter() - wall) / exchanges * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="9837ade", help="the commit whose worker/http1.py is measured")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--exchanges", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gwbench-http-") as scratch:
        receiver = make_receiver("nginx", Path(scratch)).start()
        try:
            clients = _clients(args.base, receiver.port, Path(scratch))
            cpu: dict[str, list[float]] = {name: [] for name in clients}
            wall: dict[str, list[float]] = {name: [] for name in clients}
            for _ in range(args.rounds):
                for name, client in clients.items():
                    used, took = _measure(client, args.exchanges)
                    cpu[name].append(used)
                    wall[name].append(took)
        finally:
            receiver.stop()
    base_cpu, base_wall = statistics.median(cpu["http1"]), statistics.median(wall["http1"])
    print(f"{'client':8} {'CPU µs/exchange':>16} {'wall µs/exchange':>17} {'CPU vs http1':>13} {'wall vs http1':>14}")
    for name in clients:
        mid_cpu, mid_wall = statistics.median(cpu[name]), statistics.median(wall[name])
        print(f"{name:8} {mid_cpu:16.1f} {mid_wall:17.1f} {mid_cpu / base_cpu:12.2f}x {mid_wall / base_wall:13.2f}x")
    print(f"({args.rounds} rounds of {args.exchanges} exchanges each, alternating; medians; base {args.base})")


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        sys.exit(f"bench: {exc}")
