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
