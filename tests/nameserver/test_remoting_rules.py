"""The nameserver remoting endpoint's rules (issue 36): which request codes it serves, refuses or does
not know (RequestCode.java's numbers, DefaultRequestProcessor's answers), and the bodies it shapes."""

from __future__ import annotations

import pytest

from mqrules.remoting.codes import ResponseCode
from nameserver import wire
from nameserver.core.remoting import Disposition, decide
from nameserver.core.values import Group, Member

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "code, disposition, answer, remark_has",
    [
        pytest.param(105, Disposition.SERVE, None, None, id="GET_ROUTEINFO_BY_TOPIC"),
        pytest.param(106, Disposition.SERVE, None, None, id="GET_BROKER_CLUSTER_INFO"),
        pytest.param(101, Disposition.SERVE, None, None, id="GET_KV_CONFIG"),
        pytest.param(206, Disposition.SERVE, None, None, id="GET_ALL_TOPIC_LIST_FROM_NAMESERVER"),
        pytest.param(
            103, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "POST /api/v1/nameserver/brokers/register", id="REGISTER_BROKER"
        ),
        pytest.param(104, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "/brokers/unregister", id="UNREGISTER_BROKER"),
        pytest.param(904, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "/brokers/heartbeat", id="BROKER_HEARTBEAT"),
        pytest.param(
            17, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "POST /api/v1/nameserver/topics", id="UPDATE_AND_CREATE_TOPIC"
        ),
        pytest.param(
            216,
            Disposition.REFUSE,
            ResponseCode.NO_PERMISSION,
            "DELETE /api/v1/nameserver/topics/{topic}",
            id="DELETE_TOPIC_IN_NAMESRV",
        ),
        pytest.param(205, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "wipe-write-perm", id="WIPE_WRITE_PERM_OF_BROKER"),
        pytest.param(327, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "add-write-perm", id="ADD_WRITE_PERM_OF_BROKER"),
        pytest.param(
            318, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "PATCH /api/v1/nameserver/config", id="UPDATE_NAMESRV_CONFIG"
        ),
        pytest.param(513, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "/static-topics", id="UPDATE_AND_CREATE_STATIC_TOPIC"),
        pytest.param(100, Disposition.REFUSE, ResponseCode.NO_PERMISSION, "no KV config", id="PUT_KV_CONFIG"),
        pytest.param(0, Disposition.UNSUPPORTED, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request code 0", id="unknown-0"),
        pytest.param(310, Disposition.UNSUPPORTED, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "310", id="a-broker-code"),
    ],
)
def test_decide(code, disposition, answer, remark_has):
    verdict = decide(code)
    assert (verdict.disposition, verdict.code) == (disposition, answer)
    if remark_has is None:
        assert verdict.remark is None
    else:
        assert remark_has in verdict.remark
    if disposition is Disposition.REFUSE:
        assert "read-only" in verdict.remark


def _group(cluster: str, name: str, ids: dict[int, str], acting: bool | None = None) -> Group:
    return Group(cluster, name, "z", acting, tuple(Member(i, a) for i, a in sorted(ids.items())))


@pytest.mark.parametrize(
    "groups, expected",
    [
        pytest.param({}, {"brokerAddrTable": {}, "clusterAddrTable": {}}, id="empty"),
        pytest.param(
            {"b2": _group("c1", "b2", {0: "h:2"}), "b1": _group("c1", "b1", {1: "h:11", 0: "h:10"}, True)},
            {
                "brokerAddrTable": {
                    "b2": {
                        "cluster": "c1",
                        "brokerName": "b2",
                        "brokerAddrs": {"0": "h:2"},
                        "zoneName": "z",
                        "enableActingMaster": False,
                    },
                    "b1": {
                        "cluster": "c1",
                        "brokerName": "b1",
                        "brokerAddrs": {"0": "h:10", "1": "h:11"},
                        "zoneName": "z",
                        "enableActingMaster": True,
                    },
                },
                "clusterAddrTable": {"c1": ["b1", "b2"]},
            },
            id="one-cluster-names-sorted-ids-quoted",
        ),
        pytest.param(
            {"x": _group("c2", "x", {}), "y": _group("c1", "y", {0: "h:1"})},
            {
                "brokerAddrTable": {
                    "x": {"cluster": "c2", "brokerName": "x", "brokerAddrs": {}, "zoneName": "z", "enableActingMaster": False},
                    "y": {
                        "cluster": "c1",
                        "brokerName": "y",
                        "brokerAddrs": {"0": "h:1"},
                        "zoneName": "z",
                        "enableActingMaster": False,
                    },
                },
                "clusterAddrTable": {"c1": ["y"], "c2": ["x"]},
            },
            id="two-clusters-a-set-without-members",
        ),
    ],
)
def test_rocketmq_cluster_info(groups, expected):
    assert wire.rocketmq_cluster_info(groups) == expected


def test_the_rest_cluster_info_is_rocketmq_s_plus_members():
    groups = {"b1": _group("c1", "b1", {0: "h:10"})}
    rest = wire.cluster_info(groups, {})
    members = rest["brokerAddrTable"]["b1"].pop("members")
    assert rest == wire.rocketmq_cluster_info(groups) and [m["brokerAddr"] for m in members] == ["h:10"]


@pytest.mark.parametrize("topics, expected", [([], []), (["b", "a", "%RETRY%g"], ["%RETRY%g", "a", "b"])], ids=["none", "sorted"])
def test_topic_list(topics, expected):
    assert wire.topic_list(topics) == {"topicList": expected}
