"""A small blocking remoting client for tests, chaos and benchmarks: one TCP connection, requests built
with mqrules/remoting's codec (headers from its field tables, transcribed from apache/rocketmq), answers
matched by ``opaque``. What a real 4.x client does beyond one request (routes, heartbeats every 30 s,
rebalancing) the tests do by hand with it, or leave to the real clients of clients/.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
from collections.abc import Mapping
from dataclasses import replace

from mqrules.remoting.decoder import FrameDecoder
from mqrules.remoting.frame import ONEWAY_FLAG, LanguageCode, RemotingCommand, SerializeType, encode_frame
from mqrules.remoting.headers import HeaderTable, HeaderValue, encode_header
from mqrules.remoting.properties import decode_properties, encode_properties

_HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")


class RemotingClient:
    def __init__(
        self,
        addr: str,
        *,
        timeout: float = 10.0,
        serialize_type: SerializeType = SerializeType.JSON,
        language: LanguageCode = LanguageCode.JAVA,
    ):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.serialize_type, self.language = serialize_type, language
        self.decoder = FrameDecoder()
        self._opaque = itertools.count(1)
        self.pushed: list[RemotingCommand] = []  # the server's own requests (oneway) read meanwhile

    def command(
        self, code: int, header: Mapping[str, HeaderValue] | None = None, table: HeaderTable | None = None, body: bytes = b""
    ) -> RemotingCommand:
        ext = encode_header(header or {}, table)
        return RemotingCommand(
            code=int(code),
            language=self.language,
            opaque=next(self._opaque),
            ext_fields=ext,
            body=body,
            serialize_type=self.serialize_type,
        )

    def request(
        self,
        code: int,
        header: Mapping[str, HeaderValue] | None = None,
        table: HeaderTable | None = None,
        body: bytes = b"",
        timeout: float | None = None,
    ) -> RemotingCommand:
        command = self.command(code, header, table, body)
        self.sock.sendall(encode_frame(command))
        return self.answer(command.opaque, timeout)

    def oneway(
        self, code: int, header: Mapping[str, HeaderValue] | None = None, table: HeaderTable | None = None, body: bytes = b""
    ):
        self.sock.sendall(encode_frame(replace(self.command(code, header, table, body), flag=ONEWAY_FLAG)))

    def answer(self, opaque: int, timeout: float | None = None) -> RemotingCommand:
        if timeout is not None:
            self.sock.settimeout(timeout)
        while True:
            for command in self.decoder.commands():
                if command.is_response and command.opaque == opaque:
                    return command
                if not command.is_response:
                    self.pushed.append(command)
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError(f"{self.addr} closed the connection")
            self.decoder.feed(data)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def properties(**values: str) -> str:
    return encode_properties(values)


def heartbeat_body(client_id: str, producer_groups=(), consumer_groups: Mapping[str, Mapping[str, str]] | None = None) -> bytes:
    """HeartbeatData: the producer groups, and per consumer group its subscriptions {topic: expression}."""
    consumers = [
        {
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [
                {"topic": t, "subString": e, "tagsSet": [], "codeSet": [], "subVersion": 1, "expressionType": "TAG"}
                for t, e in subs.items()
            ],
            "unitMode": False,
        }
        for group, subs in (consumer_groups or {}).items()
    ]
    data = {"clientID": client_id, "producerDataSet": [{"groupName": g} for g in producer_groups], "consumerDataSet": consumers}
    return json.dumps(data).encode()


def decode_records(body: bytes) -> list[dict]:
    """A pull's body (records as stored): topic, queue offset, physical offset, reconsume times, body and
    properties of each."""
    out, pos = [], 0
    while pos < len(body):
        head = _HEAD.unpack_from(body, pos)
        size, queue_id, queue_offset, physical, reconsume, body_len = head[0], head[3], head[5], head[6], head[14], head[16]
        p = pos + _HEAD.size
        data = body[p : p + body_len]
        p += body_len
        topic_len = body[p]
        topic = body[p + 1 : p + 1 + topic_len].decode()
        p += 1 + topic_len
        props_len = struct.unpack_from(">h", body, p)[0]
        props = decode_properties(body[p + 2 : p + 2 + props_len].decode())
        out.append(
            {
                "topic": topic,
                "queueId": queue_id,
                "queueOffset": queue_offset,
                "physicalOffset": physical,
                "reconsumeTimes": reconsume,
                "body": data,
                "properties": props,
            }
        )
        pos += size
    return out
