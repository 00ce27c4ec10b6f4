"""Slave-acting-master on the broker (RIP-32, reference §5.1 and §5.3): the acting master's duties
and the pre-online of a returning master.

* **Acting master.** The member-group tracker (members.py) reports the group's smallest live id. A
  slave that is the smallest while no master is alive acts for it: special services on (pop revive),
  pops, acks and the master-only reads served from the consumer state it followed
  (brokers/metalog.py ACTING). It stops when the minimum changes, or when the returning master pulls
  its state back.
* **Pre-online** (``enableSlaveActingMaster`` and not ``skipPreOnline``, ``totalReplicas`` > 1). The
  broker starts without registering and takes no writes. Every second it reads its member group:
  empty, it starts at once. As the master (id 0) it sends each other member EXCHANGE_BROKER_HA_INFO
  (906), waits until that member's HA link transfers, and pulls its consumer state (43), adopted if
  not older by DataVersion (the member stops acting as it answers). A slave asks its master for its
  HA address and waits for the handshake. Then it starts: registers, lets writes in, and (as
  master) records its state for the slaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..config import BrokerConfig
from ..core.roles import BrokerRole
from ..ha.packets import HAState
from ..ha.service import HAService
from ..meta import ConsumerMeta, MetaRejected
from ..metalog import MetaLog, MetaMode
from .members import MinBroker, parse_member_group
from .nameserver import ControlPlane, LinkDown
from .peers import PeerClient, PeerError, PeerRefused, RequestCode, ResponseCode, ha_info, parse_ha_info

log = logging.getLogger("brokers.preonline")

PRE_ONLINE_PERIOD_S = 1.0
HANDSHAKE_TIMEOUT_S = 10.0
PULL_TIMEOUT_S = 10.0


class ActingMaster:
    """What a broker does about its group's minimum and the peer requests of RIP-32."""

    def __init__(
        self,
        config: BrokerConfig,
        ha: HAService,
        meta: ConsumerMeta,
        metalog: MetaLog,
        link: ControlPlane,
        *,
        pre_online: bool = False,
        on_adopted: Callable[[], None] | None = None,
        on_acting: Callable[[bool], None] | None = None,
        take_timer_checkpoint: Callable[[dict], None] | None = None,
        take_resolutions: Callable[[dict], None] | None = None,
    ):
        """``pre_online``: the broker starts in pre-online (``run_pre_online`` ends it). Told:
        ``on_adopted()`` when a pre-online pull took a peer's consumer state, ``on_acting(acting)`` when
        this broker starts / stops acting as master; handed an acting master's answers during
        pre-online: its timer checkpoint (``take_timer_checkpoint``, GET_TIMER_CHECK_POINT) and the
        transactions it resolved (``take_resolutions``, GET_TRANSACTION_RESOLUTIONS)."""
        self.config, self.ha, self.meta, self.metalog, self.link = config, ha, meta, metalog, link
        self.pre_online = pre_online  # the tracker is paused meanwhile
        self._on_adopted = on_adopted
        self._on_acting = on_acting
        self._take_timer_checkpoint = take_timer_checkpoint
        self._take_resolutions = take_resolutions

    # --- the group's minimum (§5.1 onMinBrokerChange) ---------------------------------------------

    async def on_min_broker(self, change: MinBroker) -> None:
        if self.ha.role is not BrokerRole.SLAVE:
            return
        if change.min_broker_id == self.ha.broker_id:
            if self.config.enableSlaveActingMaster and self.metalog.mode is not MetaMode.ACTING:
                # Publish every whole record copied, and what still comes: a slave parks what its
                # master had not confirmed yet (reference §2.6), the last sends and acks it answered.
                self.ha.store.set_follow_max(True)
                await self.metalog.become_acting()
                if self._on_acting is not None:
                    self._on_acting(True)
        elif self.metalog.mode is MetaMode.ACTING:
            self._stop_acting()
        if change.min_broker_id == 0 and change.ha_addr:
            self.ha.on_master_ha_addr(change.ha_addr)

    def _stop_acting(self) -> None:
        self.metalog.become_follower()
        if self._on_acting is not None:
            self._on_acting(False)
        self.ha.store.set_follow_max(False)  # publish up to the master's confirm offset again

    # --- peer requests ------------------------------------------------------------------------------

    async def exchange_ha_info(self, body: dict) -> dict:
        """906: a master tells a slave where its HA server is (the slave follows it), and answers
        with this broker's own; an empty body only asks."""
        try:
            info = parse_ha_info(body)
        except ValueError as exc:
            raise PeerRefused(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        if info.master_ha_addr and self.ha.role is BrokerRole.SLAVE:
            log.info("master %s announces its HA address %s", info.master_addr, info.master_ha_addr)
            self.ha.master_ha_addr = info.master_ha_addr
        mine = self.config.ha_server_addr if self.ha.role is not BrokerRole.SLAVE else None
        return ha_info(mine, self.ha.store.max_offset, self.config.broker_addr)

    async def consumer_meta(self, body: dict) -> dict:
        """43: this broker's consumer state. ``handBack``: the returning master takes it over, so an
        acting master stops serving first (nothing it answers afterwards would be lost)."""
        if body.get("handBack") is True and self.metalog.mode is MetaMode.ACTING:
            log.info("handing the consumer state back to the returning master")
            self._stop_acting()
        return self.meta.snapshot()

    # --- pre-online (§5.3) -----------------------------------------------------------------------------

    async def run_pre_online(self, peers: PeerClient, start: Callable[[], Awaitable[None]]) -> None:
        """Loop until the broker may start, then ``start()``."""
        self.pre_online = True
        try:
            while True:
                try:
                    if await self._pre_online_once(peers):
                        break
                except (PeerError, OSError, TimeoutError, ValueError) as exc:
                    log.info("pre-online not done yet (%s); retrying in %.0f s", exc, PRE_ONLINE_PERIOD_S)
                except LinkDown:
                    pass  # the link comes back on its own; the next round waits for it
                except Exception:
                    log.exception("pre-online step failed; retrying")
                await asyncio.sleep(PRE_ONLINE_PERIOD_S)
            await start()
        finally:
            self.pre_online = False

    async def _pre_online_once(self, peers: PeerClient) -> bool:
        c = self.config
        await self.link.connected.wait()
        reply = await self.link.call("get_broker_member_group", {"clusterName": c.brokerClusterName, "brokerName": c.brokerName})
        members = {i: a for i, a in parse_member_group(reply).items() if a != c.broker_addr}
        if not members:
            log.info("pre-online: no other member of %s is alive; starting", c.brokerName)
            return True
        if c.brokerId == 0:
            for member_id, addr in sorted(members.items()):
                await self._take_back_from(peers, member_id, addr)
            return True
        master = members.get(0)
        if master is None:
            log.info("pre-online: no master alive; starting as slave %d", c.brokerId)
            return True
        info = parse_ha_info(await peers.call(master, RequestCode.EXCHANGE_BROKER_HA_INFO, {}))
        if info.master_ha_addr:
            self.ha.master_ha_addr = info.master_ha_addr
            await self._wait(lambda: self.ha.client is not None and self.ha.client.state is HAState.TRANSFER, "the HA handshake")
        return True

    async def _take_back_from(self, peers: PeerClient, member_id: int, addr: str) -> None:
        c = self.config
        body = ha_info(c.ha_server_addr, self.ha.store.max_offset, c.broker_addr)
        await peers.call(addr, RequestCode.EXCHANGE_BROKER_HA_INFO, body)
        await self._wait(lambda: self._transferring(member_id), f"slave {member_id}'s HA handshake")
        snapshot = await peers.call(addr, RequestCode.GET_CONSUMER_META, {"handBack": True}, timeout=PULL_TIMEOUT_S)
        timers = await peers.call(addr, RequestCode.GET_TIMER_CHECK_POINT, {}, timeout=PULL_TIMEOUT_S)
        if timers and self._take_timer_checkpoint is not None:
            self._take_timer_checkpoint(timers)
        resolutions = await peers.call(addr, RequestCode.GET_TRANSACTION_RESOLUTIONS, {}, timeout=PULL_TIMEOUT_S)
        if resolutions and self._take_resolutions is not None:
            self._take_resolutions(resolutions)
        try:
            adopted = self.meta.adopt_if_newer(snapshot)
        except MetaRejected as exc:
            log.warning("pre-online: refused the consumer state of broker %d at %s (%s); nothing changed", member_id, addr, exc)
            return
        if adopted:
            log.info("pre-online: took back the consumer state broker %d served while acting as master", member_id)
            self.meta.persist()
            if self._on_adopted is not None:
                self._on_adopted()

    def _transferring(self, member_id: int) -> bool:
        server = self.ha.server
        return server is not None and any(
            conn.slave_id == member_id and conn.state is HAState.TRANSFER for conn in server.connections
        )

    async def _wait(self, done: Callable[[], bool], what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HANDSHAKE_TIMEOUT_S
        while not done():
            if loop.time() > deadline:
                raise TimeoutError(f"{what} not seen within {HANDSHAKE_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.05)
