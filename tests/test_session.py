"""Controlled replay: steps, scopes, overlaps and non-determinism on real recordings,
checked against an independent sequential oracle (tests/oracle.py)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import cloudpickle
import pytest
import workloads
from oracle import Oracle

from tt.cli.main import main
from tt.core.scopes import TupleRef
from tt.replay.verify import verify
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def keyed_run(spark, tmp_path_factory):
    from tt.recorder.session import RecordingSession

    out = tmp_path_factory.mktemp("keyed") / "keyed.db"
    s = RecordingSession(out, Path(__file__), [], watch="FE", when="row['amount'] > 400")
    with s:
        workloads.build_keyed(spark).run()
    s.close()
    return out


@pytest.fixture(scope="module")
def keywords_run(spark, tmp_path_factory):
    return workloads.record_keywords(spark, tmp_path_factory.mktemp("keywords") / "keywords.db", 6000)


def _check(session: DebugSession, oracle: Oracle) -> None:
    assert session.states() == oracle.states(session.position)


def _mid_stream(s: DebugSession) -> int:
    """An interaction at which some θ instance is between its first and last input."""
    theta = s.reader.theta
    for inter in s.interactions():
        snap = s.reader.instances_at(inter.k)
        running = [i for i in range(theta.instances)
                   if 0 < snap[(theta.id, i)].position < s.engine.instances[(theta.id, i)].total - 1]
        if running:
            return inter.k
    raise AssertionError("no interaction fell while θ was running")


def _next_theta(s: DebugSession):
    """θ's next tuple in the original order (lowest epoch, instance, position)."""
    theta = s.reader.theta.id
    return min((p for p in s.pending() if p.next and p.ref.op == theta), key=lambda p: s.provenance.rank(p.ref))


def test_every_step_matches_the_oracle(keyed_run):
    s, oracle = DebugSession(keyed_run), Oracle(RunReader(keyed_run))
    s.jump(_mid_stream(s))
    _check(s, oracle)
    fe_next = _next_theta(s)
    r = s.step_into(fe_next.ref)
    assert r.ok and r.consumed == [fe_next.label]
    _check(s, oracle)
    downstream = [p for p in s.pending() if p.next and p.label.startswith("FD") and not p.free]
    assert downstream, "FE's output waits at FD after a step-into"
    r = s.step_into(downstream[0].ref)
    assert r.ok
    _check(s, oracle)
    r = s.step_out()
    assert r.ok and r.consumed
    _check(s, oracle)
    # the FD tuple was all that remained of the FE tuple's scope: both frames are done
    assert not s.can_step_out() and s.scope_stack == []
    r = s.step_into(_next_theta(s).ref)
    r = s.step_out()
    assert r.ok and r.consumed
    _check(s, oracle)
    for _ in range(3):
        nxt = _next_theta(s)
        r = s.step_over(nxt.ref)
        assert r.ok, r.note
        _check(s, oracle)
    scope = s.scope(nxt.ref)
    assert {n.ref.op for n in scope.walk()} >= {s.reader.operator("FE").id}


def test_step_back_then_the_same_step_gives_identical_states(keyed_run):
    s = DebugSession(keyed_run)
    s.jump(_mid_stream(s))
    first = _next_theta(s).ref
    before = s.states()
    s.step_over(first)
    after = s.states()
    assert s.step_back().ok and s.states() == before
    s.step_over(first)
    assert s.states() == after
    s.step_into(_next_theta(s).ref)
    mid = s.states()
    s.step_out()
    s.step_back()
    assert s.states() == mid and s.scope_stack, "step_back restores the step-into frame too"


def test_run_until_and_last_change_land_on_the_right_step(keyed_run):
    s, oracle = DebugSession(keyed_run), Oracle(RunReader(keyed_run))
    fd = s.reader.operator("FD")
    # the oracle: where each FD instance first and last changed its blacklist
    firsts, lasts = {}, {}
    for d in range(fd.instances):
        prev = {}
        for n in range(len(oracle.inputs(fd.id, d)) + 1):
            cur = oracle.state_after(fd.id, d, n)["blacklist"] if n % 1 == 0 else None
            if cur != prev:
                firsts.setdefault(d, n - 1)
                lasts[d] = n - 1
            prev = cur
            if n > 0 and d in lasts and n > max(lasts.values()) + 400:
                break
    assert firsts, "some customer gets blacklisted in this workload"
    d, first = min(firsts.items(), key=lambda kv: kv[1])
    customer = next(iter(oracle.state_after(fd.id, d, first + 1)["blacklist"]))

    s.jump(0)
    r = s.run_until(f"{customer!r} in FD.blacklist")
    assert r.ok
    assert s.position[f"FD:{d}"] == first + 1
    _check(s, oracle)

    s.jump(s.interactions()[-1].k)
    r = s.last_change(f"FD:{d}", "blacklist")
    assert r.ok, r.note
    assert s.position[f"FD:{d}"] == lasts[d]
    _check(s, oracle)
    nxt = next(p for p in s.pending(f"FD:{d}") if p.next)
    assert nxt.ref == TupleRef(fd.id, d, lasts[d])
    r = s.step_into(nxt.ref)
    assert any(f.startswith("blacklist") for f in r.changed[f"FD:{d}"])


def test_overlaps_on_keywords_match_an_independent_count(keywords_run):
    s, oracle = DebugSession(keywords_run), Oracle(RunReader(keywords_run))
    overlaps = s.overlaps()
    expected = oracle.overlapping_roots()
    got = {("θ", o.root.instance, o.root.position): o for o in overlaps}
    assert set(got) == set(expected)
    assert 0 < len(overlaps) < s.provenance.theta_roots()
    for root, o in got.items():
        # the blocker is a later θ input whose tuple the instance consumed before one of root's
        assert oracle.rank(("θ", o.blocker.instance, o.blocker.position)) > oracle.rank(root)
        seen = [r for _, _, r in oracle.inputs(o.at.op, o.at.instance)]
        blocker = ("θ", o.blocker.instance, o.blocker.position)
        assert seen.index(blocker) < max(n for n, r in enumerate(seen) if r == root)

    # from the position just before an overlapping tuple, its step-over is refused, naming the blocker
    o = overlaps[0]
    s.jump(0)
    theta = s.reader.theta.id
    while s.engine.instances[(theta, o.root.instance)].count < o.root.position:
        nxt = min((p for p in s.pending() if p.next and p.ref.op == theta), key=lambda p: s.provenance.rank(p.ref))
        assert s.step_over(nxt.ref).ok
    avail = s.can_step_over(o.root)
    assert not avail and "overlaps" in avail.reason
    blocker = s.parse_ref(avail.blocker)  # a later θ tuple, whichever place it blocks at
    assert s.provenance.rank(blocker) > s.provenance.rank(o.root)
    assert ("θ", blocker.instance, blocker.position) in [r for *_, r in oracle.inputs(theta, blocker.instance)]
    assert s.step_into(o.root).ok, "step-into is always possible for the next tuple"


def test_logged_results_are_served_and_a_different_call_is_named(spark, tmp_path, monkeypatch):
    from tt.recorder.session import RecordingSession

    sentiment = workloads.load_sample("sentiment")
    out = tmp_path / "sentiment.db"
    s = RecordingSession(out, Path(sentiment.__file__), [], watch="Sentiment", every=0.3)
    with s:
        sentiment.build(spark, 1500, 2).run()
    s.close()
    reader = RunReader(out)
    knn = reader.operator("Sentiment")
    assert sum(len(reader.results(knn.id, i)) for i in range(knn.instances)) > 10

    def no_draws():
        raise AssertionError("replay must not call the wrapped function")
    drawn = getattr(random.random, "__wrapped__", random.random)   # (tt may have patched it: core/nondeterministic.py)
    no_draws.__qualname__, no_draws.__module__ = drawn.__qualname__, drawn.__module__
    monkeypatch.setattr(random, "random", no_draws)
    assert all(r["ok"] for r in verify(reader))
    monkeypatch.undo()

    class Rewritten(sentiment.Sentiment):  # the code now draws twice per tie
        def process(self, row, port=0):
            import tt
            tt.log_result(random.random)
            yield from super().process(row, port)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    reader.conn.close()
    import sqlite3
    conn = sqlite3.connect(out)
    conn.execute("UPDATE operators SET code=? WHERE name='Sentiment'", (cloudpickle.dumps(Rewritten()),))
    conn.commit()
    conn.close()
    with pytest.raises(Exception, match="was not recorded by you"):
        verify(RunReader(out))
    results = verify(RunReader(out), trust=True)
    bad = results[-1]
    assert not bad["ok"] and bad["op"] == "Sentiment" and "log_result" in bad["error"]
    assert "input #" in bad["error"] and "call" in bad["error"]


class Noisy(workloads.Enrich):
    """Non-deterministic and not wrapped in log_result: a replay cannot reproduce it."""

    def process(self, row, port=0):
        self.jitter = random.random()
        yield from super().process(row, port)


def test_unwrapped_nondeterminism_is_detected(record, capsys):
    def build(spark):
        import tt
        flow = tt.Dataflow("noisy")
        flow.source("U", workloads.payments_df(spark, 2000, 2)).process(Noisy(), name="N") \
            .key_by(lambda r: r["customer"], partitions=2).process(workloads.Detect(), name="D").collect("S")
        return flow
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    path = record(build, watch="N", every=0.2)
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "N:" in out and "jitter" in out and "diverges" in out


def test_replay_and_inspect_cli(keyed_run, capsys):
    s = DebugSession(keyed_run)
    k = _mid_stream(s)
    s.jump(k)
    nxt = _next_theta(s).label
    code = main(["replay", str(keyed_run), "--to", str(k), "--step-into", nxt, "--step-out", "--step-back",
                 "--step-back", "--step-over", nxt, "--json"])
    assert code == 0
    lines = json.loads(capsys.readouterr().out)
    assert [x["action"] for x in lines] == ["jump", "step_into", "step_out", "step_back", "step_back", "step_over"]
    assert lines[1]["consumed"] == [nxt] and nxt.rsplit(":", 1)[0] in lines[1]["changed"] and lines[-1]["pending"]
    assert lines[3]["position"] == lines[1]["position"] and lines[4]["position"] == lines[0]["position"]
    assert lines[5]["position"] == lines[2]["position"], "step-over = step-into + step-out here"
    code = main(["replay", str(keyed_run), "--to", str(k), "--step-out", "--json"])
    refused = json.loads(capsys.readouterr().out)[-1]
    assert code == 1 and not refused["ok"] and "step into a tuple first" in refused["note"]
    assert refused["position"] == lines[0]["position"]

    assert main(["inspect", str(keyed_run), "scope", nxt, "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["tuple"] == nxt and tree["row"]["id"] >= 0 and tree["step_over"] is True
    assert main(["inspect", str(keyed_run), "overlaps", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["overlaps"] == 0 and data["step_over"] == data["theta_inputs"] == workloads.PAYMENTS
    assert main(["replay", str(keyed_run), "--step-over", "FE:0:999999"]) == 2
    assert "inputs #0.." in capsys.readouterr().err


def test_step_back_at_a_fresh_position_reverses_over_theta_previous_input(keyed_run):
    """rr's reverse-next (issue 11): after a jump, N goes to just before θ's previous input in
    the original order; every state there is the oracle's, and stepping over those inputs
    again gives back the interaction's position and states."""
    s, oracle = DebugSession(keyed_run), Oracle(RunReader(keyed_run))
    s.jump(_mid_stream(s))
    at_k, pos_k = s.states(), s.position
    undone = []
    for _ in range(3):
        theta = s.reader.theta.id
        expected = max((TupleRef(theta, i, inst.count - 1) for (op, i), inst in s.engine.instances.items()
                        if op == theta and inst.count > 0), key=s.provenance.rank)
        assert s.can_step_back()
        r = s.step_back()
        assert r.ok and r.target == f"step_over {s.label(expected)}", (r.target, r.note)
        assert s.engine.instances[(expected.op, expected.instance)].count == expected.position
        _check(s, oracle)
        nxt = _next_theta(s)
        assert nxt.ref == expected, "θ's next tuple is the one stepped back over"
        undone.append(expected)
    for ref in reversed(undone):
        r = s.step_over(ref)
        assert r.ok, r.note
        _check(s, oracle)
    assert s.position == pos_k and s.states() == at_k
    # after a forward step a step back still undoes it
    r = s.step_over(_next_theta(s).ref)
    assert s.step_back().ok and s.position == pos_k


def test_step_back_at_the_start_says_why(keyed_run):
    s = DebugSession(keyed_run)
    s.jump(0)
    assert all(inst.count == 0 for (op, _), inst in s.engine.instances.items() if op == s.reader.theta.id), \
        "interaction 0 is the start of the run"
    r = s.step_back()
    assert not r.ok and "nothing to step back over" in r.note
    assert not s.can_step_back()
    s.step_over(_next_theta(s).ref)
    assert s.can_step_back() and s.step_back().ok


def test_a_run_until_says_when_its_condition_held_where_it_started(keyed_run):
    """Run until a condition that holds here already goes on to the next step where it holds,
    which is not where it came true: it now says so (the condition reads states alone)."""
    s = DebugSession(keyed_run)
    s.jump(0)
    step = s.run_until("'FD' == op and len(FD.blacklist) > 0")   # (reads the step: nothing to say before it)
    assert step.ok and "held already" not in step.note, step.note
    i = next(label for label, fields in step.changed.items() if any(f.startswith("blacklist") for f in fields))
    condition = f"len(FD[{i.split(':')[1]}].blacklist) > 0"
    s.jump(0)
    first = s.run_until(condition)
    assert first.ok and "held already" not in first.note, first.note
    again = s.run_until(condition)
    assert again.ok and again.note.endswith(f"; it held already where this run started ({condition}): the last "
                                            f"change of what it reads finds where it came true"), again.note


def test_last_change_after_run_until_searches_back_from_restore_points(keyed_run, monkeypatch):
    """Issue 11 item 8: a long run until leaves restore points behind (here at every tick), and
    `last_change` searches back from the nearest one; where it lands is the oracle's."""
    from tt.replay import restore_points

    monkeypatch.setattr(restore_points, "SAVE_EVERY", 0.0)
    s, oracle = DebugSession(keyed_run), Oracle(RunReader(keyed_run))
    s.jump(0)
    r = s.run_until("'FD' == op and len(FD.blacklist) > 0")
    assert r.ok, r.note
    inst = next(i for i, fields in r.changed.items() if any(f.startswith("blacklist") for f in fields))
    here = s.position[inst]
    r = s.last_change(inst, "blacklist")
    assert r.ok, r.note
    assert s.position[inst] == here - 1, "the change was made by the run until's last step"
    _check(s, oracle)
    # a step from here reports what it consumed, though restore points lie between here and its target
    nxt = next(p for p in s.pending(inst) if p.next)
    r = s.step_into(nxt.ref)
    assert r.ok and r.consumed == [nxt.label], (r.consumed, nxt.label)
    _check(s, oracle)
    assert s.step_back().ok and s.position[inst] == here - 1
    assert s.step_back().ok and s.position[inst] == here, "N undoes the last change"
