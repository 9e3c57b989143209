"""An open-loop load generator, run as a process of its own beside the server it loads (a client inside
the server's process would share its event loop and its GIL): requests start at a fixed rate whatever
the answers, as independent users' would, and each one's status, latency and Retry-After is printed as
JSON on stdout. It speaks HTTP/1.1 itself over asyncio streams, keeping idle connections for reuse: a
general client (httpx) spends milliseconds of CPU per request with hundreds of connections open, and
would measure itself rather than the server.

    python open_loop_load.py URL BODY_FILE --rate 100 --seconds 4     # open loop at 100 requests/s
    python open_loop_load.py URL BODY_FILE --sequential 20             # 20 requests one after another
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

TIMEOUT_S = 60.0


class Client:
    """POSTs one body to one URL, on kept-alive connections (one request at a time on each)."""

    def __init__(self, url: str, body: bytes):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.request = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def post(self) -> dict:
        start = time.perf_counter()
        try:
            status, headers = await asyncio.wait_for(self._exchange(), TIMEOUT_S)
            result = {"status": status, "retry_after": headers.get("retry-after")}
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
            result = {"status": f"{type(e).__name__}: {e}", "retry_after": None}
        result["latency_s"] = time.perf_counter() - start
        return result

    async def _exchange(self) -> tuple[int, dict[str, str]]:
        reader, writer = self.idle.pop() if self.idle else await asyncio.open_connection(self.host, self.port)
        writer.write(self.request)
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        await reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            writer.close()
        else:
            self.idle.append((reader, writer))
        return status, headers

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()


async def _run(url: str, body: bytes, rate: float, seconds: float, sequential: int) -> list[dict]:
    client = Client(url, body)
    try:
        if sequential:
            return [await client.post() for _ in range(sequential)]
        tasks = []
        start = time.perf_counter()
        for i in range(int(rate * seconds)):
            # Each request starts at its own time, not when an earlier one ends: an open loop.
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(client.post()))
        return list(await asyncio.gather(*tasks))
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("body", help="a file holding the JSON body every request sends")
    parser.add_argument("--rate", type=float, default=0.0, help="requests started per second")
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--sequential", type=int, default=0, help="instead: this many requests, one at a time")
    args = parser.parse_args()
    with open(args.body, "rb") as f:
        body = f.read()
    results = asyncio.run(_run(args.url, body, args.rate, args.seconds, args.sequential))
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
