"""Hooked calls made in a streaming query's `foreachBatch` function, recorded through the hooks
(`tests/jobs/hooked_foreach_batch.py`).

Spark calls the function once per micro-batch, and it makes the same hooked calls each time.
Each call was an operator of its own (`Running`, `Running_2`, … one a micro-batch), so a
long-running stream grew its DAG by an operator a micro-batch. A call whose operator pickles
to the same bytes as the one its call site made in an earlier micro-batch is now that operator
again, its tasks more instances of it, numbered by (micro-batch, partition) as a streaming
`mapInPandas`'s are. A call whose closure differs (it captures the micro-batch) is still an
operator of its own, and so is a call made again outside a micro-batch (a batch loop), whose
tasks would be numbered by partition alike. The oracle is pandas over the files' definition.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from plain_jobs import payment_file, record_streaming_on_and_off, verified

from tt.core import values
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_foreach_batch.py"
FILES, PER_FILE = 3, 20


def _file(f: int) -> pd.DataFrame:
    return payment_file(f, PER_FILE)


@pytest.fixture(scope="module")
def recording(spark, tmp_path_factory):
    """(run file, output recorded, output not, what the recording warned of)."""
    events = []
    run, on, off = record_streaming_on_and_off(JOB, tmp_path_factory.mktemp("hooked_foreach_batch"),
                                               after=[str(FILES), str(PER_FILE)],
                                               on_event=lambda kind, info: events.append((kind, info)))
    return run, on, off, [info["message"] for kind, info in events if kind == "warning"]


@pytest.fixture(scope="module")
def recorded(recording):
    return recording[:3]


def test_the_output_is_the_same_recorded_and_not_and_as_pandas_computes(recorded):
    _, on, off = recorded
    assert on == off
    files = [_file(f) for f in range(FILES)]
    assert on["running"] == sorted([i, PER_FILE, float(pdf["amount"].sum())] for pdf in files for i in pdf["id"])
    assert on["tagged"] == [[i, i // PER_FILE, 0.0] for i in range(FILES * PER_FILE)]   # micro-batch f: file f
    every = pd.concat(files)
    for half, rows in zip((every[every["id"] % 2 == 0], every[every["id"] % 2 == 1]), on["halves"]):
        assert [i for i, _, _ in rows] == sorted(half["id"])
        assert max(seen for _, seen, _ in rows) == len(half) and max(t for _, _, t in rows) == half["amount"].sum()


def test_a_call_made_again_each_micro_batch_is_one_operator_with_an_instance_a_micro_batch(recorded):
    run, *_ = recorded
    reader = RunReader(run)
    try:
        hooked = {n["name"]: n for n in reader.plan["nodes"] if n["kind"] == "mapInPandas"}
        running = reader.operator("Running")
        slots = reader.plan["micro_batches"]["Running"]
        end = reader.instances_at(reader.interactions()[-1].k)
        states = [values.decode(reader.state(at.state)) for (o, _), at in end.items() if o == running.id]
    finally:
        reader.close()
    # Running once for the stream, twice more for the batch loop (no micro-batch: one operator a call);
    # the lambda, whose closure holds the micro-batch, one operator a micro-batch
    assert sorted(hooked) == ["Running", "Running_2", "Running_3", "mapInPandas", "mapInPandas_2", "mapInPandas_3"]
    assert running.instances == FILES and sorted(batch for batch, _ in slots) == list(range(FILES))
    assert sorted((s["seen"], s["total"]) for s in states) == sorted(
        (PER_FILE, float(_file(f)["amount"].sum())) for f in range(FILES))


def test_a_call_that_pickles_otherwise_each_micro_batch_is_said_once(recording):
    """The lambda's closure holds the micro-batch's id: an operator a micro-batch, which the
    run now says (`RecordingSession._again`), once for its call site."""
    *_, warned = recording
    line = next(n for n, text in enumerate(JOB.read_text().splitlines(), 1) if "tag = df.mapInPandas(" in text)
    assert [w for w in warned if "made again" in w] == [
        f"mapInPandas (mapInPandas at hooked_foreach_batch.py:{line}) is made again in each micro-batch of "
        f"foreachBatch, and pickles otherwise each time (its closure or state holds something of the micro-batch, "
        f"as its id?): each micro-batch's is an operator of its own, and the run's DAG grows by one a micro-batch; "
        f"take what differs from the rows, or keep it out of the function, for one operator"]


def test_tt_verify_replays_every_micro_batchs_instance(recorded, capsys):
    verified(recorded[0], capsys)
