"""`tt verify` compares what a hooked function emitted with what its replay emits (replay/outputs.py).

A helper's trial found a generator whose rows came from something no log gives back (a set of
objects iterated in address order): its replayed states equalled the recorded ones, `tt verify`
passed, and `tt lineage` showed rows the job never made. tests/jobs/hooked_unlogged.py emits
`id(object())` beside each element: the replay's process makes other addresses, its count state
replays alike, and only the digest of what it emitted tells.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from plain_jobs import record_on_and_off

from tt.cli.main import main
from tt.store.reader import RunReader

JOB = Path(__file__).resolve().parent / "jobs" / "hooked_unlogged.py"


def test_rows_a_replay_emits_otherwise_fail_verify_though_every_state_matches(tmp_path, capsys):
    run, on, off = record_on_and_off(JOB, tmp_path, ["unlogged"])
    assert on == off == 40
    assert len(RunReader(run).recorded_outputs()) == 2, "each instance's digest is recorded"
    assert main(["verify", str(run)]) == 1
    said = capsys.readouterr().out
    assert re.search(r"^\S+: verified (\d+) of \1 interactions — every replayed state equals the recorded one", said,
                     re.M), said
    assert re.search(r"^\S+: but addressed:[01] emits other rows in replay than it emitted when recorded \(as many "
                     r"outputs \(20\), not all the same\): its code reads something tt does not log", said, re.M), said
    assert main(["verify", str(run), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert not data["ok"] and data["outputs"]["compared"] == 2 and data["outputs"]["differ"][0]["op"] == "addressed"


def test_rows_a_replay_emits_alike_are_said_to_be_compared(tmp_path, capsys):
    run, on, off = record_on_and_off(JOB, tmp_path, ["plain"])
    assert on == off == 40
    assert main(["verify", str(run)]) == 0
    said = capsys.readouterr().out
    assert re.search(r"^\S+: what the hooked functions emitted \(2 instances\) is what the replay emits$", said,
                     re.M), said


def test_a_digest_says_how_it_sampled_and_one_from_before_reads_as_it_was():
    """Every 16th batch goes in whole (a processor emitting a one-row frame a key paid 87 µs a
    key for each, ×1.18 on the keyed TWS bench), and the digest says so; one from before (each
    batch, three fields) is made again alike, so a run recorded then still compares."""
    import pandas as pd

    from tt.core.output_digest import OutputDigest, read

    frames = [pd.DataFrame({"k": [i], "v": [i * 1.5]}) for i in range(40)]

    def digest(like: str | None, changed_at: int | None = None, old: bool = False) -> str:
        d = OutputDigest.like(like) if like else OutputDigest(16, 1) if old else OutputDigest()
        for i, f in enumerate(frames):
            d(f.assign(v=0.0) if i == changed_at else f)
        return d.hexdigest()

    said = digest(None)
    assert read(said) == (40, 16, 16) and digest(said) == said
    assert digest(said, changed_at=16) != said and digest(said, changed_at=5) == said   # (batch 5: not sampled)
    before = digest(None, old=True)
    assert len(before.split(":")) == 3 and read(before) == (40, 16, 1) and digest(before) == before
    assert digest(before, changed_at=5) != before
