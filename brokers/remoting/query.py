"""QUERY_MESSAGE (12) for remoting clients (mqadmin queryMsgByKey / queryMsgByUniqueKey, the 4.x
clients' ``queryMessage`` and ``viewMessage`` by unique key), from the store's index
(brokers/store/index.py), answered as RocketMQ's QueryMessageProcessor answers: the records found, as
stored, concatenated in the body, and the index's last update (its newest file's endTimestamp and
endPhyOffset) in the header; QUERY_NOT_FOUND when none is. A request whose ``_UNIQUE_KEY_QUERY`` ext
field is ``true`` (MixAll.UNIQUE_MSG_QUERY_FLAG) looks for at most defaultQueryMaxNum (32) records.
VIEW_MESSAGE_BY_ID (33) is consumer.py's.
"""

from __future__ import annotations

from collections.abc import Callable

from mqrules.remoting.codes import RequestCode, ResponseCode
from mqrules.remoting.frame import RemotingCommand
from mqrules.remoting.headers import QUERY_MESSAGE_REQUEST, QUERY_MESSAGE_RESPONSE, encode_header, parse_header

from ..store.index import IndexDisabled
from ..store.store import MessageStore
from .server import Connection

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
DEFAULT_QUERY_MAX_NUM = 32  # MessageStoreConfig.defaultQueryMaxNum
MAX_QUERY_NUM = 1000  # what one answer holds at most (RocketMQ bounds it by maxMsgsNumBatch, 64, per file)


class QueryHandler:
    def __init__(self, store: MessageStore):
        self.store = store

    def handlers(self) -> dict[int, Callable]:
        return {RequestCode.QUERY_MESSAGE: self.query_message}

    def _last_update(self) -> tuple[int, int]:
        """(indexLastUpdateTimestamp, indexLastUpdatePhyoffset): the newest index file's end."""
        index = self.store.index
        files = index.files if index is not None else []
        if not files:
            return 0, 0
        _, end_ts, _, end_phy, _, _ = files[-1].header()
        return end_ts, end_phy

    async def query_message(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        h = parse_header(QUERY_MESSAGE_REQUEST, request.ext_fields)
        max_num = min(max(int(h["maxNum"]), 0), MAX_QUERY_NUM)  # type: ignore[arg-type]
        if request.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        begin, end = int(h["beginTimestamp"]), int(h["endTimestamp"])  # type: ignore[arg-type]
        try:
            offsets = await self.store.query_index(str(h["topic"]), str(h["key"]), begin, end, max_num)
        except IndexDisabled as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        records = [raw for offset in offsets if (raw := await self.store.read_record(offset)) is not None]
        if not records:
            return request.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        ts, phy = self._last_update()
        header = encode_header({"indexLastUpdateTimestamp": ts, "indexLastUpdatePhyoffset": phy}, QUERY_MESSAGE_RESPONSE)
        return request.response(ResponseCode.SUCCESS, None, ext_fields=header, body=b"".join(records))
