"""What the commands say: help defaults, conditions that raise or name unknown fields,
damaged and never-started run files, `tt migrate`, `--states none`."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

import workloads
from tt.cli.main import main
from tt.recorder.session import RecordingSession
from tt.core.logs import END
from tt.store import schema
from tt.store.reader import RunReader


def _err(capsys) -> tuple[str, list[str]]:
    captured = capsys.readouterr()
    return captured.out, [line for line in captured.err.splitlines() if line.strip()]


def _one_line(capsys, *needles: str) -> str:
    _, lines = _err(capsys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("tt: error: ") and "Traceback" not in lines[0], lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def chain_run(spark, tmp_path_factory):
    """A deterministic run: A (θ: highest, seen) → B, four instances each."""
    path = tmp_path_factory.mktemp("cli_messages") / "chain.db"
    session = RecordingSession(path, Path(__file__), [], watch="A", every=None, when="row['amount'] > 400")
    try:
        with session:
            workloads.build_chain(spark).run()
    finally:
        session.close()
    return path


@pytest.fixture
def copy(chain_run, tmp_path):
    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copy(chain_run, dst)
        return dst
    return make


# --- help ---------------------------------------------------------------------------------------

def test_help_shows_the_defaults_written_in_brackets(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TERMINAL_WIDTH", "200")
    assert main(["replay", "--help"]) == 0
    out = capsys.readouterr().out
    assert "[default: 0; for a failed run, just before the tuple it failed on]" in out, out
    assert "[default: changed]" in out and "first ." not in out
    assert main(["record", "--help"]) == 0
    out = capsys.readouterr().out
    assert "[default: JOB name + .db]" in out and "[default: the first stateful one;" in out, out
    assert "StatefulProcessors" in out and "mapInPandas functions" not in out


# --- conditions -------------------------------------------------------------------------------------

def test_a_condition_that_always_raises_is_reported_once(chain_run, capsys):
    assert main(["replay", str(chain_run), "--run-until", "1/0"]) == 1
    out, err = _err(capsys)
    assert not err, err
    assert out.count("ZeroDivisionError") == 1, out
    assert "run_until 1/0: not possible" in out
    assert "the condition '1/0' raised ZeroDivisionError: division by zero every time it was evaluated" in out


def test_a_condition_that_sometimes_raises_says_so_once(chain_run, capsys):
    assert main(["replay", str(chain_run), "--run-until", "A.seen > 10 and row['nope'] > 0", "--json"]) == 1
    out, err = _err(capsys)
    assert not err, err
    last = json.loads(out)[-1]
    assert not last["ok"] and last["note"].startswith("the condition never held before the end of the run")
    assert "it raised KeyError: 'nope' on " in last["note"] and "those count as false" in last["note"]


def test_a_run_until_at_the_end_of_the_run_says_no_step_is_left(chain_run, capsys):
    """A condition is checked after each step: at the end of the run there is none, and it was
    said to have 'never held before the end of the run', of a condition that held there."""
    reader = RunReader(chain_run)
    try:
        last = reader.interactions()[-1].k
    finally:
        reader.close()
    assert main(["replay", str(chain_run), "--to", str(last), "--run-until", "A.seen > 0", "--json"]) == 1
    out, _ = _err(capsys)
    step = json.loads(out)[-1]
    assert not step["ok"] and step["note"] == "no tuple is left to step here: the run ends at this position", step


def test_a_condition_binds_its_own_names(chain_run, capsys):
    """A generator's `for k, v in ...`, a lambda's parameter and `:=` bind names of the condition's
    own: they were refused as unknown names, and a generator, once let through, could not see the
    operators (evaluated as locals, which a generator's scope does not read). Each stops where the
    same condition written without them stops; an unbound name is still refused."""
    stops = []
    for condition in ("max(A.highest.values(), default=0) > 300",
                      "any(v > 300 for k, v in A.highest.items())",
                      "(lambda h: max(h.values(), default=0))(A.highest) > 300",
                      "(m := max(A.highest.values(), default=0)) > 300 and m > 0"):
        assert main(["replay", str(chain_run), "--run-until", condition, "--json"]) == 0, condition
        out, err = _err(capsys)
        assert not err, err
        step = json.loads(out)[-1]
        assert step["ok"] and "raised" not in step.get("note", ""), step
        stops.append(json.dumps(step["stopped_at"], sort_keys=True))
    assert len(set(stops)) == 1 and json.loads(stops[0]), stops
    assert main(["replay", str(chain_run), "--run-until", "any(v > w for v in A.highest.values())"]) == 2
    _one_line(capsys, "unknown name(s) w")


def test_unknown_fields_and_instances_are_refused_before_running(chain_run, capsys):
    assert main(["replay", str(chain_run), "--run-until", "A.nope > 3"]) == 2
    _one_line(capsys, "unknown field 'nope' of A (fields: highest, seen)")
    assert main(["replay", str(chain_run), "--run-until", "A[1].seen > 3 and A[9].seen > 3"]) == 2
    _one_line(capsys, "A has instances 0..3, not 9")
    assert main(["replay", str(chain_run), "--run-until", "'x' in B.nope"]) == 2
    _one_line(capsys, "unknown field 'nope' of B (fields: buckets)")
    assert main(["replay", str(chain_run), "--run-until", "NOPE.x > 3"]) == 2
    _one_line(capsys, "unknown name(s) NOPE")
    # a tuple past the end names the end of input apart (it was counted among the inputs)
    assert main(["replay", str(chain_run), "--step-over", "A:0:99999"]) == 2
    line = _one_line(capsys, "A:0 has inputs #0..#")
    last, end = map(int, re.search(r"inputs #0\.\.#(\d+) and its end of input #(\d+), not #99999$", line).groups())
    reader = RunReader(chain_run)
    try:
        runs = reader.input_runs(reader.operator("A").id, 0)
    finally:
        reader.close()
    assert last + 1 == sum(n for port, src, n in runs if (port, src) != END) and end == last + 1
    # and the last change of a field the state has not: it said the field "never changed"
    assert main(["replay", str(chain_run), "--to", "1", "--last-change", "A:0.nope.x"]) == 2
    _one_line(capsys, "unknown field 'nope' of A:0 (fields: highest, seen)")


# --- --states none ----------------------------------------------------------------------------------------

def test_states_none_prints_no_state(chain_run, capsys):
    args = ["replay", str(chain_run), "--to", "1", "--run-until", "A.seen > 40"]
    assert main(args) == 0
    state_line = re.compile(r"^  [AB]:\d+\.\w+: .* → ")   # "  A:0.seen: 40 → 41"
    changed = capsys.readouterr().out
    assert any(state_line.match(line) and ".seen: " in line for line in changed.splitlines()), changed
    assert main(args + ["--states", "none"]) == 0
    out = capsys.readouterr().out
    assert not any(state_line.match(line) for line in out.splitlines()), out
    assert "stopped after A:" in out
    assert main(args + ["--states", "none", "--json"]) == 0
    for step in json.loads(capsys.readouterr().out):
        assert "states" not in step and "changed" not in step, step


# --- damaged files ------------------------------------------------------------------------------------------

def _largest_blob(path: Path, table: str, key: str) -> tuple[object, bytes]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT {key}, data FROM {table} ORDER BY LENGTH(data) DESC LIMIT 1").fetchone()
    finally:
        conn.close()


def test_a_damaged_state_blob_is_one_line(copy, capsys):
    path = copy("state.db")
    conn = sqlite3.connect(path)
    h, data = conn.execute("SELECT s.hash, s.data FROM states s JOIN barriers b ON b.state = s.hash "
                           "ORDER BY LENGTH(s.data) DESC LIMIT 1").fetchone()
    k = conn.execute("SELECT MIN(k) FROM barriers WHERE state=?", (h,)).fetchone()[0]
    garbled = bytearray(data)
    mid = len(garbled) // 2
    garbled[mid:mid + 32] = b"\x00" * 32
    conn.execute("UPDATE states SET data=? WHERE hash=?", (bytes(garbled), h))
    conn.commit()
    conn.close()
    assert main(["inspect", str(path), "state", "--at", str(k)]) == 1
    _one_line(capsys, "the run file is damaged: state of ", f"at interaction {k} cannot be decoded")
    assert main(["verify", str(path)]) == 1
    _one_line(capsys, "the run file is damaged", "cannot be decoded")


def _overwrite_a_page_of(path: Path, blob: bytes) -> None:
    """Overwrite the page of the file that holds the middle of `blob` (one of its overflow pages)."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for start in range(len(blob) // 2, len(blob) - 64, 97):
        at = data.find(blob[start:start + 64])
        if at > 0:
            first = at - at % page
            data[first:first + page] = b"\xa5" * page
            path.write_bytes(bytes(data))
            return
    raise AssertionError("the blob is not stored in one piece anywhere in the file")


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_damaged_files_are_refused_by_inspect(copy, capsys, damage):
    path = copy(f"{damage}.db")
    if damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        _, blob = _largest_blob(path, "entry_chunks", "rowid")
        _overwrite_a_page_of(path, blob)
    for view in ([], ["interactions"], ["overlaps"]):
        assert main(["inspect", str(path), *view]) == 1, view
        _one_line(capsys, str(path), "damaged")


# --- runs whose dataflow never started ----------------------------------------------------------------------

@pytest.mark.parametrize("job_text, said", [
    ("import tt\nraise ValueError('no input configured')\n", "ValueError: no input configured"),
    ("import sys\nimport tt\nsys.exit(3)\n", "exited with status 3"),
])
def test_a_dataflow_that_never_started_is_named_first(spark, tmp_path, capsys, job_text, said):
    job = tmp_path / "job.py"
    job.write_text(job_text)
    out = tmp_path / "never.db"
    assert main(["record", str(job), "-o", str(out)]) != 0
    capsys.readouterr()
    for command, doing in ((["verify"], "verify"), (["replay"], "replay"),
                           (["checkpoint", "--tau", "1s"], "checkpoint"), (["inspect", "overlaps"], "inspect")):
        argv = [command[0], str(out), *command[1:]]
        assert main(argv) == 1, argv
        line = _one_line(capsys, "the dataflow never started", said, f"there is nothing to {doing}")
        assert "not recorded by you" not in line


# --- tt migrate -----------------------------------------------------------------------------------------------

def test_migrate(copy, capsys, monkeypatch):
    path = copy("old.db")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=0")
    conn.commit()
    conn.close()
    assert main(["inspect", str(path)]) == 1
    _one_line(capsys, "older format (0)", f"tt migrate {path}")
    assert main(["migrate", str(path)]) == 1  # this tt has no migration from format 0
    _one_line(capsys, f"no migration from it to format {schema.SCHEMA_VERSION}", "record the job again")

    monkeypatch.setattr(schema, "MIGRATIONS", [(1, "CREATE TABLE IF NOT EXISTS migrated_to_1 (x);"),
                                               *schema.MIGRATIONS])
    assert main(["migrate", str(path)]) == 0
    assert f"migrated from format 0 to {schema.SCHEMA_VERSION}" in capsys.readouterr().out
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name='migrated_to_1'").fetchone()[0] == 1
    conn.close()
    assert main(["inspect", str(path)]) == 0
    capsys.readouterr()
    assert main(["migrate", str(path)]) == 0
    assert f"already in the current format ({schema.SCHEMA_VERSION})" in capsys.readouterr().out


def test_a_format_1_file_opens_unmigrated_and_migrates_to_the_current_format(copy, capsys):
    """Format 2 only adds the tables of sources read by reference, format 3 only lets a task
    context's local properties name another attempt's: a format-1 run (which has neither) is
    read as it is, and `tt migrate` adds the tables."""
    path = copy("v1.db")
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE source_scans; DROP TABLE source_files; PRAGMA user_version=1;")
    conn.close()
    assert main(["inspect", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "complete"
    assert main(["migrate", str(path)]) == 0
    assert f"migrated from format 1 to {schema.SCHEMA_VERSION}" in capsys.readouterr().out
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'source_%'").fetchone()[0] == 2
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION == 3
    conn.close()
