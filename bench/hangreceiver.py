"""Receivers that are slow on purpose, for hundreds of connections at once (asyncio, one process).

`python bench/hangreceiver.py PORT LOGFILE`. A path starting with `/dead` reads the request and never
answers (the connection stays open until the client gives up); `/slow<ms>/...` answers 200 after that many
milliseconds. Every request is logged on arrival as "<epoch seconds.millis> 0 <path> <signature or ->", and
answered slow ones again with their status, in the format of bench/receivers.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import hitlog


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: IO[str]) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            signature = headers.get(hitlog.SIGNATURE_HEADER.lower(), "-")
            log.write(hitlog.line(0, path, signature))
            if path.startswith("/dead"):
                await reader.read()  # until the client closes
                return
            delay = int(path.split("/")[1][4:] or "0") if path.startswith("/slow") else 0
            await asyncio.sleep(delay / 1000)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            log.write(hitlog.line(200, path, signature))
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def serve(port: int, log: IO[str]) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, log), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    with open(path, "a", encoding="ascii", buffering=1) as log:
        asyncio.run(serve(port, log))


if __name__ == "__main__":
    main()
