"""Files a job's functions read in the executors, recorded unchanged (core/files_read.py).

`tests/jobs/hooked_files.py` reads rules, a text file, a price list (pandas), a file that is
not there, and a model too large to keep. A replay runs after the files changed or went: the
oracle is the job's own output, collected by Spark, which holds every value the functions read.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import xxhash

from plain_jobs import each_step, record_on_and_off

from tt.cli.main import main
from tt.cli.output import human_bytes
from tt.core import files_read, runtime
from tt.replay.session import DebugSession
from tt.store import blobs
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_files.py"


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    """(run file, the job's output recorded, its output with recording off, the files' folder);
    an interaction after every unit of θ."""
    where = tmp_path_factory.mktemp("hooked_files")
    folder = where / "files"
    return (*record_on_and_off(JOB, where, [str(folder)], when="True"), folder)


@pytest.fixture
def changed(recorded):
    """The small files changed or gone since the run, as on the machine that replays: other
    rules, no motto, no prices, and the file that was missing there now present. Put back
    afterwards."""
    folder = recorded[3]
    kept = folder.parent / "kept"
    shutil.copytree(folder, kept)
    (folder / "rules.json").write_text(json.dumps({"factor": 5, "labels": ["other", "labels"]}))
    (folder / "motto.txt").unlink()
    (folder / "prices.csv").unlink()
    (folder / "absent.json").write_text(json.dumps({"extra": 99}))
    yield folder
    shutil.rmtree(folder)
    kept.rename(folder)


def test_recording_changes_nothing_the_functions_read(recorded):
    _, on, off, folder = recorded
    assert on == off
    scored = [json.loads(s) for s in on["scored"]]
    assert {(r["factor"], r["motto"], r["extra"], r["head"], r["greeting"]) for r in scored} == {
        (3, "recorded motto", -1, "0001020304050607", "hello from the driver" * 2)}   # (by get, by the root)
    names = ["greeting.txt", "model.bin", "motto.txt", "prices.csv", "rules.json"]
    assert {json.dumps(r["asked"], sort_keys=True) for r in scored} == {json.dumps({
        "motto_is_file": True, "prices_bytes": (folder / "prices.csv").stat().st_size, "absent_there": False,
        "absent_bytes": -1, "rules_link": False, "listed": names, "texts": ["greeting.txt", "motto.txt"],
        "sizes": [[n, (folder / n).stat().st_size] for n in names], "walked": names}, sort_keys=True)}
    # batches of 10 ids, priced at 1.5 × id: each instance's running sum
    assert sorted(on["priced"]) == [[0, 67.5], [10, 285.0], [20, 367.5], [30, 885.0]]


def test_a_replay_hands_each_step_the_files_as_they_were_read(recorded, changed):
    emitted = {json.loads(s)["row"]: json.loads(s) for s in recorded[1]["scored"]}
    session = DebugSession(recorded[0])
    steps = [(unit, state) for _, unit, state in each_step(session, "scored") if unit is not None]
    spent = {i: state["spent"] for i, _, state in each_step(session, "Priced")}   # each instance's last
    session.reader.close()
    assert len(steps) == 40
    for unit, state in steps:
        assert state["closure"]["seen"]["last"] == emitted[unit]
    assert spent == {0: 285.0, 1: 885.0}


def test_verify_passes_where_the_small_files_changed(recorded, changed, capsys):
    assert main(["verify", str(recorded[0])]) == 0
    reader = RunReader(recorded[0])
    n = len(reader.interactions())
    reader.close()
    assert f"verified {n} of {n} interactions" in capsys.readouterr().out


def test_a_replay_without_spark_finds_the_files_the_job_gave_its_executors(recorded, changed):
    """`SparkFiles.get` asks the SparkContext, which a replay's process has none of (this one has
    the suite's): `tt verify` in a process of its own, run from another folder than the job (its
    rules' path is relative to the job's)."""
    elsewhere = recorded[0].parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "tt", "verify", str(recorded[0])], capture_output=True, text=True,
                          timeout=600, cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every replayed state equals the recorded one" in done.stdout
    reader = RunReader(recorded[0])
    node = reader.operator("scored")
    roots = {r.value[1] for r in reader.results(node.id, 0) if r.call == runtime.ENVIRON_CALL
             and r.value[0] == files_read.SPARK_FILES_ROOT}
    reader.close()
    assert len(roots) == 1 and Path(roots.pop(), "greeting.txt").read_text() == "hello from the driver"


def test_a_large_file_that_changed_stops_the_replay_naming_it(recorded, capsys):
    model = recorded[3] / "model.bin"
    kept = model.read_bytes()
    model.write_bytes(kept[::-1])   # the same size, other contents
    try:
        assert main(["verify", str(recorded[0])]) == 1
        said = capsys.readouterr()
        assert (f"reads {model}, {len(kept):,} bytes when recorded (too large to keep in the run file), "
                f"{len(kept):,} bytes here, other contents") in said.out + said.err
        model.unlink()
        assert main(["verify", str(recorded[0])]) == 1
        said = capsys.readouterr()
        assert f"reads {model}, {len(kept):,} bytes when recorded" in said.out + said.err
        assert "no such file or directory here" in said.out + said.err
    finally:
        model.write_bytes(kept)
    assert main(["verify", str(recorded[0])]) == 0


def test_the_run_file_holds_each_file_once(recorded):
    """Each instance logs each file it read once, by its size and digest; the run holds a small
    file's bytes once, whatever number of instances read it, and a large file's not at all."""
    reader = RunReader(recorded[0])
    folder = recorded[3]
    digests = {}
    for op, files in (("scored", ("rules.json", "motto.txt", "absent.json", "model.bin")), ("Priced", ("prices.csv",))):
        # (and the greeting, from the executors' own folder: `test_a_replay_without_spark_finds_…`)
        node = reader.operator(op)
        for i in range(node.instances):
            logged = {name: value for r in reader.results(node.id, i) if r.call == runtime.ENVIRON_CALL
                      for name, value, _ in [r.value] if name.startswith("open(")}
            greeting = [name for name in logged if name.endswith("/greeting.txt)")]
            assert len(greeting) == (op == "scored")
            for name in greeting:
                digests["greeting.txt"] = logged.pop(name)
            assert sorted(logged) == sorted(f"open({folder / f})" for f in files)   # once each, not per batch
            for f in files:
                value = logged[f"open({folder / f})"]
                if f == "absent.json":
                    assert value == {"errno": 2}
                else:
                    data = (folder / f).read_bytes()
                    assert value == {"size": len(data), "xxh3": xxhash.xxh3_128(data).hexdigest()}
                    digests[f] = value
    reader.close()
    with sqlite3.connect(recorded[0]) as conn:
        kept = {d: (size, blobs.decompress(data)) for d, size, data in conn.execute("SELECT * FROM file_contents")}
    assert digests["model.bin"]["size"] > files_read.KEPT_BYTES
    small = {f: v for f, v in digests.items() if f != "model.bin"}
    assert kept == {v["xxh3"]: (v["size"], (folder / f).read_bytes() if f != "greeting.txt" else b"hello from the driver")
                    for f, v in small.items()}


def test_what_a_step_asks_of_a_path_is_logged(recorded):
    """`os.path.isfile`, `getsize`, `Path.exists` (`os.stat`) and `lexists`, `islink` (`os.lstat`):
    each path's answer once per instance, the stat result's fields or the errno of a path that
    was not there; the folder's names (`os.listdir`) and entries (`os.scandir`, which `glob` and
    `os.walk` call), once: what the replay of `test_a_replay_hands_each_step_…` hands back where
    the files changed (with no motto and no prices there, the step raised, branched otherwise or
    listed other names)."""
    reader = RunReader(recorded[0])
    folder = recorded[3]
    node = reader.operator("scored")
    for i in range(node.instances):
        logged = {name: value for r in reader.results(node.id, i) if r.call == runtime.ENVIRON_CALL
                  for name, value, _ in [r.value] if name.startswith(("stat(", "lstat("))}
        names = ("greeting.txt", "model.bin", "motto.txt", "prices.csv", "rules.json")
        assert sorted(logged) == sorted({   # (and `scandir`'s entries' own `stat()`)
            f"stat({folder / 'motto.txt'})", f"stat({folder / 'prices.csv'})", f"stat({folder / 'absent.json'})",
            f"lstat({folder / 'absent.json'})", f"lstat({folder / 'rules.json'})",
            *(f"stat({folder / n})" for n in names)})
        assert logged[f"stat({folder / 'absent.json'})"] == logged[f"lstat({folder / 'absent.json'})"] == {"errno": 2}
        prices = (folder / "prices.csv").stat()
        assert logged[f"stat({folder / 'prices.csv'})"]["fields"][6] == prices.st_size
        assert logged[f"stat({folder / 'prices.csv'})"]["more"]["st_mtime_ns"] == prices.st_mtime_ns
        listings = {name: value for r in reader.results(node.id, i) if r.call == runtime.ENVIRON_CALL
                    for name, value, _ in [r.value] if name.startswith(("listdir(", "scandir("))}
        assert sorted(listings) == [f"listdir({folder})", f"scandir({folder})"]   # (glob and walk scan it too: once)
        assert sorted(listings[f"listdir({folder})"]) == list(names)
        assert sorted(listings[f"scandir({folder})"]) == [[n, False, True, False] for n in names]
    reader.close()


def test_inspect_names_the_files_read_and_the_large_one_a_replay_needs(recorded, capsys):
    model = recorded[3] / "model.bin"
    reader = RunReader(recorded[0])
    assert reader.files_read == {str(model): {"size": model.stat().st_size,
                                              "xxh3": xxhash.xxh3_128(model.read_bytes()).hexdigest()}}
    reader.close()
    assert main(["inspect", str(recorded[0])]) == 0
    line = f"file     {model} (1.0 MB), read by the job's functions: "
    said = capsys.readouterr().out
    assert line + "too large to keep in the run file, and as here" in said
    assert "; files read " in said   # (the small ones' bytes, once: sizes)
    folder = recorded[3]
    small = ["motto.txt", "prices.csv", "rules.json"]   # (absent.json was missing then)
    reader = RunReader(recorded[0])
    read = reader.files_kept
    reader.close()
    assert sorted(p for p in read if p.startswith(str(folder))) == [str(folder / n) for n in small], read
    assert all(read[str(folder / n)]["size"] == (folder / n).stat().st_size for n in small)
    elsewhere = [p for p in read if not p.startswith(str(folder))]   # (SparkFiles.get: the executor's copy)
    assert len(elsewhere) == 1 and "/userFiles-" in elsewhere[0] and elsewhere[0].endswith("/greeting.txt"), read
    for n in small:   # named, with the size they had when read (as now: the fixture puts them back)
        assert (f"file     {folder / n} ({human_bytes((folder / n).stat().st_size)}), read by the job's "
                f"functions: kept in the run file as read") in said, said
    kept = model.read_bytes()
    model.unlink()
    try:
        assert main(["inspect", str(recorded[0]), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["files_read"] == [{"path": str(model), "size": len(kept), "here": "missing"}]
        assert [f["path"] for f in doc["files_kept"]] == sorted(read)
        assert main(["inspect", str(recorded[0])]) == 0
        assert (line + "too large to keep in the run file, and missing here: a replay stops where a function "
                "reads it (tt pack the run where it is)") in capsys.readouterr().out
    finally:
        model.write_bytes(kept)


def test_a_packed_run_replays_without_the_large_file(recorded, tmp_path, capsys):
    model = recorded[3] / "model.bin"
    packed = tmp_path / "packed.db"
    kept = model.read_bytes()
    model.write_bytes(kept[::-1])
    try:   # a file changed since stops the pack, naming it (in a process of its own: nothing of tt's installed)
        done = subprocess.run([sys.executable, "-m", "tt", "pack", str(recorded[0]), "-o", str(packed)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 1
        assert done.stderr == (f"tt: error: {recorded[0].name}: {model}, which the job's functions read, is changed "
                               f"here since the run; run tt pack where it is as it was\n")
        assert not packed.exists()
    finally:
        model.write_bytes(kept)
    assert main(["pack", str(recorded[0]), "-o", str(packed)]) == 0
    assert "packed 1 file the job's functions read" in capsys.readouterr().out
    model.unlink()   # (as on a laptop)
    try:
        assert main(["inspect", str(packed)]) == 0
        assert (f"file     {model} (1.0 MB), read by the job's functions: copied into the run file by tt pack"
                in capsys.readouterr().out)
        assert main(["verify", str(packed)]) == 0
        assert "every replayed state equals the recorded one" in capsys.readouterr().out
        assert main(["pack", str(packed)]) == 0
        assert "nothing to pack; every row and file is already in the run file" in capsys.readouterr().out
    finally:
        model.write_bytes(kept)


def test_a_step_lists_and_stats_in_replay_what_it_did_when_recorded(tmp_path):
    """Spark-free, through the runners and the log's own packing: a hooked `rdd.map` function
    that lists a folder (str and bytes, `os.scandir` in a `with`, its entries' kinds, `stat()`
    and `inode()`, `os.walk`, `glob`), asks whether a file exists and lists a folder that is not
    there. Replayed after the folder changed, it returns what it returned when recorded; outside
    a step, the same calls answer for the folder as it is."""
    import glob
    import os

    from tt.core import logs, nondeterministic
    from tt.core.hooked import operator_for

    folder = tmp_path / "in"

    def fill(files: dict) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "sub").mkdir(parents=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)

    def asked(name):
        with os.scandir(folder) as entries:
            kinds = sorted((e.name, e.is_dir(), e.is_file(), e.is_symlink(), e.stat().st_size if e.is_file() else -1,
                            e.inode() > 0, os.fspath(e) == str(folder / e.name)) for e in entries)
        try:
            os.listdir(folder / "nope")
            missing = None
        except FileNotFoundError as e:
            missing = (e.errno, e.filename)
        return {"names": sorted(os.listdir(folder)), "raw": sorted(os.listdir(os.fsencode(folder))), "kinds": kinds,
                "walked": sorted((os.path.basename(d), sorted(fs)) for d, _, fs in os.walk(folder)),
                "texts": sorted(glob.glob(str(folder / "*.txt"))), "exists": os.path.exists(folder / name),
                "missing": missing}

    nondeterministic.install()
    fill({"a.txt": b"x", "b.bin": b"yy"})
    op = operator_for(asked, "rdd.map", "")
    recording = runtime.RecordingRunner("asked", 0, op, 1, runtime.InstanceLog([]), False)
    emitted: list = []
    recording.targets.append(emitted.append)
    recording.feed("a.txt", 0)
    results = logs.unpack_results(logs.pack_results(recording.log.results))
    assert emitted[0]["names"] == ["a.txt", "b.bin", "sub"] and emitted[0]["exists"]
    assert emitted[0]["kinds"][2] == ("sub", True, False, False, -1, True, True)
    assert emitted[0]["missing"] == (2, str(folder / "nope"))

    fill({"c.txt": b"zzz"})   # as on the machine that replays
    replay = runtime.ReplayRunner("asked", 0, op, 1, runtime.ResultSource(results))
    replayed: list = []
    replay.targets.append(replayed.append)
    replay.feed("a.txt", 0)
    assert replayed == emitted
    assert sorted(os.listdir(folder)) == ["c.txt", "sub"] and not os.path.exists(folder / "a.txt")   # (no step)
