"""A jump says so when the replay does not give the recorded states (DebugSession.jump, `tt replay`, the TUI).

What the debugger shows is what replay computes. A job whose code reads something replay does
not get back as it was (here an environment variable, as a job's configuration is often read,
in a `tt.Dataflow` operator, which tt does not log unless wrapped in `tt.log_result`: a hooked
function's are, tests/test_hooked_environ.py) replays otherwise than it ran; `tt verify` found it, but a jump showed the other states as if
they were the run's. The oracle is the job's input: the operator adds up `v` times the rate, 1
when recorded, so its total at an interaction is the sum of the `v`s it had consumed by then.
"""

from __future__ import annotations

import json
import os
import sys

import cloudpickle
import pytest

import tt
from tt.cli.main import main
from tt.core import values
from tt.replay.session import DebugSession

pytestmark = pytest.mark.slow

RATE = "TT_TEST_REPLAY_RATE"


class Rated(tt.Operator):
    """Adds up each row's `v` times a rate read from the environment (1 where it is unset)."""

    def __init__(self):
        self.total = 0.0

    def process(self, row, port=0):
        self.total += row["v"] * float(os.environ.get(RATE, "1"))
        yield row


def _build(spark):
    df = spark.createDataFrame([(i, float(i % 10)) for i in range(400)], "id long, v double").coalesce(1)
    flow = tt.Dataflow("rated")
    flow.source("U", df).process(Rated(), name="R").collect("out")
    return flow


@pytest.fixture(scope="module")
def rated_run(spark, tmp_path_factory):
    from pathlib import Path

    from tt.recorder.session import RecordingSession

    assert RATE not in os.environ
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = tmp_path_factory.mktemp("rated") / "rated.db"
    session = RecordingSession(out, Path(__file__), [], watch="R", when="row['id'] == 150")
    with session:
        _build(spark).run()
    session.close()
    return out


def _condition_k(session: DebugSession) -> tuple[int, int]:
    """The interaction the condition took, and R's position there."""
    k = next(i.k for i in session.interactions() if i.trigger == "condition")
    r = session.reader.operator("R").id
    (position,) = [a.position for (op, _), a in session.reader.instances_at(k).items() if op == r and a.position]
    return k, position


def test_a_jump_checks_the_replayed_states_against_the_recorded_ones(rated_run, monkeypatch, capsys):
    session = DebugSession(rated_run)
    k, n = _condition_k(session)
    oracle = float(sum(i % 10 for i in range(n)))   # the v's of the rows R consumed before the interaction
    assert n == 151 and oracle > 0
    same = session.jump(k)
    assert same.ok and same.differs is None and not same.note
    assert session.state("R:0")["total"] == oracle
    session.reader.close()

    monkeypatch.setenv(RATE, "2")   # replayed where the job's configuration says otherwise
    session = DebugSession(rated_run)
    result = session.jump(k)
    assert result.ok and result.interaction == k
    assert result.differs is not None
    assert (result.differs["op"], result.differs["instance"], result.differs["field"]) == ("R", 0, "total")
    assert result.differs["recorded"] == values.render(oracle, 120)
    assert result.differs["replayed"] == values.render(2 * oracle, 120)
    assert result.note.startswith("the replay differs from the recording: R:0 differs at interaction")
    again = session.jump(0)
    assert again.differs is None   # the start: nothing consumed, nothing read
    from tt.replay import session as session_module
    compared = []
    with monkeypatch.context() as m:
        m.setattr(session_module, "differing_state", lambda *a: compared.append(a))
        assert session.jump(k).differs == result.differs and compared == []   # compared once a session
    session.reader.close()

    assert main(["replay", str(rated_run), "--jump", str(k)]) == 1
    out = capsys.readouterr().out
    assert f"jump {k}: ok (interaction {k})" in out
    assert "the replay differs from the recording: R:0 differs at interaction" in out, out


def test_a_step_or_run_until_that_lands_on_an_interaction_checks_it_too(rated_run, monkeypatch, capsys):
    """Not only a jump: a step or a run until that ends where an interaction was taken compares
    there, one that ends between interactions does not, and a step back to it says it again."""
    session = DebugSession(rated_run)
    k, n = _condition_k(session)
    session.reader.close()
    oracle = float(sum(i % 10 for i in range(n)))
    monkeypatch.setenv(RATE, "2")

    def differs_like_the_oracle(result):
        assert result.ok and result.interaction == k, result
        assert result.differs is not None and result.differs["field"] == "total"
        assert (result.differs["recorded"], result.differs["replayed"]) == (values.render(oracle, 120),
                                                                            values.render(2 * oracle, 120))
        assert result.note.startswith("the replay differs from the recording: R:0 differs at interaction")

    session = DebugSession(rated_run)
    assert session.jump(0).differs is None
    mid = session.run_until("row['id'] == 150")   # R has consumed it; its output still waits at `out`
    assert mid.ok and mid.interaction is None and mid.differs is None, mid
    (waiting,) = session.pending("out:0", 1)
    landed = session.step_over(waiting.ref)   # the interaction's position: every instance at 151
    differs_like_the_oracle(landed)
    off = session.step_over(session.pending("R:0", 1)[0].ref)
    assert off.ok and off.interaction is None and off.differs is None
    # past it, the difference stays in the states: every step says so (it read as a replay of the run)
    assert off.diverged == landed.differs
    assert off.note.startswith(f"past interaction {k}, where the replay differs from the recording (R:0): what "
                               f"is shown may not be what ran"), off.note
    back = session.step_back()
    assert back.interaction == k and back.differs == landed.differs
    start = session.jump(0)
    assert start.differs is None and start.diverged is None and not start.note   # before it: what ran
    session.reader.close()

    session = DebugSession(rated_run)
    until = session.run_until("op == 'out' and row['id'] == 150")
    differs_like_the_oracle(until)
    assert until.note.endswith("the condition holds"), until.note   # (what run until says, kept)
    session.reader.close()

    condition = "op == 'out' and row['id'] == 150"
    assert main(["replay", str(rated_run), "--run-until", condition]) == 1
    assert "the replay differs from the recording: R:0 differs at interaction" in capsys.readouterr().out
    monkeypatch.delenv(RATE)
    assert main(["replay", str(rated_run), "--run-until", condition]) == 0
    assert "differs" not in capsys.readouterr().out


def test_the_debugger_shows_where_a_jump_differs(rated_run, monkeypatch):
    from test_tui import answer, drive, keys, message

    from tt.tui.app import DebuggerApp

    session = DebugSession(rated_run)
    k = _condition_k(session)[0]
    session.reader.close()
    monkeypatch.setenv(RATE, "3")
    app = DebuggerApp(rated_run)

    async def script(pilot):
        await keys(pilot, "j")
        await answer(pilot, str(k))
        shown = message(app)
        assert shown.startswith(f"! jump {k}: the replay differs from the recording at R:0.total, recorded "), shown
        assert "what is shown is not what ran" in shown, shown
        await keys(pilot, "n")   # a step on: the message line keeps saying it
        shown = message(app)
        assert shown.startswith("! step over R:0:"), shown
        assert f"past interaction {k}, where the replay differs from the recording (R:0.total): what is shown " \
               f"may not be what ran" in shown, shown
    drive(app, script)


def test_verify_names_the_libraries_of_other_versions_here(rated_run, monkeypatch, capsys, tmp_path):
    """Where two replays agree and differ from the recording, what the replay does not take from the
    run is to blame; libraries of other versions here than the workers had come first in the list."""
    import shutil
    import sqlite3

    import pandas

    from tt.store.reader import RunReader

    reader = RunReader(rated_run)
    loaded = reader.libraries   # (what the tasks' workers had loaded, as here)
    reader.close()
    assert loaded and all(sys.modules[n].__version__ == v for n, v in loaded.items() if n in sys.modules)
    others = len({**loaded, "pandas": ""}) - 1
    run = tmp_path / "older_pandas.db"
    shutil.copy(rated_run, run)
    conn = sqlite3.connect(run)
    conn.execute("UPDATE meta SET value=? WHERE key='libraries'", (json.dumps({**loaded, "pandas": "1.5.3"}),))
    conn.commit()
    conn.close()
    monkeypatch.setenv(RATE, "2")
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr()
    assert f"libraries of other versions here than the workers had: pandas 1.5.3 (here {pandas.__version__}); " \
           "hash order" in out.out + out.err
    assert main(["inspect", str(run)]) == 0
    assert f"libraries  pandas 1.5.3 (here {pandas.__version__}): a replay runs this machine's; " \
           f"{others} others as here" in capsys.readouterr().out


class RatedCheck(tt.Operator):
    """Raises on id 150 while the rate read from the environment (1 where it is unset) is
    below 3, saying the rate: replayed with another rate it raises otherwise, or not at all."""

    def __init__(self):
        self.seen = 0

    def process(self, row, port=0):
        self.seen += 1
        rate = float(os.environ.get(RATE, "1"))
        if row["id"] == 150 and rate < 3:
            raise ValueError(f"rate {rate:g} on id 150")
        yield row


def test_verify_replays_a_failed_run_up_to_its_failure_and_says_whether_it_fails_so(spark, tmp_path, monkeypatch,
                                                                                      capsys):
    """A failed run recorded without --every has one interaction, its start, where every state is
    empty: verify compared nothing of what led to the failure and said 'verified 1 of 1', then
    that the operator's state 'was empty at every interaction (a generator that had ended...)'.
    It now replays on to the failing tuple and feeds it: the same exception says the failure
    reproduces, another one or none is a divergence (exit 1) that names both."""
    from pathlib import Path

    from tt.core.errors import JobError
    from tt.recorder.session import RecordingSession

    assert RATE not in os.environ
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    run = tmp_path / "failed.db"
    df = spark.createDataFrame([(i, float(i % 10)) for i in range(400)], "id long, v double").coalesce(1)
    flow = tt.Dataflow("checked")
    flow.source("U", df).process(RatedCheck(), name="R").collect("out")
    session = RecordingSession(run, Path(__file__), [], watch="R")
    with pytest.raises(JobError, match="rate 1 on id 150"):
        try:
            with session:
                flow.run()
        finally:
            session.close()

    assert main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1:] == [f"{run}: the recorded failure reproduces: R:0:150 raises ValueError: rate 1 on "
                                    f"id 150 in replay too"], out
    assert "empty at every interaction" not in out   # (nothing had been consumed at the one interaction)
    assert main(["verify", str(run), "--json"]) == 0
    failure = json.loads(capsys.readouterr().out)["failure"]
    assert failure == {"ok": True, "checked": True, "label": "R:0:150", "error": "ValueError: rate 1 on id 150",
                       "instances": 1}

    monkeypatch.setenv(RATE, "2")
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert (f"{run}: but the recorded failure does not reproduce: R:0:150 raised ValueError: rate 1 on id 150 "
            f"when recorded, but ValueError: rate 2 on id 150 in replay") in out, out
    monkeypatch.setenv(RATE, "5")
    assert main(["verify", str(run)]) == 1
    out = capsys.readouterr().out
    assert (f"{run}: but the recorded failure does not reproduce: R:0:150 raised ValueError: rate 1 on id 150 "
            f"when recorded, but not in replay") in out, out
