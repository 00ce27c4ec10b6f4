"""Batch jobs that run on Spark, outside Django: ``python -m spark_jobs.offset_audit``.

Nothing here imports Django: the jobs read their input (the Parquet event store, the controller's
history) and write their results (Postgres) with plain clients, so they run the same under
``python -m``, a Celery worker's subprocess, or ``spark-submit`` on a cluster.
"""
