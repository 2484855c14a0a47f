#!/usr/bin/env python3
"""The control-plane load balancer a user puts in front of the API servers, for the day-2 run's rolling control
plane (the endpoint must outlive the host it started on).

    tcp-lb.py LISTEN_HOST:PORT BACKEND_HOST:PORT...

Plain TCP (TLS passes through to the API servers), with the health check kubeadm's HA guide gives HAProxy: every
CHECK_EVERY seconds each backend's `GET /readyz` over TLS (certificate not verified, as `check-ssl verify none`);
a new connection goes to a backend whose last check answered 200, the one that last worked first. Why not connect
checks alone: a joining control plane's API server listens before its etcd member has joined and then holds
requests until they time out — with connect checks every client (kubelets, `kubeadm join` itself, which gives a
request 10 s) was sent there and hung (seen in the day-2 run's control-plane roll). When no backend is ready yet
(the first `kubeadm init`), a backend that accepts the connection within CONNECT_TIMEOUT is used. Health changes
are printed with a timestamp, so the run's lb.log shows when each API server came and went.
"""
import asyncio
import ssl
import sys
import time

CONNECT_TIMEOUT = 3
CHECK_EVERY = 2
CHECK_TIMEOUT = 3


def split(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def log(msg):
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


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


async def ready(host, port, ctx):
    """True when the API server answers `GET /readyz` with 200 within CHECK_TIMEOUT."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=ctx, server_hostname=host), CHECK_TIMEOUT
        )
        writer.write(f"GET /readyz HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), CHECK_TIMEOUT)
        return status.split()[1:2] == [b"200"]
    except (OSError, asyncio.TimeoutError, ssl.SSLError, IndexError):
        return False
    finally:
        if writer is not None:
            try:
                writer.close()
            except Exception:
                pass


class Balancer:
    def __init__(self, backends):
        self.backends = backends
        self.last = 0
        self.healthy = {b: False for b in backends}

    async def check_forever(self):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        while True:
            results = await asyncio.gather(*(ready(h, p, ctx) for h, p in self.backends))
            for backend, ok in zip(self.backends, results):
                if ok != self.healthy[backend]:
                    log(f"{backend[0]}:{backend[1]} {'ready' if ok else 'not ready'}")
                self.healthy[backend] = ok
            await asyncio.sleep(CHECK_EVERY)

    async def handle(self, creader, cwriter):
        order = self.backends[self.last:] + self.backends[: self.last]
        ready_ones = [b for b in order if self.healthy[b]]
        for host, port in ready_ones or order:
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
    checker = asyncio.create_task(lb.check_forever())
    server = await asyncio.start_server(lb.handle, host, port)
    log(f"listening on {host}:{port}, backends {' '.join(f'{h}:{p}' for h, p in lb.backends)}")
    async with server:
        await asyncio.gather(server.serve_forever(), checker)


asyncio.run(main())
