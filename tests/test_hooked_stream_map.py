"""`mapInPandas` over a Structured Streaming query, recorded through the hooks
(`tests/jobs/hooked_stream_map.py`: three files, one a micro-batch).

Every micro-batch runs the same partition again. The hooked call's tasks were numbered by their
partition, so each micro-batch's task was taken for another attempt of the first one: the
recording kept one micro-batch of three, and `tt verify` said it verified the run. Each
micro-batch's task is now an instance of its own, and every micro-batch end is an interaction,
as for a StatefulProcessor. The oracle is pandas over the files' definition.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import run_plain, verified

from tt.core import values
from tt.recorder.job import record_job
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_stream_map.py"
FILES, PER_FILE = 3, 20


def _file(f: int) -> pd.DataFrame:
    ids = range(f * PER_FILE, (f + 1) * PER_FILE)
    return pd.DataFrame({"id": ids, "amount": [float((i * 37) % 101) for i in ids]})


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    where = tmp_path_factory.mktemp("hooked_stream_map")
    off, on, run = where / "off.json", where / "on.json", where / "run.db"
    run_plain(JOB, [str(off), str(where / "in_off"), str(where / "ck_off"), str(FILES), str(PER_FILE)])
    outcome = record_job(JOB, [str(on), str(where / "in_on"), str(where / "ck_on"), str(FILES), str(PER_FILE)], run)
    assert outcome.status == "complete", outcome.error
    return run, json.loads(on.read_text()), json.loads(off.read_text())


def test_the_output_is_the_same_recorded_and_not_and_as_pandas_computes(recorded):
    _, on, off = recorded
    expected = sorted([i, PER_FILE, float(_file(f)["amount"].sum())] for f in range(FILES) for i in _file(f)["id"])
    assert on == off == {"rows": expected}


def test_each_micro_batch_is_an_instance_and_its_end_an_interaction(recorded, capsys):
    run, *_ = recorded
    reader = RunReader(run)
    try:
        op = reader.operator("Running")
        assert op.instances == FILES
        interactions = reader.interactions()
        assert [i.trigger for i in interactions] == ["start"] + ["micro-batch"] * FILES + ["end"]
        end = reader.instances_at(interactions[-1].k)
        states = sorted((values.decode(reader.state(at.state)) for (o, _), at in end.items() if o == op.id),
                        key=lambda state: state["total"])
    finally:
        reader.close()
    assert states == sorted(({"seen": PER_FILE, "total": float(_file(f)["amount"].sum())} for f in range(FILES)),
                            key=lambda state: state["total"])
    verified(run, capsys)


def test_a_foreach_writer_is_said_to_run_unrecorded(spark, tmp_path):
    """`writeStream.foreach(writer)` is not hooked: the recording says so (it ran without a word)."""
    events = []
    outcome = record_job(JOB, [str(tmp_path / "on.json"), str(tmp_path / "in"), str(tmp_path / "ck"), str(FILES),
                               str(PER_FILE), "writer"], tmp_path / "run.db",
                         on_event=lambda kind, info: events.append((kind, info)))
    assert outcome.status == "complete", outcome.error
    assert json.loads((tmp_path / "on.json").read_text())["written"] == FILES * PER_FILE
    said = [info["message"] for kind, info in events if kind == "warning" and "ForeachWriter" in info["message"]]
    line = next(n for n, text in enumerate(JOB.read_text().splitlines(), 1) if ".writeStream.foreach(" in text)
    assert said == [f"Counter (writeStream.foreach at hooked_stream_map.py:{line}) runs unrecorded: tt does not record "
                    f"a ForeachWriter yet; foreachBatch with df.foreachPartition does the same, recorded"], events
    reader = RunReader(tmp_path / "run.db")
    try:
        assert said[0] in reader.warnings()
    finally:
        reader.close()
