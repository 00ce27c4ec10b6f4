"""The Django project (floor 1, the ground). Importing it starts nothing: the Celery app lives in
``controlplane.celery`` (``celery -A controlplane.celery``), so the pure modules below it
(``controlplane.codes``, ``controlplane.keyed_config``, ``controlplane.validation``) import with the
standard library alone."""
