"""The Django project (floor 1, the ground). Importing it starts nothing: the Celery app lives in
``controlplane.celery`` (``celery -A controlplane.celery``). The pure rules it shares with the brokers
(codes, validation, topic attributes, logical queues, keyed config) live below it, in ``mqrules``."""
