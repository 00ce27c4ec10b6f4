"""Water-level history for the charts: sampled from the brokers' latest reports at a bounded rate
(every ``WATER_LEVEL_SAMPLE_SECONDS`` per broker), kept ``WATER_LEVEL_RETENTION_HOURS``."""

from django.db import models


class WaterLevelSample(models.Model):
    at = models.DateTimeField(db_index=True)
    cluster_name = models.CharField(max_length=255)
    broker_name = models.CharField(max_length=255)
    broker_id = models.BigIntegerField()
    role = models.CharField(max_length=20)
    master_epoch = models.IntegerField(default=-1)
    max_offset = models.BigIntegerField()
    confirm_offset = models.BigIntegerField()
    ack_offset = models.BigIntegerField(null=True, blank=True)  # a slave's ack at its master
    lag_bytes = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["broker_name", "at"], name="wl_group_time")]
        ordering = ["at"]
