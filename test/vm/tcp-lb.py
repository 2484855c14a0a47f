#!/usr/bin/env python3
"""The control-plane load balancer a user puts in front of the API servers, for the day-2 run's rolling control
plane (the endpoint must outlive the host it started on).

    tcp-lb.py LISTEN_HOST:PORT BACKEND_HOST:PORT...

Plain TCP (TLS passes through to the API servers): each connection goes to the first backend that accepts it,
trying the one that last worked first; a backend that refuses or does not answer within 3 s is skipped. No
health checks beyond that: a host being reset refuses connections, a joining one accepts once its API server
listens, which is what a TCP load balancer with connect checks does.
"""
import asyncio
import sys

CONNECT_TIMEOUT = 3


def split(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


class Balancer:
    def __init__(self, backends):
        self.backends = backends
        self.last = 0

    async def handle(self, creader, cwriter):
        order = self.backends[self.last:] + self.backends[: self.last]
        for host, port in order:
            try:
                breader, bwriter = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT)
            except (OSError, asyncio.TimeoutError):
                continue
            self.last = self.backends.index((host, port))
            await asyncio.gather(pipe(creader, bwriter), pipe(breader, cwriter))
            return
        cwriter.close()


async def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    host, port = split(sys.argv[1])
    lb = Balancer([split(b) for b in sys.argv[2:]])
    server = await asyncio.start_server(lb.handle, host, port)
    async with server:
        await server.serve_forever()


asyncio.run(main())
