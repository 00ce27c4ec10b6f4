"""Whether this broker takes sends: one pure rule, ``write_gate`` (brokers/core/roles.py), and one owner,
``WritePermission``.

The facts come from three places (the HA service knows the role, the replicas manager knows whether
the controller has assigned one yet, the broker hears an operator's isolation from the control plane);
each feeds its fact to the owner, which alone decides, and the store asks the owner before every send.
Nothing else says whether the store is writable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..core.roles import BrokerRole, WriteReason, write_gate

log = logging.getLogger("brokers.ha")


@dataclass(frozen=True)
class WriteFacts:
    role: BrokerRole
    fenced: bool = False
    isolated: bool = False
    pre_online: bool = False
    disk_full: bool = False


class WritePermission:
    """The one owner of a broker's write permission: keeps the facts fed to it and the decision of
    ``write_gate`` over them. The store reads ``refusal()`` (its ``WriteGate`` protocol)."""

    def __init__(self, role: BrokerRole, *, fenced: bool = False, isolated: bool = False):
        self._facts = WriteFacts(role, fenced, isolated)
        self._writable, self._reason = write_gate(role, fenced=fenced, isolated=isolated)

    @property
    def facts(self) -> WriteFacts:
        return self._facts

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def reason(self) -> WriteReason:
        return self._reason

    def refusal(self) -> str | None:
        """None while sends are taken, else the detail a refused send carries."""
        return None if self._writable else self._reason.detail

    def update(
        self,
        *,
        role: BrokerRole | None = None,
        fenced: bool | None = None,
        isolated: bool | None = None,
        pre_online: bool | None = None,
        disk_full: bool | None = None,
    ) -> None:
        """Feed the facts that changed (None: unchanged) and decide again."""
        old = self._facts
        facts = WriteFacts(
            old.role if role is None else role,
            old.fenced if fenced is None else fenced,
            old.isolated if isolated is None else isolated,
            old.pre_online if pre_online is None else pre_online,
            old.disk_full if disk_full is None else disk_full,
        )
        if facts == old:
            return
        self._facts = facts
        writable, reason = write_gate(
            facts.role, fenced=facts.fenced, isolated=facts.isolated, pre_online=facts.pre_online, disk_full=facts.disk_full
        )
        if (writable, reason) != (self._writable, self._reason):
            log.info("write permission: %s (%s)", "writable" if writable else "refusing sends", reason.detail or "as master")
        self._writable, self._reason = writable, reason
