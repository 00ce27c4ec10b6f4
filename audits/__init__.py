"""Audits of consumer-offset rollbacks: the offset event store, audit runs on Spark
(spark_jobs/offset_audit.py), their schedule, REST API and results page. docs/audits.md."""
