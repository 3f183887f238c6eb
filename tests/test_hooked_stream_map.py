"""`mapInPandas` over a Structured Streaming query, recorded through the hooks
(`tests/jobs/hooked_stream_map.py`: three files, one a micro-batch).

Every micro-batch runs the same partition again. The hooked call's tasks were numbered by their
partition, so each micro-batch's task was taken for another attempt of the first one: the
recording kept one micro-batch of three, and `tt verify` said it verified the run. Each
micro-batch's task is now an instance of its own, and every micro-batch end is an interaction,
as for a StatefulProcessor. The oracle is pandas over the files' definition.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import each_step, payment_file, post_mortem, record_streaming_on_and_off, verified

from tt.core import values
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_stream_map.py"
FILES, PER_FILE = 3, 20


def _file(f: int) -> pd.DataFrame:
    return payment_file(f, PER_FILE)


@pytest.fixture(scope="module")
def recorded(spark, tmp_path_factory):
    return record_streaming_on_and_off(JOB, tmp_path_factory.mktemp("hooked_stream_map"), after=[str(FILES), str(PER_FILE)])


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


@pytest.mark.parametrize("writer", ["writer", "function"])
def test_a_foreach_writer_is_recorded_opened_fed_and_closed_per_micro_batch(spark, tmp_path, capsys, writer):
    """`writeStream.foreach(writer)` ran unrecorded (the recording said so). Each micro-batch's
    task is now an instance of the writer: its first step `open(partition, epoch)`, one step a
    row, `close` at its end; a function writer takes the rows alone. The end state of each is
    what pandas computes over its micro-batch's file, and a replay makes the same states."""
    events = []
    _, on, off = record_streaming_on_and_off(JOB, tmp_path, after=[str(FILES), str(PER_FILE), writer],
                                             on_event=lambda kind, info: events.append((kind, info)))
    assert on == off and on["written"] == FILES * PER_FILE
    name = "Tally" if writer == "writer" else "count_row"
    line = next(n for n, text in enumerate(JOB.read_text().splitlines(), 1) if ".writeStream.foreach(" in text)
    assert [info["message"] for kind, info in events if kind == "warning" and name in info["message"]] == [
        f"{name} (foreach at hooked_stream_map.py:{line}) is a sink: a replay (tt debug, tt verify) runs it again; "
        f"a file it opens for writing is then a scratch copy, but what it sends to a database or a service is sent "
        f"again"]
    reader = RunReader(tmp_path / "run.db")
    try:
        op = reader.operator(name)
        assert (op.kind, op.instances) == ("writeStream.foreach", FILES)
        end = reader.instances_at(reader.interactions()[-1].k)
        states = [values.decode(reader.state(at.state)) for (o, _), at in end.items() if o == op.id]
    finally:
        reader.close()
    if writer == "writer":   # (micro-batch f reads file f: job_settings.write_payment_files)
        assert sorted((state["epoch"], state["seen"], state["total"], state["rows"]["value"]) for state in states) == [
            (f, PER_FILE, float(_file(f)["amount"].sum()), PER_FILE) for f in range(FILES)]   # (rows: the task's sum)
    session = DebugSession(tmp_path / "run.db")
    steps = list(each_step(session, name))
    opened = [unit for _, unit, _ in steps if isinstance(unit, tuple) and unit[:1] == ("open",)]
    assert sorted(unit[2] for unit in opened) == list(range(FILES))   # (open, partition, micro-batch)
    assert len(steps) == FILES * (1 + PER_FILE + 1)   # open, the rows, the END step (close)
    verified(tmp_path / "run.db", capsys)


def test_a_foreach_writer_that_raises_is_debuggable_post_mortem(spark, tmp_path):
    """`Fussy.process` raises on its task's fifth row: the run fails naming it, and the replay
    stops just before that row (its step 5, after `open`), the four before it counted; a step
    into it raises again."""
    session = post_mortem(JOB, [str(tmp_path / "on.json"), str(tmp_path / "in"), str(tmp_path / "ck"), str(FILES),
                                str(PER_FILE), "raising"], tmp_path / "failed.db", "raised ValueError: bad row",
                          "operator Fussy:")
    failure = session.failure
    _, i, position = failure.label.split(":")
    assert position == "5"
    op = session.reader.operator("Fussy")
    row = session.engine.instances[(op.id, int(i))].peek()
    state = values.decode(session.engine.states()[(op.id, int(i))])
    before = _file(row["id"] // PER_FILE).iloc[:4]
    assert (state["seen"], state["total"]) == (4, float(before["amount"].sum()))
    result = session.step_into(session.parse_ref(failure.label))
    assert result.raised is not None and result.raised["message"] == f"bad row {row['id']}"
    session.reader.close()
