"""The floor under any broker that answers one unary gRPC call per operation: how many
EndTransaction calls per second one Python process answers (grpcio's asyncio server on uvloop, as the
brokers run it) when it does nothing else, and its CPU per call. bench/special_messages.py measures
it in the same run as its transactions (``txn_grpc_floor_per_s``): a transaction is one such call
(its half message rides in a batch), so no broker process that answers every EndTransaction itself
can commit more transactions per second than this on the same machine.

Run alone: ``python bench/grpc_floor.py [--calls N] [--concurrency C]``; the last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as rpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import process_cpu_s  # noqa: E402

READY_TIMEOUT_S = 30.0
CHANNELS = 4


class _Answers(rpc.MessagingServiceServicer):
    async def EndTransaction(self, request, context):
        return spb.EndTransactionResponse(status=pb.Status(code=pb.Code.OK))


async def _serve() -> None:
    server = grpc.aio.server()
    rpc.add_MessagingServiceServicer_to_server(_Answers(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)  # the parent reads the port, then measures
    await server.wait_for_termination()


async def _call(addr: str, calls: int, concurrency: int, options: list) -> float:
    channels = [grpc.aio.insecure_channel(addr, options=options) for _ in range(CHANNELS)]
    try:
        await asyncio.gather(*(asyncio.wait_for(c.channel_ready(), READY_TIMEOUT_S) for c in channels))
        stubs = [rpc.MessagingServiceStub(c) for c in channels]
        request = spb.EndTransactionRequest(
            topic=pb.Resource(name="Floor"), message_id="m", transaction_id="t", resolution=pb.TransactionResolution.COMMIT
        )
        left = calls
        start = time.perf_counter()

        async def caller(stub: rpc.MessagingServiceStub) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                answer = await stub.EndTransaction(request, timeout=READY_TIMEOUT_S)
                if answer.status.code != pb.Code.OK:
                    raise RuntimeError(f"floor server answered {answer.status.code}")

        await asyncio.gather(*(caller(stubs[i % CHANNELS]) for i in range(concurrency)))
        return time.perf_counter() - start
    finally:
        for c in channels:
            await c.close()


def measure(calls: int, concurrency: int, options: list | None = None) -> dict:
    """Start the floor server (its own process, 127.0.0.1, a free port), make ``calls`` calls with
    ``concurrency`` outstanding over CHANNELS channels, stop it. Calls per second and the server's
    CPU microseconds per call."""
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        if not line.isdigit():
            raise RuntimeError(f"the gRPC floor server did not start (it said {line!r})")
        before = process_cpu_s(server.pid) or 0.0
        seconds = asyncio.run(_call(f"127.0.0.1:{line}", calls, concurrency, options or []))
        used = (process_cpu_s(server.pid) or 0.0) - before
    finally:
        server.kill()
        server.wait(10)
    return {
        "grpc_floor_calls": calls,
        "grpc_floor_per_s": round(calls / seconds, 1),
        "grpc_floor_server_us_per_call": round(used / calls * 1e6, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=512)
    args = p.parse_args()
    if args.serve:
        try:
            import uvloop  # the brokers' loop (brokers/__main__.py)

            uvloop.install()
        except ImportError:
            pass
        asyncio.run(_serve())
        return
    print(json.dumps(measure(args.calls, args.concurrency)))


if __name__ == "__main__":
    main()
