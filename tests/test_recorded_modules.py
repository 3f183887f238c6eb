"""The job's own modules replay as they ran (recorder/job_modules.py, replay/recorded_modules.py).

A job's function that calls into a module beside it is pickled with a reference to that
module. Replay imported it from the disk: after the user edited it (fixed the bug, say), a
jump showed states the recording never had, without a word. The oracle is the job's input:
each partition passes on 50 elements, so a `Counter` that adds 1 an element ends at 50, in
the recording and, whatever the file says since, in every replay.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tt.recorder.job_modules import job_modules
from tt.replay import recorded_modules

HELPER = textwrap.dedent("""
    STEP = 1

    class Counter:
        def __init__(self):
            self.n = 0

        def __call__(self, elements):
            for x in elements:
                self.n += STEP
                yield x
""")
LIB = textwrap.dedent("""
    def keep(x):
        return x % 5 != 0
""")
SHIPPED = textwrap.dedent("""
    class Summer:
        def __init__(self):
            self.total = 0

        def __call__(self, elements):
            for x in elements:
                self.total += x
                yield x
""")
LAZY = textwrap.dedent("""
    def double(x):
        return 2 * x
""")
JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from tt_test_helper_module import Counter     # beside the job
    from tt_test_lib_module import keep            # from a folder on PYTHONPATH

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.addPyFile(sys.argv[1])      # a zip Spark ships to its workers (and deletes at the end)
    from tt_test_shipped_module import Summer

    def doubled(x):
        import tt_test_lazy_module                 # imported in the workers alone: not stored
        return tt_test_lazy_module.double(x)

    rdd = spark.sparkContext.parallelize(range(100), 2).filter(keep).mapPartitions(Counter())
    print(rdd.mapPartitions(Summer()).map(doubled).count())
""")


def _tt(*args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "tt", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def _replayed_counts(run: Path) -> list:
    """Counter's instances' `n` at the run's last interaction, replayed in this process."""
    from tt.replay.session import DebugSession

    session = DebugSession(run)
    try:
        assert session.jump(session.interactions()[-1].k).ok
        return [session.state(f"Counter:{i}")["n"] for i in (0, 1)]
    finally:
        session.reader.close()


@pytest.mark.slow
def test_the_jobs_modules_replay_as_they_ran_after_they_changed_or_went(tmp_path):
    """Beside the job, on PYTHONPATH and in a zip shipped with `addPyFile`: each stored with the
    run. A module on PYTHONPATH was imported from the disk at replay, so after the user fixed it
    a replay showed states its code never had (`Counter.n` 38 where the run had 40)."""
    import zipfile

    job_dir, lib = tmp_path / "job", tmp_path / "lib"
    job_dir.mkdir()
    lib.mkdir()
    (job_dir / "tt_test_helper_module.py").write_text(HELPER)
    (job_dir / "job.py").write_text(JOB)
    (lib / "tt_test_lib_module.py").write_text(LIB)
    (lib / "tt_test_lazy_module.py").write_text(LAZY)
    shipped = tmp_path / "shipped.zip"
    with zipfile.ZipFile(shipped, "w") as z:
        z.writestr("tt_test_shipped_module.py", SHIPPED)
    run = tmp_path / "r.db"
    recorded = _tt("record", "job.py", "-o", str(run), "--", str(shipped), cwd=job_dir, pythonpath=lib)   # (its own Spark)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    assert "80" in recorded.stdout.splitlines()
    elsewhere = tmp_path / "elsewhere"   # (python -m puts the working folder on sys.path)
    elsewhere.mkdir()

    def verify(pythonpath: Path | None = lib) -> subprocess.CompletedProcess:
        return _tt("verify", str(run), cwd=elsewhere, pythonpath=pythonpath)

    found = verify()
    assert found.returncode == 0 and "every replayed state equals the recorded one" in found.stdout, found.stderr
    stored = {Path(p).name: p for p, in sqlite3.connect(run).execute("SELECT path FROM job_files")}
    assert stored.keys() == {"job.py", "tt_test_helper_module.py", "tt_test_lib_module.py", "tt_test_shipped_module.py"}
    assert "shipped.zip" in stored["tt_test_shipped_module.py"]   # (Spark's copy of the zip, gone once it ended)

    # the user changes them all: the replay still runs what ran
    (job_dir / "tt_test_helper_module.py").write_text(HELPER.replace("STEP = 1", "STEP = 2"))
    (lib / "tt_test_lib_module.py").write_text(LIB.replace("x % 5", "x % 4"))
    changed = verify()
    assert changed.returncode == 0 and "every replayed state equals the recorded one" in changed.stdout, \
        changed.stdout + changed.stderr
    shown = _tt("inspect", str(run), cwd=elsewhere).stdout.splitlines()
    line = next(x for x in shown if x.startswith("modules  "))
    assert "tt_test_helper_module (changed here since)" in line and "tt_test_lib_module (changed here since)" in line
    assert "tt_test_shipped_module (missing here since)" in line and "a replay runs them as recorded" in line, line
    assert "tt_test_helper_module" not in sys.modules
    sys.path.append(str(lib))
    try:
        assert _replayed_counts(run) == [40, 40]   # the 40 of a partition's 50 elements `keep` kept, one by one
        helper = sys.modules["tt_test_helper_module"]
        assert helper.__file__ == str((job_dir / "tt_test_helper_module.py").resolve())
        assert helper.STEP == 1   # the recorded module, not the file
        assert sys.modules["tt_test_lib_module"].keep(4)   # as recorded: `x % 4` would drop it
    finally:
        sys.path.remove(str(lib))
        for name in ("tt_test_lib_module", "tt_test_helper_module", "tt_test_shipped_module", "tt_test_lazy_module"):
            sys.modules.pop(name, None)
        recorded_modules.serve({})

    # or they are gone with the job's folder (a laptop with the run only): only the module the
    # workers alone imported is needed, and named
    (job_dir / "tt_test_helper_module.py").unlink()
    missing = verify(pythonpath=None)
    assert missing.returncode == 1
    assert re.search(r"doubled:[01] raised ModuleNotFoundError", missing.stdout), missing.stdout
    assert (" raised ModuleNotFoundError: No module named 'tt_test_lazy_module' on input #0 in replay, but "
            "not when recorded; the module is neither importable here nor stored with the run (a function imported it "
            "in Spark's workers alone): add the folder that holds it to PYTHONPATH") in missing.stdout, missing.stdout

    # the stored module is code: a run file whose copy was altered is not replayed without --trust
    with sqlite3.connect(run) as conn:
        conn.execute("UPDATE job_files SET text = replace(text, 'STEP = 1', 'STEP = 3')")
    altered = verify()
    assert altered.returncode != 0
    assert len(altered.stderr.splitlines()) == 1 and "was not recorded by you" in altered.stderr, altered.stderr


def test_the_jobs_modules_are_those_its_folder_made_importable_and_replay_serves_their_recorded_source(
        tmp_path, monkeypatch):
    """Spark-free: which modules the recorder stores, and the finder that imports them in replay."""
    folder = tmp_path / "job"
    site = folder / ".venv" / "lib" / "python3.11" / "site-packages"
    (folder / "ttm_pkg").mkdir(parents=True)
    site.mkdir(parents=True)
    (folder / "ttm_plain.py").write_text("VALUE = 'recorded'\n")
    (folder / "ttm_pkg" / "__init__.py").write_text("from . import ttm_sub\n")
    (folder / "ttm_pkg" / "ttm_sub.py").write_text("def f():\n    return 'recorded sub'\n")
    (site / "ttm_installed.py").write_text("X = 1\n")
    (folder / "ttm_pkg" / "ttm_other.py").write_text("Y = 1\n")   # importable as ttm_other only with ttm_pkg/ on the path
    # a file of the folder that is a link to one outside it: not the job's (its real file is elsewhere),
    # and a module imported through a link to the folder: the job's (paths are compared resolved)
    (tmp_path / "elsewhere.py").write_text("Z = 1\n")
    (folder / "ttm_linked.py").symlink_to(tmp_path / "elsewhere.py")
    (tmp_path / "via").mkdir()
    (tmp_path / "via" / "job").symlink_to(folder, target_is_directory=True)
    (folder / "ttm_through_link.py").write_text("W = 1\n")
    names = ("ttm_plain", "ttm_pkg", "ttm_pkg.ttm_sub", "ttm_installed", "ttm_other", "ttm_linked", "ttm_through_link")
    sys.path[:0] = [str(folder), str(site), str(folder / "ttm_pkg")]
    try:
        spec = importlib.util.spec_from_file_location("ttm_through_link", tmp_path / "via" / "job" / "ttm_through_link.py")
        sys.modules["ttm_through_link"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["ttm_through_link"])
        for name in names:
            importlib.import_module(name)
        found, left = job_modules(folder)
        found_before = job_modules(folder, frozenset(sys.modules))[0]
        monkeypatch.chdir(folder)   # a notebook's "job" is its kernel, in site-packages: its folder is the working one
        assert job_modules(site)[0].keys() == found.keys()
    finally:
        del sys.path[:3]
        for name in names:
            sys.modules.pop(name, None)
    assert left == []
    assert {n: (path, package) for n, (path, package, _) in found.items() if n.startswith("ttm_")} == {
        "ttm_plain": (str((folder / "ttm_plain.py").resolve()), False),
        "ttm_pkg": (str((folder / "ttm_pkg" / "__init__.py").resolve()), True),
        "ttm_pkg.ttm_sub": (str((folder / "ttm_pkg" / "ttm_sub.py").resolve()), False),
        "ttm_through_link": (str(tmp_path / "via" / "job" / "ttm_through_link.py"), False),
        # imported since the recording began, from outside an installed package: the job's too
        "ttm_other": (str((folder / "ttm_pkg" / "ttm_other.py").resolve()), False),
        "ttm_linked": (str(folder / "ttm_linked.py"), False)}
    # imported before it began (a test's, a notebook's own modules): only those the job's folder made importable
    assert {n for n in found_before if n.startswith("ttm_")} == {"ttm_plain", "ttm_pkg", "ttm_pkg.ttm_sub",
                                                                 "ttm_through_link"}
    assert found["ttm_plain"][2] == "VALUE = 'recorded'\n"

    # edited and gone since: replay imports the recorded source, under its recorded path
    (folder / "ttm_plain.py").write_text("VALUE = 'edited'\n")
    (folder / "ttm_pkg" / "ttm_sub.py").unlink()
    stored = {n: m for n, m in found_before.items() if n.startswith("ttm_")}
    try:
        assert sorted(recorded_modules.serve(stored)) == ["ttm_pkg", "ttm_pkg.ttm_sub", "ttm_plain", "ttm_through_link"]
        plain = importlib.import_module("ttm_plain")
        assert plain.VALUE == "recorded" and plain.__file__ == stored["ttm_plain"][0]
        assert importlib.import_module("ttm_pkg").ttm_sub.f() == "recorded sub"
        import inspect
        assert inspect.getsource(importlib.import_module("ttm_pkg.ttm_sub").f) == "def f():\n    return 'recorded sub'\n"

        # another run's modules: what this one served goes, what it serves comes
        other = {"ttm_plain": (stored["ttm_plain"][0], False, "VALUE = 'another run'\n")}
        assert recorded_modules.serve(other) == ["ttm_plain"]
        assert "ttm_pkg" not in sys.modules and "ttm_pkg.ttm_sub" not in sys.modules
        assert importlib.import_module("ttm_plain").VALUE == "another run"
        # the same run again (a session's next engine) keeps the modules it has
        served = sys.modules["ttm_plain"]
        recorded_modules.serve(dict(other))
        assert sys.modules["ttm_plain"] is served

        # a name this process imported from elsewhere keeps its module
        sys.modules["ttm_elsewhere"] = elsewhere = type(sys)("ttm_elsewhere")
        assert recorded_modules.serve({"ttm_elsewhere": ("/nowhere/ttm_elsewhere.py", False, "Z = 1\n")}) == []
        assert importlib.import_module("ttm_elsewhere") is elsewhere
    finally:
        recorded_modules.serve({})
        for name in (*names, "ttm_elsewhere"):
            sys.modules.pop(name, None)
    assert "ttm_plain" not in sys.modules
