"""The broker's access control (ACL 2.0, issue 39; docs/acl.md): the cluster's users and policies as the
control plane last sent them, and the two checks the client edges make of every request before any
handler runs (brokers/grpc/guard.py, brokers/remoting/guard.py). The rules are mqrules/acl.py's; what
each request asks is brokers/core/access.py's.

The snapshot comes whole with every registration answer (``acl``) and every ``acl_update`` push; the
highest version seen is kept, in memory only (a lower or equal one is ignored, a malformed one logged
without its content and ignored). It holds the users' secret keys: nothing here logs a snapshot, a
user or a credential.

Fail closed: with authentication or authorization on, every request is refused until a first snapshot
arrives. A broker restarted while a policy changes therefore holds nothing stale: it refuses until its
first registration answer, which carries the latest policy.

Per-call cost (bench/acl.py holds sends per second with access control on to ≥ 0.9 of off): a gRPC
credential is parsed and its signature checked once per (authorization, x-mq-date-time) pair (clients
sign a date of one-second resolution, so one check serves a second of calls); the date's skew is still
checked at every call. Authorization judgements are kept per (user, asks, address). Both caches are
dropped with each new snapshot and bounded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from mqrules.acl import (
    AclSnapshot,
    Judgement,
    User,
    Verdict,
    authenticate_grpc,
    authenticate_remoting,
    dated,
    parse_grpc_authorization,
    signed_at_ms,
    snapshot_from_wire,
)

from .core.access import Ask

log = logging.getLogger("brokers.acl")

AUTHORIZATION, DATE_TIME = "authorization", "x-mq-date-time"  # gRPC metadata keys (lower-case, as gRPC has them)
NOT_YET = Judgement(Verdict.UNAUTHENTICATED, "access-control data not received yet")
ALLOWED = Judgement(Verdict.ALLOWED)
CACHE_LIMIT = 4096  # entries of each cache; past it the cache starts over


class AccessControl:
    """``enabled``: whether the edges check at all, read at every call (``switch`` changes it on a running
    broker). ``registered(reply)`` and ``pushed(payload)`` take snapshots from the control plane, whether
    or not the edges check, so that switching on finds the cluster's users already here."""

    def __init__(self, authentication: bool, authorization: bool, skew_ms: int, clock: Callable[[], float] = time.time):
        self.authentication, self.authorization, self.skew_ms = authentication, authorization, skew_ms
        self.clock = clock
        self.snapshot: AclSnapshot | None = None
        # (authorization, x-mq-date-time) -> (judgement but the date's skew, user, signed ms)
        self._credentials: dict[tuple[str, str], tuple[Judgement, User | None, int]] = {}
        self._judgements: dict[tuple[str, tuple[Ask, ...], str | None], Judgement] = {}

    @property
    def enabled(self) -> bool:
        return self.authentication or self.authorization

    def switch(self, authentication: bool, authorization: bool) -> None:
        """An operator turned the checks on or off on the running broker (updateBrokerConfig): the edges
        read ``enabled`` at every call. The snapshot is kept whether or not they check."""
        if (authentication, authorization) != (self.authentication, self.authorization):
            log.warning("access control: authentication %s, authorization %s", authentication, authorization)
        self.authentication, self.authorization = authentication, authorization
        self._judgements.clear()

    @property
    def version(self) -> int | None:
        return self.snapshot.version if self.snapshot is not None else None

    # --- snapshots from the control plane ------------------------------------------------------------

    def apply(self, raw: object, source: str) -> bool:
        """Take ``raw`` (the wire form) if it is newer than what is held; whether it was taken."""
        if not isinstance(raw, Mapping):
            log.warning("access control: ignored a %s snapshot that is not an object", source)
            return False
        version = raw.get("version")
        if isinstance(version, int) and self.snapshot is not None and version <= self.snapshot.version:
            return False  # the one held, repeated (every registration answer), or an older one
        try:
            snapshot = snapshot_from_wire(raw)
        except ValueError as exc:  # its messages name fields and values of policies, never a secret
            log.warning("access control: ignored a malformed %s snapshot (%s)", source, str(exc)[:300])
            return False
        self.snapshot = snapshot
        self._credentials.clear()
        self._judgements.clear()
        log.info(
            "access control: version %d from the %s (%d users, %d with policies)",
            snapshot.version,
            source,
            len(snapshot.users),
            len(snapshot.policies),
        )
        return True

    def registered(self, reply: Mapping) -> None:
        """A registration answer: it repeats the cluster's snapshot (``acl``), so a lost push only delays."""
        if "acl" in reply:
            self.apply(reply["acl"], "registration answer")

    async def pushed(self, payload: dict) -> None:
        """The ``acl_update`` frame: a change, pushed at once."""
        self.apply(payload, "push")

    # --- the checks ----------------------------------------------------------------------------------

    def check_grpc(self, metadata: Iterable[tuple[str, str]], peer_ip: str | None, asks: tuple[Ask, ...]) -> Judgement:
        """A gRPC call: its ``authorization`` and ``x-mq-date-time`` metadata, its peer's address, and what
        it asks (brokers/core/access.py)."""
        snapshot = self.snapshot
        if snapshot is None:
            return NOT_YET
        header = date_time = None
        for key, value in metadata:
            if key == AUTHORIZATION:
                header = value
            elif key == DATE_TIME:
                date_time = value
        if self.authentication:
            judgement, user = self._authenticated(snapshot, header, date_time)
            if not judgement.allowed:
                return judgement
        else:
            user = snapshot.users.get(_grpc_access_key(header))
        return self._authorized(snapshot, user, peer_ip, asks)

    def check_remoting(
        self, fields: Mapping[str, str], body: bytes | None, peer_ip: str | None, asks: tuple[Ask, ...]
    ) -> Judgement:
        """A remoting request: its ``AccessKey`` / ``Signature`` fields over its fields and body."""
        snapshot = self.snapshot
        if snapshot is None:
            return NOT_YET
        if self.authentication:
            judgement, user = authenticate_remoting(snapshot.users, fields, body)
            if not judgement.allowed:
                return judgement
        else:
            user = snapshot.users.get(fields.get("AccessKey", ""))
        return self._authorized(snapshot, user, peer_ip, asks)

    def _authenticated(self, snapshot: AclSnapshot, header: str | None, date_time: str | None) -> tuple[Judgement, User | None]:
        now_ms = int(self.clock() * 1000)
        key = (header or "", date_time or "")
        cached = self._credentials.get(key)
        if cached is None:
            try:
                signed = signed_at_ms(date_time or "")
            except ValueError:
                signed = now_ms  # refused below for its form, whatever its date
            judgement, user = authenticate_grpc(snapshot.users, header, date_time, signed, self.skew_ms)
            cached = (judgement, user, signed)
            if len(self._credentials) >= CACHE_LIMIT:
                self._credentials.clear()
            self._credentials[key] = cached
        judgement, user, signed = cached
        if judgement.allowed:
            window = dated(signed, now_ms, self.skew_ms)  # the cached check's date, against this call's clock
            if not window.allowed:
                return window, None
        return judgement, user

    def _authorized(self, snapshot: AclSnapshot, user: User | None, peer_ip: str | None, asks: tuple[Ask, ...]) -> Judgement:
        if not self.authorization or not asks:
            return ALLOWED
        key = (user.username if user is not None else "", asks, peer_ip)
        judgement = self._judgements.get(key)
        if judgement is None:
            judgement = ALLOWED
            for ask in asks:
                judgement = snapshot.authorize(user, ask.resource, ask.actions, peer_ip)
                if not judgement.allowed:
                    break
            if len(self._judgements) >= CACHE_LIMIT:
                self._judgements.clear()
            self._judgements[key] = judgement
        return judgement


def _grpc_access_key(header: str | None) -> str:
    """Who a call says it is, unverified (authorization without authentication, as RocketMQ allows)."""
    try:
        return parse_grpc_authorization(header).access_key if header else ""
    except ValueError:
        return ""
