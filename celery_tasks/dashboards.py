"""Dashboard upkeep: water-level samples for the charts."""

from celery import shared_task

from dashboards import sampling


@shared_task(name="dashboards.sample_water_levels", ignore_result=True)
def sample_water_levels() -> int:
    return sampling.sample()
