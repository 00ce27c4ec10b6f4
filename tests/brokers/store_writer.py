"""A child process for the kill -9 test: sends messages under SYNC_FLUSH from many concurrent
senders and prints "ACK <id>" after each acknowledged send, until it is killed."""

import asyncio
import sys
from pathlib import Path

from brokers.store.message import Message
from brokers.store.store import FlushDiskType, MessageStore, StoreConfig


async def main(root: str) -> None:
    store = MessageStore(StoreConfig(Path(root), mapped_file_size_commit_log=64 * 1024, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    await store.start()
    print("READY", flush=True)
    counter = 0

    async def sender(k: int) -> None:
        nonlocal counter
        while True:
            counter += 1
            ident = f"m{counter}"
            result = await store.put_message(Message("Crash", k % 4, ident.encode() * 20, {"KEYS": ident}))
            if result.status == "PUT_OK":
                sys.stdout.write(f"ACK {ident}\n")
                sys.stdout.flush()

    await asyncio.gather(*(sender(k) for k in range(16)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
