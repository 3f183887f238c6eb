"""What `tt replay` and `tt inspect` print (issue 11, item 11; and item 9's counts and
names): one JSON document for --json, changed fields only, the tuples with their values
in text, JSON objects for condition details, an empty checkpoint result, a fast scope
view whose rows are whole in JSON and visibly cut in text, and tuple counts without the
end-of-input step. Everything runs on real recordings (Spark, SQLite)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import workloads
from tt.cli import output
from tt.cli.main import main
from tt.core.scopes import TupleRef
from tt.replay.session import DebugSession
from tt.store.reader import RunReader

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent.parent / "sample_runs" / "fraud" / "job.py"
ROWS = 30_000


@pytest.fixture(scope="module")
def fraud_run(spark, tmp_path_factory):
    """The fraud sample as the README records it (smaller): the ¥ payment triggers an interaction."""
    tmp = tmp_path_factory.mktemp("cli_output")
    out = tmp / "fraud.db"
    code = main(["record", str(JOB), "--watch", "FE", "--every", "1s", "--when", "row['amount'].startswith('¥')",
                 "-o", str(out), "--", "--rows", str(ROWS), "--data", str(tmp / "payments.parquet")])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def keywords_run(spark, tmp_path_factory):
    """Keywords: scopes that overlap (two paths from θ meet again at a union)."""
    return workloads.record_keywords(spark, tmp_path_factory.mktemp("cli_output_kw") / "keywords.db", 3000)


def _run(capsys, *args: str, rc: int = 0) -> str:
    assert main(list(args)) == rc, capsys.readouterr()
    captured = capsys.readouterr()
    assert not captured.err, captured.err
    return captured.out


def _json(capsys, *args: str, rc: int = 0):
    return json.loads(_run(capsys, *args, rc=rc))


def _one_error_line(capsys, *needles: str) -> None:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tt: error: "), lines
    for n in needles:
        assert n in lines[0], lines[0]


def _yen(capsys, run) -> dict:
    """The interaction that Bob's ¥ payment triggered, from `tt inspect interactions --json`."""
    rows = _json(capsys, "inspect", str(run), "interactions", "--json")
    return next(r for r in rows if r["trigger"] == "condition")


def _bob_fd(capsys, run) -> str:
    """The FD instance that blacklists Bob (from the stored states at the end)."""
    rows = _json(capsys, "inspect", str(run), "interactions", "--json")
    states = _json(capsys, "inspect", str(run), "state", "--at", str(rows[-1]["k"]), "--op", "FD", "--json")
    return next(name for name, s in states.items() if "Bob" in s["state"]["blacklist"])


# --- tt replay: --json is one document, --nl one object per line -------------------------------------

def _before(ref: str) -> str:
    """A --run-until that stops just before θ tuple `ref` (after the one before it)."""
    op, i, n = ref.split(":")
    return f"op == {op!r} and instance == {int(i)} and position == {int(n) - 1}"


def test_replay_json_is_one_document_and_nl_one_object_per_line(fraud_run, capsys):
    ref = _yen(capsys, fraud_run)["detail"]["tuple"]
    args = ["replay", str(fraud_run), "--run-until", _before(ref), "--step-into", ref, "--step-out"]
    steps = _json(capsys, *args, "--json")
    assert isinstance(steps, list)
    assert [s["action"] for s in steps] == ["jump", "run_until", "step_into", "step_out"]
    assert all(s["ok"] for s in steps), [s["note"] for s in steps]

    lines = _run(capsys, *args, "--nl").splitlines()
    assert len(lines) == 4
    by_line = [json.loads(line) for line in lines]
    for a, b in zip(steps, by_line):
        a.pop("seconds"), b.pop("seconds")
        assert a == b, "--nl holds the same objects, one per line"

    assert main([*args, "--json", "--nl"]) == 2
    _one_error_line(capsys, "choose one output format")


def test_replay_json_gives_the_changed_fields_only_and_whole_states_with_states_all(fraud_run, capsys):
    yen = _yen(capsys, fraud_run)
    ref = yen["detail"]["tuple"]
    fe = ref.rsplit(":", 1)[0]
    args = ["replay", str(fraud_run), "--run-until", _before(ref), "--step-into", ref]
    step = _json(capsys, *args, "--json")[-1]
    assert "states" not in step
    old = step["changed"][fe]["highest.Bob"]["old"]
    assert step["changed"] == {fe: {"highest.Bob": {"old": old, "new": 5000.0}}} and old < 5000.0
    assert step["consumed"] == [ref] and step["rows"][ref] == yen["detail"]["row"]

    whole = _json(capsys, *args, "--states", "all", "--json")[-1]
    assert whole["changed"] == step["changed"]
    assert set(whole["states"]) == set(step["position"]), "every instance's whole state"
    assert whole["states"][fe]["highest"]["Bob"] == 5000.0 and len(whole["states"][fe]["highest"]) > 100
    assert len(json.dumps(whole["states"])) > 50 * len(json.dumps(step["changed"]))

    # a field that appeared has no "old"; one that went has no "new"
    fd = _bob_fd(capsys, fraud_run)
    steps = _json(capsys, "replay", str(fraud_run), "--run-until", "'Bob' in FD.blacklist",
                  "--last-change", f"{fd}.blacklist.Bob", "--json")
    bob_id = yen["detail"]["row"]["id"]
    assert steps[1]["changed"][fd]["blacklist.Bob"] == {"new": bob_id}
    assert steps[2]["changed"][fd]["blacklist.Bob"] == {"old": bob_id}
    assert steps[1]["stopped_at"]["where"] == "after" and steps[2]["stopped_at"]["where"] == "before"
    assert steps[1]["stopped_at"]["tuple"] == steps[2]["stopped_at"]["tuple"]


# --- tt replay in text: the tuples, with their values ------------------------------------------------

def test_replay_text_shows_the_tuples_and_the_yen(fraud_run, capsys):
    yen = _yen(capsys, fraud_run)
    fd = _bob_fd(capsys, fraud_run)
    out = _run(capsys, "replay", str(fraud_run), "--run-until", "'Bob' in FD.blacklist",
               "--last-change", f"{fd}.blacklist.Bob")
    m = re.search(rf"stopped after ({fd}:\d+): the condition holds", out)
    assert m, out
    at_fd = m.group(1)
    bob = f"{{id: {yen['detail']['row']['id']}, customer: 'Bob', amount: '¥5000'"
    # the run-until names the θ input that the tuple came from, with its value
    assert f"  {at_fd} came from {yen['detail']['tuple']} {bob}" in out, out
    # the last change leaves Bob's payment waiting at FD, shown whole (FE added usd 5000.0)
    assert re.search(rf"^  next {at_fd} {re.escape(bob)}, merchant: '\w+', ts: \d+, usd: 5000\.0, "
                     rf"highest: 5000\.0}}$", out, re.M), out
    assert f"  {fd}.blacklist.Bob: {yen['detail']['row']['id']} → (absent)" in out
    assert "…[+" not in out and "is cut" not in out, "no value cut"

    # a step into prints the tuple stepped into with its value, and the step out what it consumed
    out = _run(capsys, "replay", str(fraud_run), "--run-until", "'Bob' in FD.blacklist", "--last-change",
               f"{fd}.blacklist.Bob", "--step-over", at_fd)
    step = out[out.index(f"step_over {at_fd}: ok"):]
    assert f"\n  {at_fd} {bob}" in step, step
    ff = "FF:" + at_fd.split(":", 1)[1]
    assert re.search(rf"^  consumed {ff} {re.escape(bob)}.*label: 'Fraud'}}$", step, re.M), step


def test_replay_text_cuts_only_with_a_marker_and_says_how_to_see_it(fraud_run, capsys, monkeypatch):
    monkeypatch.setattr(output, "ROW_LIMIT", 40)
    out = _run(capsys, "replay", str(fraud_run), "--to", "0")
    nexts = [line for line in out.splitlines() if line.startswith("  next ")]
    assert nexts and all(re.search(r"…\[\+\d+ chars\]$", line) for line in nexts), out
    assert out.rstrip().endswith("(a value ending in …[+N chars] is cut; --json prints it whole)")
    whole = _json(capsys, "replay", str(fraud_run), "--to", "0", "--json")[0]["pending"]
    from tt.core.values import render

    for line in nexts:
        label, text = line[len("  next "):].split(" ", 1)
        full = render(whole[label.rsplit(":", 1)[0]]["row"], 10_000)
        cut = int(re.search(r"\[\+(\d+) chars\]$", text).group(1))
        assert full.startswith(text[:40]) and len(full) == 40 + cut


# --- tt inspect interactions: the condition's tuple, named and as JSON ------------------------------

def test_condition_detail_is_a_json_object_naming_the_tuple_as_everywhere(fraud_run, capsys):
    yen = _yen(capsys, fraud_run)
    d = yen["detail"]
    assert d["row"] == {"id": d["row"]["id"], "customer": "Bob", "amount": "¥5000",
                        "merchant": d["row"]["merchant"], "ts": d["row"]["ts"]}
    assert isinstance(d["row"]["id"], int) and isinstance(d["row"]["ts"], int)
    op, i, n = d["tuple"].split(":")
    assert op == d["op"] == "FE" and int(i) == d["instance"] and int(n) == d["position"] - 1
    assert yen["positions"][f"FE:{i}"] == d["position"], "the interaction was taken just after the tuple"

    text = _run(capsys, "inspect", str(fraud_run), "interactions")
    assert re.search(rf"^{yen['k']}\s.*condition {d['tuple']}\s", text, re.M), text

    csv = _run(capsys, "inspect", str(fraud_run), "interactions", "--csv")
    assert '""amount"":""¥5000""' in csv

    # the same tuple under the same name: the scope view and a replay's stop
    tree = _json(capsys, "inspect", str(fraud_run), "scope", d["tuple"], "--json")
    assert tree["tuple"] == d["tuple"] and tree["row"] == d["row"]
    steps = _json(capsys, "replay", str(fraud_run), "--run-until", "'Bob' in FD.blacklist", "--json")
    assert steps[-1]["stopped_at"]["from"] == d["tuple"] and steps[-1]["rows"][d["tuple"]] == d["row"]
    assert steps[-1]["stopped_at"]["tuple"] == tree["children"][0]["tuple"]


# --- counts: tuples, not the end-of-input step ---------------------------------------------------------

def test_counts_are_tuples_not_the_end_of_input_step(fraud_run, capsys):
    rows = _json(capsys, "inspect", str(fraud_run), "interactions", "--json")
    end = rows[-1]
    fe = {k: v for k, v in end["positions"].items() if k.startswith("FE:")}
    assert sum(fe.values()) == ROWS, fe
    assert set(end["ended"]) == set(end["positions"]), "every instance took its end-of-input step"
    assert not rows[0]["ended"]

    states = _json(capsys, "inspect", str(fraud_run), "state", "--at", str(end["k"]), "--op", "FD", "--json")
    for name, s in states.items():
        assert s["position"] == s["state"]["scored"] == end["positions"][name], "FD scores each tuple once"
        assert s["ended"] is True

    summary = _json(capsys, "inspect", str(fraud_run), "--json")
    assert summary["theta_tuples"] == ROWS
    assert {o["name"]: o["tuples"] for o in summary["operators"] if o["in_g"]}["FD"] == ROWS
    text = _run(capsys, "inspect", str(fraud_run))
    assert f"{ROWS:,} tuples into θ" in text
    text = _run(capsys, "inspect", str(fraud_run), "state", "--at", str(end["k"]), "--op", "FD")
    first = next(iter(states))
    assert f"{first}  (after {states[first]['position']:,} tuples, and its end of input)" in text


# --- tt inspect checkpoints without a plan ---------------------------------------------------------------

def test_checkpoints_without_a_plan_is_an_empty_result(fraud_run, capsys):
    assert _json(capsys, "inspect", str(fraud_run), "checkpoints", "--json") == []
    assert _run(capsys, "inspect", str(fraud_run), "checkpoints", "--nl") == ""
    text = _run(capsys, "inspect", str(fraud_run), "checkpoints")
    assert "no checkpoint plan" in text and "tt checkpoint" in text


# --- tt inspect scope: rows whole in JSON, cut visibly in text; progress on a terminal ------------------

def test_scope_rows_are_whole_in_json_and_cut_visibly_in_text(fraud_run, capsys, monkeypatch):
    ref = _yen(capsys, fraud_run)["detail"]["tuple"]
    tree = _json(capsys, "inspect", str(fraud_run), "scope", ref, "--json")
    fd = tree["children"][0]
    assert set(fd["row"]) == {"id", "customer", "amount", "merchant", "ts", "usd", "highest"}
    assert fd["children"][0]["row"]["label"] == "Fraud"

    text = _run(capsys, "inspect", str(fraud_run), "scope", ref)
    assert "…" not in text and "label: 'Fraud'}" in text, text

    monkeypatch.setattr(output, "ROW_LIMIT", 50)
    text = _run(capsys, "inspect", str(fraud_run), "scope", ref)
    lines = text.splitlines()
    assert all(re.search(r"…\[\+\d+ chars\]$", line) for line in lines[:3]), text
    assert lines[-1] == f"(a value ending in …[+N chars] is cut; `tt inspect RUN scope {ref} --json` prints it whole)"

    assert _json(capsys, "inspect", str(fraud_run), "scope", ref, "--nl") == json.loads(
        _run(capsys, "inspect", str(fraud_run), "scope", ref, "--json"))
    assert main(["inspect", str(fraud_run), "scope", ref, "--csv"]) == 2
    _one_error_line(capsys, "--csv is for the")


def test_scope_shows_progress_on_stderr_only_on_a_terminal(fraud_run, capsys, monkeypatch):
    ref = _yen(capsys, fraud_run)["detail"]["tuple"]
    assert main(["inspect", str(fraud_run), "scope", ref]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["inspect", str(fraud_run), "scope", ref]) == 0
    captured = capsys.readouterr()
    assert "replaying the run to read the 3 tuple(s) of" in captured.err
    assert "replaying" not in captured.out and captured.out.startswith(ref)


def test_long_work_off_a_terminal_says_how_far_it_is_on_stderr(fraud_run, capsys, monkeypatch):
    """Off a terminal (a log, CI, nohup) `tt verify`, `tt checkpoint`, `tt pack` print a line
    of progress every 30 s once they have run that long: a 20-minute `tt checkpoint` said
    nothing until its end. Short work prints nothing; stdout keeps the result alone. (Whether
    work is short is its clock's: set here, not left to how fast this machine verifies.)"""
    monkeypatch.setattr(output.Progress, "LINE_EVERY", 1e9)   # (as if every step took no time)
    assert main(["verify", str(fraud_run)]) == 0
    quick = capsys.readouterr()
    assert quick.err == "" and "verified" in quick.out
    monkeypatch.setattr(output.Progress, "LINE_EVERY", 0.0)   # (as if every step took 30 s)
    assert main(["verify", str(fraud_run)]) == 0
    slow = capsys.readouterr()
    lines = slow.err.splitlines()
    n = len(RunReader(fraud_run).interactions())
    assert lines and all(re.fullmatch(rf"tt: verifying: \d+ of {n} \(0:\d\d\)", line) for line in lines), lines
    assert lines[-1].startswith(f"tt: verifying: {n} of {n} ") and slow.out == quick.out
    assert sum(line.startswith(f"tt: verifying: {n} of") for line in lines) == 1, "the end is said once"


def test_scope_step_over_is_the_overlaps_answer(keywords_run, capsys):
    """The scope view decides one tuple's step-over from the instances its scope reaches,
    without ranking the whole run; its answer, the tuple in the way and where, are the ones
    `overlaps` gives for every θ input."""
    from tt.cli.inspect_replay import _overlap_of

    s = DebugSession(RunReader(keywords_run))
    overlaps = {o.root: o for o in s.overlaps()}
    assert overlaps
    theta = s.graph.theta
    refs = (TupleRef(theta, i, n) for i in range(s.graph.nodes[theta].instances)
            for n in range(s.provenance.index(theta, i).total))
    roots = [r for r in refs if s.provenance.is_theta_root(r)]
    sample = [r for r in roots if r in overlaps] + roots[::25]
    for r in sample:
        assert _overlap_of(s.provenance, s.scope(r)) == overlaps.get(r), s.label(r)

    label = next(s.label(r) for r in roots if r not in overlaps)
    tree = _json(capsys, "inspect", str(keywords_run), "scope", label, "--json")
    assert tree["tuple"] == label and tree["step_over"] is True and "overlaps_with" not in tree


def test_scope_of_a_tuple_without_step_over_names_the_tuple_in_the_way(keywords_run, capsys):
    s = DebugSession(RunReader(keywords_run))
    o = s.overlaps()[0]
    label = s.label(o.root)
    tree = _json(capsys, "inspect", str(keywords_run), "scope", label, "--json")
    assert tree["step_over"] is False
    assert tree["overlaps_with"] == s.label(o.blocker) and tree["at"] == s.label(o.at)
    text = _run(capsys, "inspect", str(keywords_run), "scope", label)
    assert text.splitlines()[-1] == (f"no step-over: the scope overlaps that of {s.label(o.blocker)} "
                                     f"(at {s.label(o.at)})")


def test_state_text_shows_values_as_tt_replay_does_not_as_tagged_json():
    """A dict keyed by tuples (a hooked Q1's groups) reads as Python would print it."""
    from tt.cli.inspect import _states_text
    from tt.core import values

    state = values.encode({"groups": {("A", "F"): 3.5}, "last": "c6", "seen": {1, 2}})
    text, cut = _states_text({"Q1:0": {"position": 4, "ended": True, "state": state}}, 2)
    assert "  groups = {(A, F): 3.5}" in text.replace("'", ""), text
    assert "$dict" not in text and "$tuple" not in text and not cut
    assert "  last = 'c6'" in text and "  seen = {1, 2}" in text
