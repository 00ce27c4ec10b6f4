"""How ``make test`` shares the suite between its pytest-xdist workers (``-n 2 --dist loadfile``).

A test module is the unit of work (its module fixtures, a cluster started once for its tests, are
set up once), as with xdist's own ``loadfile``, with two changes:

- the Spark audits (``tests/audits/``) are one unit: one worker starts one JVM for all of them, in
  the order a serial run has;
- after the first units, the e2e modules (``tests/e2e/``, the longest by far) are handed out before
  the others, so that the run does not end on one worker finishing a long e2e module while the
  other has nothing left.

Each worker has a test database and Redis keys of its own (controlplane/settings_test.py). A plugin
of its own (loaded by tests/conftest.py, and only on the process that hands out the work).
"""

from __future__ import annotations

from collections import OrderedDict

import pytest

SPARK_UNIT = "tests/audits/"
E2E_MODULES = "tests/e2e/"


def unit_of(nodeid: str) -> str:
    """The unit of work ``nodeid`` belongs to: its module, or the Spark audits as a whole."""
    module = nodeid.split("::", 1)[0]
    return SPARK_UNIT if module.startswith(SPARK_UNIT) else module


def handed_out_first(unit: str) -> bool:
    return unit.startswith(E2E_MODULES)


def scheduler_class() -> type:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def __init__(self, config: pytest.Config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # the order is ours (schedule below)

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def schedule(self) -> None:
            super().schedule()
            if self.workqueue:
                queued = sorted(self.workqueue.items(), key=lambda unit: not handed_out_first(unit[0]))
                self.workqueue = OrderedDict(queued)

    return ModuleScheduling


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``: modules as units, the Spark audits as one, the e2e modules first."""
    if config.getvalue("dist") == "loadfile":
        return scheduler_class()(config, log)
    return None
