"""The messaging rules both halves of the system share: pure, the standard library only.

The control plane (REST validation, the nameserver's routes, the controller's config) and the brokers
(broker.conf, topic types, static topics) apply the same rules, so they live here, below both: a broker
install carries this package and never ``controlplane``.

- ``codes``: RocketMQ's response codes and the websocket close codes.
- ``validation``: names, numbers and JSON fields, as the REST API and broker.conf check them.
- ``topic_attributes``: topic attributes and message types.
- ``logical_queues``: static topics' mappings, segments and logical offsets.
- ``keyed_config``: the keyed config entries and the secret keys never reported.
- ``acl``: RocketMQ's ACL 2.0: users, policies, who may do what, and the clients' signatures.
- ``textformat``: gauge families in Prometheus' text format, as prometheus_client writes them (both exporters).
"""
