"""``rmqha``: the operator's command line (``python -m controlplane.cli``). It speaks the REST API only,
as any client would, with a token from ``--token-file`` or ``RMQHA_TOKEN`` (an admin's, or an
operator's; a ``read`` token for the reads) and the control plane's URL from ``--url`` or
``RMQHA_URL``. Verbs and option letters are mqadmin's where mqadmin has them. Tables for people by
default, ``--json`` (before or after the verb) for scripts: the API's answer as it came. Imports no
Django, and nothing heavy before it is needed: it starts as a fresh process per command
(bench/dashboard.py measures ``clusterList``). Every verb with an example: docs/cli.md.

    rmqha clusterList                                  rmqha topicRoute -t Orders
    rmqha updateTopic -t Orders -c DefaultCluster -r 8 -w 8 -a +message.type=FIFO
    rmqha consumerProgress [-g group]                  rmqha resetOffsetByTime -g G -t T -s now
    rmqha getSyncStateSet -b broker-a                  rmqha electMaster -bn broker-a -b 2
    rmqha updateBrokerConfig -b broker-a -k k -v v     rmqha isolate -b broker-a -i 2
    rmqha remappingStaticTopic -t Orders --drain broker-a [--to broker-b] [--preview | --yes]

Changes that put data at risk (updateBrokerConfig, resetOffsetByTime, skipAccumulatedMessage, drill,
remappingStaticTopic) show their preview first and apply after a confirmation; ``--yes`` applies
without asking, ``--preview`` changes nothing.
"""

from controlplane.cli import acl, audits, brokers, consumers, controller, messages, operations, static_topics, topics  # noqa: F401 - their verbs
from controlplane.cli.root import main

__all__ = ["main"]
