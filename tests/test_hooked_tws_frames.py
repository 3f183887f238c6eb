"""A transformWithStateInPandas processor's DataFrames, logged as their rows' place in the
Arrow batches PySpark's worker read, and rebuilt in replay by PySpark's own conversion
(recorder/teed_batches.py, recorder/frames.py `tws_frame`).

tests/jobs/hooked_tws_frames.py describes every DataFrame it is handed (columns, dtypes,
index, each value's repr) over columns whose conversion depends on the batch a row came in:
a long that is null in some rows is float64 in a frame built from such a batch. The oracle is
what the job's own `collect()` returned, against what the replay emits: the replay handed the
processor the very DataFrames PySpark handed it, though the processor wrote into each.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

from plain_jobs import record_on_and_off, replayed_outputs, verified

from tt.recorder import frames, teed_batches
from tt.recorder.teed_batches import Tee, TeedRows
from tt.store import blobs
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_tws_frames.py"


def test_replay_hands_the_processor_the_dataframes_pyspark_handed_it(spark, tmp_path, capsys):
    run, on, off = record_on_and_off(JOB, tmp_path)
    final = lambda rows: {k: max(n for k2, n, _ in rows if k2 == k) for k, _, _ in rows}
    assert final(on) == final(off) == {"k0": 14, "k1": 14, "k2": 15, "k3": 15, "solo5": 1, "solo40": 1}
    assert {tuple(json.loads(shape)[1][:3]) for _, _, shape in on} == \
        {("int64", "object", "int64"), ("int64", "object", "float64")}   # batches with and without a null
    reader = RunReader(run)
    try:
        op = reader.operator("Shapes").id
        teed = [b"TwsBatches" in blobs.decompress(data) for i in (0, 1)
                for *_, codec, data in reader.entry_chunks(op, i)]
    finally:
        reader.close()
    assert teed and all(teed)   # every chunk of units holds batches, no frame frozen whole
    replayed = replayed_outputs(run, by_operator=True)["Shapes"]
    assert sorted([list(r) for f in replayed for r in f.itertuples(index=False)]) == on
    verified(run, capsys)


SETTINGS = {"timezone": "UTC", "prefer_int_ext_dtype": False}


def _batches() -> list:
    """Three batches of (k, v): v is null in the second, which PySpark converts to float64."""
    return [pa.record_batch({"k": ["a", "a", "b"], "v": [1, 2, 3]}),
            pa.record_batch({"k": ["b", "b", "c"], "v": [4, None, 6]}),
            pa.record_batch({"k": ["c", "d", "d"], "v": [7, 8, 9]})]


def _handed(batches: list, start: int, n: int):
    """The DataFrame PySpark's worker builds for rows start…start + n (its value columns: both)."""
    firsts = [sum(b.num_rows for b in batches[:i]) for i in range(len(batches))]
    return frames.tws_frame(frames.tws_rows(list(zip(firsts, batches)), start, n, SETTINGS, {}), [0, 1])


def test_a_tee_logs_places_whose_chunk_carries_the_batches_they_lie_in():
    batches = _batches()
    tee = Tee(SETTINGS)
    read = tee.take(iter(batches))
    next(read), next(read)                                  # PySpark read two batches ...
    a, b = _handed(batches, 0, 2), _handed(batches, 2, 3)  # ... then handed key a, and b across them
    assert [str(t) for t in a.dtypes] == ["object", "int64"] and [str(t) for t in b.dtypes] == ["object", "float64"]
    placed = [tee.logged(a), tee.logged(b)]
    assert all(type(p) is TeedRows for p in placed) and placed[0].window is placed[1].window
    back = pickle.loads(pickle.dumps(placed))              # a log chunk: the batches travel once
    assert pickle.loads(pickle.dumps(placed[1])).equals(b)  # (pickled again, the same)
    for got, want in zip(back, (a, b)):
        assert got.dtypes.tolist() == want.dtypes.tolist() and got.equals(want)
        assert [repr(v) for v in got["v"]] == [repr(v) for v in want["v"]]
    assert [first for first, _ in tee.batches] == [3]      # the first batch is not needed again
    next(read)
    c = _handed(batches, 5, 2)
    later = tee.logged(c)
    assert later.window is not placed[0].window            # a new chunk, a new window
    assert pickle.loads(pickle.dumps(later)).equals(c)


def test_a_task_whose_first_frame_is_not_rebuilt_the_same_logs_its_frames():
    batches = _batches()
    tee = Tee(SETTINGS)
    read = tee.take(iter(batches))
    next(read)
    wrong = _handed(batches, 0, 2)
    wrong["v"] = wrong["v"] * 10                           # not what the batches hold
    assert tee.logged(wrong) is wrong and tee.batches == []
    next(read)
    assert tee.batches == [] and tee.logged(_handed(batches, 2, 3)).shape == (3, 2)   # frames, kept by the log


def test_a_worker_rebuilds_one_first_frame_a_shape_and_still_finds_a_frame_placed_wrong(monkeypatch):
    """Each task's first DataFrame is checked; a worker rebuilds it with PySpark's conversion
    once a shape (settings, schema, columns, dtypes), and in a later task of that shape
    compares its rows with their place in the batches instead. A frame whose rows are not
    where the Tee places them is then rebuilt, found different, and logged as it is."""
    monkeypatch.setattr(teed_batches, "_rebuilt", {})
    checked = []   # the rows each check rebuilt
    rebuild = frames.tws_rows
    monkeypatch.setattr(frames, "tws_rows", lambda batches, start, n, settings, converted:
                        (converted is None and checked.append((start, n))) or rebuild(batches, start, n, settings, converted))
    batches = _batches()

    def task(handed):
        tee = Tee(SETTINGS)
        read = tee.take(iter(batches))
        next(read), next(read)
        return tee.logged(handed)

    first = _handed(batches, 0, 2)
    assert type(task(first)) is TeedRows and checked == [(0, 2)]
    again = task(_handed(batches, 0, 2))          # another task of the same shape: not rebuilt
    assert type(again) is TeedRows and checked == [(0, 2)]
    assert pickle.loads(pickle.dumps(again)).equals(first)
    shifted = _handed(batches, 1, 2)              # rows 1-2 handed where the Tee places rows 0-1
    assert str(shifted.dtypes["v"]) == "int64" and task(shifted) is shifted
    assert checked == [(0, 2), (0, 2)]            # rebuilt, found different: logged as it is
    with_null = _handed(batches, 0, 5)            # v float64 (a null in the second batch): another shape
    assert type(task(with_null)) is TeedRows and checked == [(0, 2), (0, 2), (0, 5)]
    batches = [pa.record_batch({"g": [7, 7], "v": [1, 2]}), pa.record_batch({"g": [7, 7], "v": [3, 4]})]   # g: a key's
    assert type(task(_handed(batches, 0, 2))) is TeedRows and len(checked) == 4
    within = _handed(batches, 1, 2)               # shifted within the key: only v tells
    assert task(within) is within and len(checked) == 5


def test_offsets_of_a_column_pyspark_does_not_build_are_none():
    row = frames.tws_rows([(0, _batches()[0])], 0, 1, SETTINGS, None)[0]
    assert frames.tws_offsets(row, ["v", "k"]) == [1, 0] and frames.tws_offsets(row, ["k", "missing"]) is None


def test_a_replay_with_other_libraries_than_the_recording_workers_refuses_to_rebuild():
    from tt.core.errors import RunFileError

    batches = _batches()
    tee = Tee(SETTINGS)
    read = tee.take(iter(batches))
    next(read)
    placed = tee.logged(_handed(batches, 0, 2))
    assert tee.settings["versions"] == frames.versions()   # the worker's, kept with its batches
    data = pickle.dumps(placed)
    assert pickle.loads(data).equals(_handed(batches, 0, 2))
    other = dict(tee.settings, versions={**frames.versions(), "pandas": "1.5.3"})
    with pytest.raises(RunFileError, match=r"built by pandas 1\.5\.3 \(here .+\), which may build them otherwise"):
        frames.TwsBatches(frames.pack_batches([(0, batches[0])]), other, [0, 1])
