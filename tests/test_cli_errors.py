"""Bad input of any kind: one clear line on stderr, a non-zero exit, nothing lost."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tt.cli.main import main
from tt.store.reader import RunReader

JOB = textwrap.dedent("""
    import tt

    class Count(tt.Operator):
        def __init__(self):
            self.n = 0
        def process(self, row, port=0):
            self.n += 1
            HOOK
            yield row

    spark = tt.spark_session("t")
    df = spark.createDataFrame([{"id": i, "v": i % 7} for i in range(500)], "id long, v long").repartition(2)
    flow = tt.Dataflow("ok")
    flow.source("U", df).process(Count(), name="C").key_by(lambda r: r["v"], partitions=2) \\
        .process(Count(), name="K").collect("S")
    flow.run()
""")

JOB_OK = JOB.replace("HOOK", "pass")
JOB_OPERATOR_RAISES = JOB.replace("HOOK", "if row['id'] == 321: raise ZeroDivisionError('boom')")
assert JOB_OPERATOR_RAISES != JOB_OK

JOB_RAISES_EARLY = "import tt\nraise ValueError('no input configured')\n"


def _err(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _one_line(capsys, *needles: str) -> str:
    lines = _err(capsys)
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def job(tmp_path):
    def write(text: str, name: str = "job.py") -> Path:
        p = tmp_path / name
        p.write_text(text)
        return p
    return write


# --- before Spark starts ---------------------------------------------------------------

def test_missing_job_file(tmp_path, capsys):
    assert main(["record", str(tmp_path / "nope.py"), "-o", str(tmp_path / "r.db")]) == 2
    _one_line(capsys, "nope.py", "not found")
    assert not (tmp_path / "r.db").exists()


def test_job_with_a_syntax_error(job, tmp_path, capsys):
    assert main(["record", str(job("def f(:\n")), "-o", str(tmp_path / "r.db")]) == 2
    _one_line(capsys, "line 1")


@pytest.mark.parametrize("expr, needle", [("row['amount'] >", "invalid syntax (at its end)"),   # (Python says column 0)
                                          ("row[1] == )", "unmatched ')' (at column 11)"),
                                          ("amount > 3", "unknown name")])
def test_bad_condition(job, tmp_path, capsys, expr, needle):
    assert main(["record", str(job(JOB_OK)), "--when", expr, "-o", str(tmp_path / "r.db")]) == 2
    _one_line(capsys, needle)


def test_bad_duration(job, tmp_path, capsys):
    assert main(["record", str(job(JOB_OK)), "--every", "soon", "-o", str(tmp_path / "r.db")]) == 2
    _one_line(capsys, "bad duration")


def test_refuses_to_overwrite_a_run(job, tmp_path, capsys):
    out = tmp_path / "r.db"
    out.write_bytes(b"precious")
    assert main(["record", str(job(JOB_OK)), "-o", str(out)]) == 2
    _one_line(capsys, "--force")
    assert out.read_bytes() == b"precious"


def test_a_master_that_does_not_answer_is_named_at_once(job, tmp_path, capsys):
    """Spark retried an unreachable standalone master for 75 s, then said only that it could not
    create the session; tt asks the master's port first, and leaves no run file behind."""
    import socket

    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "r.db"
    assert main(["record", str(job(JOB_OK)), "--master", f"spark://127.0.0.1:{port}", "-o", str(out)]) == 2
    _one_line(capsys, f"no Spark master answers at spark://127.0.0.1:{port} (127.0.0.1:{port}: Connection refused)")
    assert not out.exists()


def test_unknown_cli_option(capsys):
    assert main(["record", "--nope", "x.py"]) == 2
    _one_line(capsys, "--nope")


# --- run files ---------------------------------------------------------------------------

def test_missing_run_file(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.db")]) == 1
    _one_line(capsys, "no such file")
    assert main(["verify", str(tmp_path / "missing.db")]) == 1
    _one_line(capsys, "no such file")


def test_foreign_files(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert main(["inspect", str(text)]) == 1
    _one_line(capsys, "not a tt run file")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    assert main(["verify", str(other)]) == 1
    _one_line(capsys, "not a tt run file")


def _tiny_run(path: Path) -> None:
    from tt.store import schema

    db = schema.create(path)
    db.conn.execute("INSERT INTO run (id, status) VALUES (1, 'complete')")
    db.conn.close()


def test_corrupt_run_file(tmp_path, capsys):
    run = tmp_path / "corrupt.db"
    _tiny_run(run)
    data = bytearray(run.read_bytes())
    data[100:] = b"\x00\xff" * ((len(data) - 100) // 2)
    run.write_bytes(bytes(data))
    assert main(["inspect", str(run)]) == 1
    _one_line(capsys, "damaged")


def test_run_file_from_a_newer_tt(tmp_path, capsys):
    run = tmp_path / "newer.db"
    _tiny_run(run)
    conn = sqlite3.connect(run)
    conn.execute("PRAGMA user_version=99")
    conn.commit()
    conn.close()
    assert main(["inspect", str(run)]) == 1
    _one_line(capsys, "newer tt")


def test_a_run_recorded_by_another_python_is_refused_before_its_code_runs(record, capsys):
    """Code pickled by one Python version crashes another (3.11's replayed by 3.12: a segmentation
    fault at the first tuple, exit 139). The run names its Python; a replay elsewhere stops first."""
    import json

    import workloads

    path = record(workloads.build_chain, watch="A", when="row['amount'] > 400")
    reader = RunReader(path)
    here = ".".join(map(str, sys.version_info[:3]))
    assert reader.python == {"implementation": sys.implementation.name, "version": here}
    reader.close()
    assert main(["verify", str(path)]) == 0
    capsys.readouterr()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value=? WHERE key='python'",
                 (json.dumps({"implementation": "cpython", "version": "3.9.18"}),))
    conn.commit()
    conn.close()
    for command in (["verify"], ["replay", "--jump", "1"], ["lineage", "A", "--where", "True", "--back"], ["debug"]):
        assert main([command[0], str(path), *command[1:]]) == 1, command
        _one_line(capsys, f"{path} was recorded with Python 3.9 (cpython 3.9.18); this tt runs on "
                          f"{sys.implementation.name} {here}", "replay it with tt installed in a Python 3.9")
    assert main(["inspect", str(path)]) == 0   # (what needs none of its code still reads, and says so)
    assert (f"workers  cpython 3.9.18 (here {sys.implementation.name} {here}, which cannot "
            f"replay it), hash seed") in capsys.readouterr().out


def test_unknown_operator_and_interaction_in_inspect(record, capsys):
    import workloads

    path = record(workloads.build_chain, watch="A", when="row['amount'] > 400")
    assert main(["inspect", str(path), "state", "--at", "1", "--op", "NOPE"]) == 2
    _one_line(capsys, "unknown operator 'NOPE'", "A, B")
    assert main(["inspect", str(path), "state", "--at", "9999"]) == 2
    _one_line(capsys, f"{path} has no interaction 9999; its complete ones: 0-")   # (not "not complete": it never was)
    big = "9" * 25   # past SQLite's 64-bit integers: it was an internal error (exit 70)
    assert main(["inspect", str(path), "state", "--at", big]) == 2
    _one_line(capsys, f"has no interaction {big}")
    assert main(["replay", str(path), "--jump", big]) == 2
    _one_line(capsys, f"has no interaction {big}")


# --- the job itself fails (Spark is running) ---------------------------------------------------

@pytest.mark.slow
def test_unknown_watch_operator(spark, job, tmp_path, capsys):
    out = tmp_path / "r.db"
    assert main(["record", str(job(JOB_OK)), "--watch", "NOPE", "-o", str(out)]) == 2
    _one_line(capsys, "unknown operator 'NOPE'", "U, C, K, S")
    assert RunReader(out).status == "failed"


@pytest.mark.slow
def test_job_raising_before_its_dataflow(spark, job, tmp_path, capsys):
    out = tmp_path / "r.db"
    assert main(["record", str(job(JOB_RAISES_EARLY)), "-o", str(out)]) == 1
    _one_line(capsys, "ValueError", "no input configured", "job.py line 2")
    reader = RunReader(out)
    assert reader.status == "failed" and "ValueError" in reader.run["error"]


@pytest.mark.slow
def test_operator_exception_is_recorded_and_debuggable(spark, job, tmp_path, capsys):
    out = tmp_path / "r.db"
    assert main(["record", str(job(JOB_OPERATOR_RAISES)), "--watch", "C", "-o", str(out)]) == 1
    line = _one_line(capsys, "ZeroDivisionError", "boom", "C:", "(job.py line ",
                     f"`tt debug {out}` opens just before the tuple it raised on")
    reader = RunReader(out)
    assert reader.status == "failed" and "ZeroDivisionError" in reader.run["error"]
    failure = reader.failures()[0]
    assert failure["op"] == "C" and "'id': 321" not in line and "321" in failure["row"]
    assert failure["position"] >= 0 and "Traceback" in failure["traceback"]


@pytest.mark.slow
def test_one_line_even_when_spark_is_noisy(job, tmp_path):
    """A fresh `tt record` process: the JVM's startup warnings and task tracebacks go to RUN.log."""
    out = tmp_path / "r.db"
    proc = subprocess.run([sys.executable, "-m", "tt", "record", str(job(JOB_OPERATOR_RAISES)), "--watch", "C",
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "ZeroDivisionError" in lines[0] and str(out) in lines[0]
    log = Path(str(out) + ".log").read_text()
    assert "ZeroDivisionError" in log  # Spark's own report is kept, not lost


@pytest.mark.slow
def test_one_line_when_the_jobs_query_is_refused(job, tmp_path):
    """A job whose query Spark refuses (an AnalysisException): PySpark logs it as a page of JSON
    (its `SQLQueryContextLogger`), which goes to RUN.log with Spark's other output; stderr has
    tt's one line."""
    out = tmp_path / "r.db"
    bad = "import tt\nspark = tt.spark_session('t')\nspark.range(3).selectExpr('CAST(id AS BINARY)').collect()\n"
    proc = subprocess.run([sys.executable, "-m", "tt", "record", str(job(bad)), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "AnalysisException" in lines[0] and "job.py line 3" in lines[0], lines[0]
    assert "SQLQueryContextLogger" in Path(str(out) + ".log").read_text()


@pytest.mark.slow
def test_a_condition_that_raises_is_reported_once(spark, job, tmp_path, capfd):
    """A condition that raises on some of θ's inputs counts them as false: the first exception is
    said as it comes, and how many raised once the job has run. One that raises on every input
    held for none: the run is kept, and the record fails with one line saying so (it exited 0).
    (capfd: during the job tt writes to the terminal's descriptor, Spark's output goes to RUN.log)"""
    out = tmp_path / "r.db"
    assert main(["record", str(job(JOB_OK)), "--watch", "C", "--when", "row['v'] % 2 == 0 and row['amount'] > 3",
                 "-o", str(out)]) == 0
    err = capfd.readouterr().err.splitlines()
    warnings = [line for line in err if "tt: warning" in line]
    assert len(warnings) == 2 and "KeyError" in warnings[0] and "'amount'" in warnings[0], err
    evens = sum(1 for i in range(500) if i % 7 % 2 == 0)   # (v = id % 7)
    assert warnings[1].endswith(f"raised on {evens} of C's 500 inputs, which count as false for it (the warning "
                                "above says the first exception)"), warnings[1]
    assert not [line for line in err if "tt: error" in line]

    out = tmp_path / "r2.db"
    assert main(["record", str(job(JOB_OK)), "--watch", "C", "--when", "row['amount'] > 3", "-o", str(out)]) == 1
    err = capfd.readouterr().err.splitlines()
    warnings = [line for line in err if "tt: warning" in line]
    assert len(warnings) == 1 and "KeyError" in warnings[0] and "'amount'" in warnings[0], err
    errors = [line for line in err if "tt: error" in line]
    assert errors == [f"tt: error: --when \"row['amount'] > 3\" raised on every one of C's 500 inputs, so it held "
                      f"for none and took no interaction: the warning above says its first exception. {out} is "
                      f"kept, with the interactions its start and end took; fix the condition and record again, "
                      f"or search the run with `tt replay {out} --run-until EXPR` (`c` in tt debug)"], err
    reader = RunReader(out)
    try:
        assert reader.status == "complete" and reader.when_counts() == (500, 500)
        assert [i.trigger for i in reader.interactions()] == ["start", "end"], reader.interactions()
    finally:
        reader.close()


def test_a_bug_in_tt_is_one_line_and_a_failure_exit(tmp_path, monkeypatch, capsys):
    """An unexpected exception inside tt (a bug, injected here) is one line on stderr and exit 70;
    the traceback only behind --debug."""
    from tt.store import reader

    def broken(self, path):
        raise TypeError("an injected bug")
    monkeypatch.setattr(reader.RunReader, "__init__", broken)
    run = tmp_path / "run.db"
    run.write_bytes(b"")
    assert main(["inspect", str(run)]) == 70
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "tt: error: internal error: TypeError: an injected bug (a bug in tt; `tt --debug inspect …` "
        "shows the traceback)"]
    with pytest.raises(TypeError, match="an injected bug"):
        main(["--debug", "inspect", str(run)])


def test_a_command_imports_its_own_module_alone_and_help_lists_every_command_in_order(tmp_path):
    """`tt inspect` does not wait for lineage's or the debugger's imports; `tt --help` after
    it, in the same process, still lists every command, in the same order; a misspelt one
    is offered its near name."""
    script = textwrap.dedent("""
        import contextlib, io, sys
        from tt.cli.main import main
        rc = main(["inspect", sys.argv[1]])
        print("LOADED", " ".join(m for m in ("tt.cli.lineage", "tt.cli.debug", "tt.replay.lineage", "textual")
                                 if m in sys.modules))
        print("RC", rc)
        with contextlib.redirect_stdout(io.StringIO()) as help_text:
            main(["--help"])
        box = help_text.getvalue().split("Commands", 1)[1].splitlines()   # a command's line starts at the box
        print("HELP", " ".join(line[2:].split(" ")[0] for line in box if line[:2] == "│ " and line[2] != " "))
        main(["linage", sys.argv[1]])
    """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "missing.db")],
                         capture_output=True, text=True, check=True)
    lines = dict(line.split(" ", 1) if " " in line else (line, "") for line in out.stdout.splitlines())
    assert lines["RC"] == "1"   # the run file is missing: one line, as ever
    assert lines["LOADED"] == ""
    assert lines["HELP"].split() == ["checkpoint", "debug", "demo", "inspect", "lineage", "migrate", "pack",
                                     "record", "replay", "verify"]
    assert "No such command 'linage'. Did you mean 'lineage'?" in out.stderr
