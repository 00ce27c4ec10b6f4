"""A broker's write permission has one owner (brokers/ha/gate.py): ``write_gate`` decides from the
facts (role, fenced, isolated), ``WritePermission`` keeps them, and the store only asks it. The facts
arrive from the HA service (role), the replicas manager (fenced until the controller assigns a role)
and the broker (an operator's isolation, pushed or in a registration answer)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from brokers.broker import Broker
from brokers.config import BrokerConfig
from brokers.core.roles import BrokerRole, WriteReason, write_gate
from brokers.ha.gate import WritePermission
from brokers.ha.service import HAService
from brokers.store.message import Message
from brokers.store.store import MessageStore, PutMessageStatus, StoreConfig
from testkit.ports import free_port

pytestmark = pytest.mark.unit

BROKERS = Path(__file__).resolve().parents[2] / "brokers"
M, S, A = BrokerRole.SYNC_MASTER, BrokerRole.SLAVE, BrokerRole.ASYNC_MASTER


@pytest.mark.parametrize(
    ("role", "fenced", "isolated", "want"),
    [
        pytest.param(M, False, False, (True, WriteReason.WRITABLE), id="sync-master-takes-sends"),
        pytest.param(A, False, False, (True, WriteReason.WRITABLE), id="async-master-takes-sends"),
        pytest.param(S, False, False, (False, WriteReason.SLAVE), id="slave-refuses-sends"),
        pytest.param(M, True, False, (False, WriteReason.FENCED), id="controller-mode-master-before-a-role-is-fenced"),
        pytest.param(S, True, False, (False, WriteReason.FENCED), id="fenced-is-named-before-the-slave-role"),
        pytest.param(M, False, True, (False, WriteReason.ISOLATED), id="isolated-master-refuses-sends"),
        pytest.param(S, False, True, (False, WriteReason.ISOLATED), id="isolated-slave-is-named-isolated"),
        pytest.param(M, True, True, (False, WriteReason.ISOLATED), id="isolation-is-named-before-fencing"),
    ],
)
def test_write_gate(role, fenced, isolated, want):
    assert write_gate(role, fenced=fenced, isolated=isolated) == want


def test_every_refusal_has_a_detail_and_only_writable_has_none():
    assert {r: bool(r.detail) for r in WriteReason} == {r: r is not WriteReason.WRITABLE for r in WriteReason}


def test_the_owner_keeps_the_facts_fed_to_it_and_decides_with_write_gate():
    p = WritePermission(M, fenced=True)
    assert (p.writable, p.reason, p.refusal()) == (False, WriteReason.FENCED, WriteReason.FENCED.detail)
    p.update(fenced=False)
    assert (p.writable, p.refusal()) == (True, None)
    p.update(isolated=True)
    p.update(role=S)
    p.update(role=M)  # a role change does not lift an operator's isolation
    assert (p.writable, p.reason) == (False, WriteReason.ISOLATED)
    p.update(isolated=False)
    assert p.writable and p.facts.role is M and not p.facts.fenced


def test_the_store_asks_its_gate_and_has_no_writability_of_its_own(tmp_path):
    async def scenario():
        gate = WritePermission(M)
        store = MessageStore(StoreConfig(tmp_path, mapped_file_size_commit_log=64 * 1024), gate)
        await store.start()
        try:
            with pytest.raises(AttributeError):
                store.writable = True  # type: ignore[misc]
            assert not hasattr(store, "not_writable_reason")
            assert (await store.put_message(Message("T", 0, b"x"))).status is PutMessageStatus.PUT_OK
            gate.update(isolated=True)
            refused = await store.put_messages([Message("T", 0, b"y")] * 2)
            assert [(r.status, r.detail) for r in refused] == [
                (PutMessageStatus.SERVICE_NOT_AVAILABLE, "isolated by an operator")
            ] * 2
            assert not store.writable
        finally:
            await store.shutdown()

    asyncio.run(scenario())


def _writes_to_writability(tree: ast.AST) -> list[int]:
    """Lines that assign a ``writable``-like attribute or call ``write_gate``."""
    lines = []
    for node in ast.walk(tree):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AugAssign | ast.AnnAssign)
            else []
        )
        for t in targets:
            if isinstance(t, ast.Attribute) and ("writable" in t.attr.lower() or t.attr == "not_writable_reason"):
                lines.append(t.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name == "write_gate":
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "setattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and "writable" in str(node.args[1].value):
                lines.append(node.lineno)
    return lines


def test_no_module_but_the_gate_decides_writability():
    """A second place that sets writability (a store flag, a reason string as state) fails here."""
    found = {}
    for path in sorted(BROKERS.rglob("*.py")):
        if path.name == "gate.py" and path.parent.name == "ha":
            continue
        lines = _writes_to_writability(ast.parse(path.read_text(), str(path)))
        if lines:
            found[str(path.relative_to(BROKERS.parent))] = lines
    assert found == {}, "only brokers/ha/gate.py decides whether the broker takes sends"
    # ... and the scan does see such a write:
    assert _writes_to_writability(ast.parse("store.writable = False\nx = write_gate(M, fenced=1, isolated=0)")) == [1, 2]


def broker_config(tmp_path: Path, **extra) -> BrokerConfig:
    return BrokerConfig(
        brokerName="g",
        brokerId=0,
        storePathRootDir=str(tmp_path),
        controlPlaneUrl="http://127.0.0.1:9",
        controlPlaneToken="unused",
        mappedFileSizeCommitLog=64 * 1024,
        haListenPort=free_port(),
        **extra,
    )


def test_the_broker_takes_isolation_from_every_registration_answer_and_from_the_push(tmp_path):
    """A restarted broker (or one that missed the push) learns it is isolated from its next
    registration answer; an answer that does not say leaves the last word standing."""

    async def scenario():
        broker = Broker(broker_config(tmp_path))
        assert broker.store.writable and broker.store.writable is broker.permission.writable
        broker._on_registered({"haServerAddr": "", "isolated": True})
        assert (broker.isolated, broker.permission.reason) == (True, WriteReason.ISOLATED)
        broker._on_registered({"haServerAddr": ""})  # a control plane that does not say
        assert not broker.store.writable
        broker._on_registered({"haServerAddr": "", "isolated": False})
        assert broker.store.writable
        await broker._on_isolate({"isolated": True})
        assert not broker.store.writable and broker.permission.reason is WriteReason.ISOLATED
        await broker._on_isolate({"isolated": False})
        assert broker.store.writable

    asyncio.run(scenario())


def test_controller_mode_role_changes_feed_the_gate_and_isolation_outlives_them(tmp_path):
    """Controller mode: fenced until a role is assigned; a slave refuses; a master takes sends unless
    isolated, and an isolation set while a slave still holds after becoming master."""

    async def scenario():
        cfg = broker_config(tmp_path, enableControllerMode=True)
        gate = WritePermission(BrokerRole(cfg.brokerRole), fenced=True)
        store = MessageStore(StoreConfig(tmp_path, mapped_file_size_commit_log=64 * 1024), gate)
        ha = HAService(cfg, store, gate)
        await store.start()
        await ha.start()
        try:
            assert gate.reason is WriteReason.FENCED
            await ha.change_to_slave()
            gate.update(fenced=False)  # what the replicas manager feeds once the controller answered
            assert gate.reason is WriteReason.SLAVE
            gate.update(isolated=True)  # what the broker feeds from a push or a registration answer
            await ha.change_to_master(1, {cfg.brokerId})
            assert (gate.reason, store.writable) == (WriteReason.ISOLATED, False)
            gate.update(isolated=False)
            assert store.writable and (await store.put_message(Message("T", 0, b"x"))).status is PutMessageStatus.PUT_OK
            await ha.change_to_slave()
            assert gate.reason is WriteReason.SLAVE and not store.writable
        finally:
            await ha.stop()
            await store.shutdown()

    asyncio.run(scenario())
