"""EndTransaction for the official RocketMQ 5 clients: COMMIT or ROLLBACK a transaction
(brokers/transaction.py; the rules: brokers/core/transaction.py); a slave forwards it to its master
(forward.py). An unresolved answer to a check (resolution unspecified) leaves it to the next check."""

from __future__ import annotations

from collections.abc import Callable

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ..core.transaction import Resolution, TxnRefused, end_answer
from ..transaction import Transactions, TxnNotStored
from .codes import OK, send_code, status, status_of
from .forward import Forwarder

_RESOLUTIONS = {pb.TransactionResolution.COMMIT: Resolution.COMMIT, pb.TransactionResolution.ROLLBACK: Resolution.ROLLBACK}


class TransactionHandler:
    """``forwards()``: whether EndTransactions go to the group's master now (as sends do)."""

    def __init__(self, transactions: Transactions, to_master: Forwarder, forwards: Callable[[], bool]):
        self.transactions, self.to_master, self.forwards = transactions, to_master, forwards

    async def EndTransaction(self, request: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        if self.forwards() and (
            answer := await self.to_master.forward("EndTransaction", request, context, spb.EndTransactionResponse, self.forwards)
        ):
            return answer
        resolution = _RESOLUTIONS.get(request.resolution)
        early = end_answer(request.transaction_id, resolution)
        if early is not None:
            return spb.EndTransactionResponse(status=status_of(early))
        assert resolution is not None  # (end_answer answers an unresolved one)
        try:
            await self.transactions.end(request.transaction_id, request.topic.name, resolution)
        except TxnRefused as exc:
            return spb.EndTransactionResponse(status=status(pb.Code.INVALID_TRANSACTION_ID, str(exc)))
        except TxnNotStored as exc:
            return spb.EndTransactionResponse(status=status(send_code(exc.status), f"not resolved: {exc}"))
        return spb.EndTransactionResponse(status=OK)
