"""Serves plotly.js from the PyPI package ``plotly`` as the static file ``js/plotly.min.js``.

The pages load no script from a CDN, and the 3+ MB bundle is not copied into the repository: this
finder points staticfiles at the copy the ``plotly`` package installs (``plotly/package_data/``), so
``runserver``, uvicorn + WhiteNoise (``WHITENOISE_USE_FINDERS``), the tests and ``collectstatic``
all find it under the one name.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.contrib.staticfiles.utils import matches_patterns
from django.core.checks import Warning
from django.core.files.storage import FileSystemStorage

STATIC_DIR = "js"
FILE_NAME = "plotly.min.js"
STATIC_PATH = f"{STATIC_DIR}/{FILE_NAME}"


def plotly_js_file() -> Path | None:
    """The installed ``plotly.min.js``, found without importing the (large) plotly package."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "package_data" / FILE_NAME
        if candidate.is_file():
            return candidate
    return None


class PlotlyJsFinder(BaseFinder):
    def __init__(self) -> None:
        self.file = plotly_js_file()
        self.storage: FileSystemStorage | None = None
        if self.file is not None:
            self.storage = FileSystemStorage(location=self.file.parent)
            # collectstatic and WhiteNoise put a storage's files under its ``prefix``.
            self.storage.prefix = STATIC_DIR

    def check(self, **kwargs) -> list:
        if self.file is None:
            return [
                Warning(
                    f"{FILE_NAME} not found: the water-level charts will not draw",
                    hint="install the 'plotly' package (a dependency in pyproject.toml)",
                    id="dashboards.W001",
                )
            ]
        return []

    # RemovedInDjango61Warning: ``**kwargs`` only carries the deprecated ``all`` argument.
    def find(self, path: str, find_all: bool = False, **kwargs):
        if kwargs:
            find_all = self._check_deprecated_find_param(find_all=find_all, **kwargs)
        match = str(self.file) if self.file is not None and path == STATIC_PATH else None
        if find_all:
            return [match] if match else []
        return match

    def list(self, ignore_patterns):
        if self.storage is not None and not matches_patterns(STATIC_PATH, ignore_patterns or []):
            yield FILE_NAME, self.storage
