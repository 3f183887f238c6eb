"""The README is a test: every command of its ```sh blocks, run exactly as written.

Each command line of every ```sh block of README.md (lines continued with a trailing
backslash joined, the trailing `# comment` kept apart as the claim to check) runs
through `bash -c`, as typed, in README order, in a temporary directory prepared like
a user's checkout: a copy of `sample_runs/` (without generated data) and `tt` from
this checkout's venv first on PATH, as after `. .venv/bin/activate`. Each command's
exit status is checked, and what its comment (or the prose beside it) says it shows,
wherever a program can tell.

The paragraph on failed runs runs in a second directory whose `run.db` is a recording
of a job whose FE raises on input #999 of its instance 1 (`workloads.build_failing`,
the post-mortem tests' job), which is what that paragraph assumes.

Commands that cannot run unattended (they open the terminal debugger, or install the
checkout) are listed in COVERED_ELSEWHERE with the tests that cover them. A README
command that is neither run here nor listed there fails
`test_every_readme_command_is_run_or_covered_elsewhere` (a fast test: it runs in
`pytest -m "not slow"` too); the commands themselves run in the slow tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
README = ROOT / "README.md"
VENV_BIN = ROOT / ".venv" / "bin"

FRAUD_INSTANCES = {f"{op}:{i}" for op in ("FE", "FD", "FF", "S") for i in range(4)}
YEN = "FE:1:48716"          # Bob's ¥5000 payment: row 66,666 of 200,000 (generate.py), FE's instance 1
RECORD_TIMEOUT = 900        # failure bounds only: every command is waited on until it exits
COMMAND_TIMEOUT = 600


# --- the README's commands ---------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    heading: str   # the section the block is in
    text: str      # what bash runs: continued lines joined, the comment dropped
    claim: str     # the trailing comment ("" if none)
    block: int     # which ```sh block (0-based)

    @property
    def key(self) -> tuple[str, str]:
        return self.heading, " ".join(self.text.split())


def split_comment(line: str) -> tuple[str, str]:
    """(command, comment) of one logical shell line: the comment starts at the first `#`
    outside quotes that begins a word, as bash reads it."""
    quote, escaped = None, False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if ch == "'" else quote
        elif ch == "\\":
            escaped = True
        elif quote == '"':
            quote = None if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    assert quote is None, f"unbalanced quote in README command: {line}"
    return line.rstrip(), ""


def readme_commands(text: str | None = None) -> list[Command]:
    """Every command line of every ```sh block, in README order."""
    lines = (README.read_text() if text is None else text).splitlines()
    out: list[Command] = []
    heading, fence, block, body = "", None, -1, []
    for line in lines:
        if fence is None:
            if line.startswith("```"):
                fence = line[3:].strip()
                body = []
            elif line.startswith("#"):
                heading = line.lstrip("#").strip()
            continue
        if not line.startswith("```"):
            body.append(line)
            continue
        if fence == "sh":
            block += 1
            logical = "\n".join(body).replace("\\\n", "")   # bash drops backslash-newline
            for raw in logical.splitlines():
                if raw.strip():
                    cmd, claim = split_comment(raw)
                    if cmd:
                        out.append(Command(heading, cmd.strip(), claim, block))
        fence = None
    assert fence is None, "README.md has an unclosed ``` block"
    return out


COMMANDS = readme_commands()


def _key(heading: str, text: str) -> tuple[str, str]:
    return heading, " ".join(text.split())


# --- commands no test can type unattended, and the tests that cover them -----------------------

COVERED_ELSEWHERE: dict[tuple[str, str], tuple[str, list[str]]] = {
    _key("Quickstart", 'python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tt demo'): (
        "installs the checkout into a new venv (this suite runs in one), then `tt demo` opens the debugger "
        "on a terminal; the tmux test records with `tt demo --no-show` and types the README's keys into "
        "`tt debug` on that recording",
        ["tests/test_tui_tmux.py::test_tt_debug_under_tmux_finds_bobs_blacklisting"]),
    _key("Quickstart", 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/pytest'): (
        "installs the checkout with its test extras and runs the suite: running it is running this suite",
        ["tests/test_readme.py::test_every_readme_command_is_run_or_covered_elsewhere"]),
    _key("Debugging", "tt debug run.db"): (
        "opens the terminal debugger; driven by its keys under tmux and in Textual's pilot",
        ["tests/test_tui_tmux.py::test_tt_debug_under_tmux_finds_bobs_blacklisting",
         "tests/test_tui.py::test_readme_last_change_from_the_state_trees_cursor"]),
    _key("Debugging", "tt record sample_runs/fraud/job.py --watch FE --every 1s -o live.db --tui"): (
        "records with the debugger open; driven under tmux (the same job, θ and --every)",
        ["tests/test_tui_tmux.py::test_tt_record_tui_follows_the_run_and_takes_an_interaction_on_i"]),
    _key("Plain PySpark jobs, unchanged", "tt debug pyspark.db"): (
        "opens the terminal debugger on the plain PySpark sample; driven in Textual's pilot with the "
        "README's condition (`c`), then a step and a step back",
        ["tests/test_fraud_pyspark.py::test_tt_debug_runs_until_the_enrichment_reads_the_yen_as_dollars"]),
    _key("A streaming query: sessions that close too early", "tt debug sessions.db"): (
        "opens the terminal debugger on the streaming sample; driven in Textual's pilot with the README's "
        "condition (`c`), `/` alice twice (her session, then her timer), and a step back (`N`)",
        ["tests/test_sessions_streaming.py::test_tt_debug_stops_where_alices_timer_is_set_in_seconds_and_steps_back"]),
    _key("How it works", "tt debug run.db"): (
        "opens the terminal debugger on the failed run; driven in Textual's pilot (`s` re-raises)",
        ["tests/test_postmortem.py::test_tt_debug_opens_before_the_failing_tuple_and_s_re_raises"]),
}


# --- running them ------------------------------------------------------------------------------

@dataclass
class Result:
    command: Command
    cwd: Path
    rc: int
    out: str
    err: str

    def __str__(self) -> str:
        return (f"$ {self.command.text}    # {self.command.claim}\n(in {self.cwd}) exit status {self.rc}\n"
                f"--- stdout (end)\n{self.out[-4000:]}\n--- stderr (end)\n{self.err[-4000:]}")


@dataclass
class Ctx:
    dir: Path   # where the commands ran
    results: dict[tuple[str, str], Result] = field(default_factory=dict)

    def result(self, heading: str, text: str) -> Result:
        return self.results[_key(heading, text)]


@dataclass(frozen=True)
class Check:
    where: str                       # "checkout" or "failed"
    fn: Callable[[Result, Ctx], None]
    timeout: int


RUN: dict[tuple[str, str], Check] = {}


def runs(heading: str, text: str, where: str = "checkout", timeout: int = COMMAND_TIMEOUT):
    """Register the check of the README command `text` (under `heading`), run in `where`."""
    def register(fn):
        key = _key(heading, text)
        assert key not in RUN and where in ("checkout", "failed"), (key, where)
        RUN[key] = Check(where, fn, timeout)
        return fn
    return register


def json_objects(text: str) -> list:
    """The objects a --json (one document: a list, or one object) or --nl (one per line) printed."""
    text = text.strip()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return doc if isinstance(doc, list) else [doc]


def ok(r: Result, rc: int = 0) -> None:
    assert r.rc == rc, str(r)
    assert "Traceback" not in r.err and "Traceback" not in r.out, str(r)


def _env(key_file: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", TT_KEY_FILE=str(key_file),
               LANG="C.UTF-8", LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8")
    return env


FAILING_JOB = f"""\
# The post-mortem tests' failing job: FE raises ZeroDivisionError on input #999 of its instance 1.
import sys

sys.path.insert(0, {str(TESTS)!r})

import tt
import workloads

workloads.register_by_value()
workloads.build_failing(tt.spark_session("failing")).run()
"""


def _record_failed_run(where: Path, env: dict[str, str]) -> None:
    """`run.db` in `where`: a recording of a job whose FE raised (the paragraph on failed runs)."""
    (where / "failing_job.py").write_text(FAILING_JOB)
    rec = subprocess.run([str(VENV_BIN / "tt"), "record", "failing_job.py", "--watch", "FE", "-o", "run.db"],
                         cwd=where, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=RECORD_TIMEOUT)
    assert rec.returncode == 1 and "raised ZeroDivisionError" in rec.stderr, rec.stdout + rec.stderr
    from tt.store.reader import RunReader

    reader = RunReader(where / "run.db")
    try:
        assert reader.status == "failed"
    finally:
        reader.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    env = _env(tmp_path_factory.mktemp("key") / "key")
    assert shutil.which("tt", path=env["PATH"]) == str(VENV_BIN / "tt")
    return env


def _run_all(where: str, cwd: Path, env: dict[str, str]) -> Ctx:
    """The README's commands that run in `where`, in README order, each to its end."""
    c = Ctx(cwd)
    for cmd in COMMANDS:
        check = RUN.get(cmd.key)
        if check is not None and check.where == where:
            p = subprocess.run(["bash", "-c", cmd.text], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=check.timeout)
            c.results[cmd.key] = Result(cmd, cwd, p.returncode, p.stdout, p.stderr)
    return c


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, env) -> Ctx:
    """A user's checkout (sample_runs/, no generated data), and the README's commands run in it."""
    where = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "sample_runs", where / "sample_runs", ignore=shutil.ignore_patterns("data", "__pycache__"))
    return _run_all("checkout", where, env)


@pytest.fixture(scope="module")
def failed(tmp_path_factory, env) -> Ctx:
    """A directory whose run.db failed as the README's paragraph says, and its commands run in it."""
    where = tmp_path_factory.mktemp("failed-run")
    _record_failed_run(where, env)
    return _run_all("failed", where, env)


# --- Using it --------------------------------------------------------------------------------------

USING = "Using it"
RECORD = ("tt record sample_runs/fraud/job.py --watch FE --every 1s --when \"row['amount'].startswith('¥')\" "
          "-o run.db -- --partitions 4")


@runs(USING, RECORD, timeout=RECORD_TIMEOUT)
def _record(r: Result, c: Ctx) -> None:
    ok(r)
    assert re.search(r"^recorded run\.db: \d+ interactions, 200,000 tuples into θ = FE", r.out, re.M), str(r)
    assert (c.dir / "run.db").is_file()
    # the prose: the sample generates its payments on first use; Spark's output goes to run.db.log
    assert (c.dir / "sample_runs" / "fraud" / "data" / "payments.parquet").is_file()
    assert (c.dir / "run.db.log").is_file()


def _interactions(c: Ctx) -> list[dict]:
    return json_objects(c.result(USING, "tt inspect run.db interactions --json").out)


@runs(USING, "tt inspect run.db")
def _summary(r: Result, c: Ctx) -> None:
    # the run, its DAG, interactions, sizes
    ok(r)
    n = len(_interactions(c))
    assert r.out.startswith("run.db: complete"), str(r)
    assert re.search(r"^θ\s+FE\s+\(G\(θ\) = FE, FD, FF, S\)", r.out, re.M), str(r)
    for op in ("U", "FE", "FD", "FF", "S"):
        assert re.search(rf"^{op}\s+\w+\s+\w+\s+\d+\s+4\b", r.out, re.M), f"operator {op}:\n{r}"
    assert re.search(r"^edges\s+U→FE, FE→FD \(shuffle\), FD→FF, FF→S$", r.out, re.M), str(r)
    assert re.search(rf"^interactions\s+{n} complete of {n} recorded", r.out, re.M), str(r)
    assert re.search(r"^sizes\s+file .*control log", r.out, re.M), str(r)


@runs(USING, "tt inspect run.db interactions --json")
def _interactions_json(r: Result, c: Ctx) -> None:
    # one object per interaction, with per-instance positions
    ok(r)
    rows = json_objects(r.out)
    recorded = int(re.search(r"recorded run\.db: (\d+) interactions", c.result(USING, RECORD).out).group(1))
    assert len(rows) == recorded and [o["k"] for o in rows] == list(range(recorded)), str(r)
    for o in rows:
        assert set(o["positions"]) == FRAUD_INSTANCES, o
        assert all(isinstance(v, int) and v >= 0 for v in o["positions"].values()), o
    triggers = [o["trigger"] for o in rows]
    assert triggers[0] == "start" and triggers[-1] == "end" and "periodic" in triggers, triggers   # --every 1s
    # --when: one interaction, right after Bob's ¥ payment, which the README names FE:1:48716
    [cond] = [o for o in rows if o["trigger"] == "condition"]
    assert YEN in json.dumps(cond["detail"]) and "¥5000" in json.dumps(cond["detail"], ensure_ascii=False), cond
    assert cond["positions"]["FE:1"] == 48717, cond
    assert sum(v for k, v in rows[-1]["positions"].items() if k.startswith("FE:")) == 200_000


@runs(USING, "tt inspect run.db state --at 3 --op FD")
def _state(r: Result, c: Ctx) -> None:
    # FD's instances' states at interaction 3
    ok(r)
    assert "interaction 3" in r.out.splitlines()[0], str(r)
    named = set(re.findall(r"^([A-Z]+:\d+)\b", r.out, re.M))
    assert named == {f"FD:{i}" for i in range(4)}, str(r)
    assert r.out.count("blacklist") >= 4 and r.out.count("scored") >= 4, str(r)   # FD's state, per instance
    at3 = _interactions(c)[3]["positions"]
    for i in range(4):
        m = re.search(rf"^FD:{i}\s+\(after ([\d,]+) tuples", r.out, re.M)
        assert m and int(m.group(1).replace(",", "")) == at3[f"FD:{i}"], (at3, str(r))


@runs(USING, "tt verify run.db")
def _verify(r: Result, c: Ctx) -> None:
    # replay every interaction locally and compare
    ok(r)
    n = len(_interactions(c))
    assert re.search(rf"verified {n} of {n} interactions", r.out), str(r)


# --- Scripted sessions, scopes, overlaps ---------------------------------------------------------

SCRIPTED = "Scripted sessions, scopes, overlaps"


@runs(SCRIPTED, "tt replay run.db --run-until \"'Bob' in FD.blacklist\" --last-change FE:1.highest.Bob "
                "--step-into FE:1:48716 --step-back --step-over FE:1:48716 --json")
def _replay(r: Result, c: Ctx) -> None:
    # one JSON object per step (and the paragraph after the block)
    ok(r)
    steps = json_objects(r.out)
    assert [s["action"] for s in steps] == ["jump", "run_until", "last_change", "step_into", "step_back",
                                            "step_over"], str(r)
    assert all(s["ok"] for s in steps), [s["note"] for s in steps]
    jump, until, last, into, back, over = steps
    # runs until FD blacklists Bob
    assert until["note"].startswith("stopped after FD:0:"), until["note"]
    assert until["stopped_at"]["from"] == YEN, until.get("stopped_at")
    bob_id = until["rows"][YEN]["id"]
    assert until["changed"]["FD:0"]["blacklist.Bob"] == {"new": bob_id}, until["changed"]["FD:0"]
    # back to just before the last change of Bob's highest payment at FE:1: the ¥ payment waits there
    assert last["note"] == f"FE:1.highest.Bob last changed at {YEN}; you are just before it", last["note"]
    assert last["pending"]["FE:1"]["tuple"] == YEN and last["position"]["FE:1"] == 48716
    bob = last["pending"]["FE:1"]["row"]
    assert bob["customer"] == "Bob" and bob["amount"] == "¥5000", bob
    # step into it: only FE processes it, highest.Bob becomes 5000.0, and what FE emits waits at FD:0
    assert into["consumed"] == [YEN], into["consumed"]
    assert set(into["changed"]) == {"FE:1"} and into["changed"]["FE:1"]["highest.Bob"]["new"] == 5000.0
    emitted = into["pending"]["FD:0"]["row"]
    assert emitted["id"] == bob["id"] and emitted["usd"] == 5000.0, into["pending"]["FD:0"]
    # step back: where the step into started
    assert back["position"] == last["position"], (back["position"], last["position"])
    # step over: FE, FD and FF process its whole scope; FD:0 blacklists Bob and FF drops the payment
    assert set(over["changed"]) == {"FE:1", "FD:0", "FF:0"}, over["changed"]
    assert over["changed"]["FD:0"]["blacklist.Bob"] == {"new": bob["id"]}, over["changed"]["FD:0"]
    assert over["changed"]["FF:0"]["frauds.Bob"]["new"] == 1, over["changed"]["FF:0"]
    assert "S:0" not in over["changed"], "FF dropped the payment: nothing reached the sink"
    moved = {k for k, v in over["position"].items() if v != back["position"][k]}
    assert moved == {"FE:1", "FD:0", "FF:0"} and over["position"]["FE:1"] == 48717, over["position"]


@runs(SCRIPTED, f"tt inspect run.db scope {YEN}")
def _scope(r: Result, c: Ctx) -> None:
    # a tuple's scope as a tree (tuples are OP:INSTANCE:INPUT#)
    ok(r)
    lines = [line for line in r.out.splitlines() if re.match(r"\s*[A-Z]+:\d+:\d+\b", line)]
    assert len(lines) == 3, str(r)
    depth = [len(line) - len(line.lstrip()) for line in lines]
    assert depth[0] == 0 and depth[0] < depth[1] < depth[2], str(r)
    assert lines[0].startswith(YEN) and "customer: 'Bob'" in lines[0] and "amount: '¥5000'" in lines[0], str(r)
    assert re.match(r"\s+FD:0:\d+\s.*usd: 5000\.0", lines[1]), str(r)
    assert re.match(r"\s+FF:0:\d+\s.*label: 'Fraud'", lines[2]), str(r)


@runs(SCRIPTED, "tt inspect run.db overlaps")
def _overlaps(r: Result, c: Ctx) -> None:
    # θ inputs without a step-over, and whose scope is in the way
    ok(r)
    m = re.search(r"^([\d,]+) inputs of θ; ([\d,]+) have a step-over, ([\d,]+) do not", r.out, re.M)
    assert m, str(r)
    total, step_over, without = (int(g.replace(",", "")) for g in m.groups())
    assert total == 200_000 and step_over + without == total, str(r)
    if without:   # each one named, with the scope in its way
        assert len(re.findall(r"\b[A-Z]+:\d+:\d+\b", r.out)) >= 2 * without, str(r)


# --- Why is this row here: lineage ------------------------------------------------------------------

LINEAGE = "Why is this row here: lineage"


@runs(LINEAGE, "tt lineage run.db FD --where \"customer == 'Bob' and label == 'Fraud' and amount != '¥5000'\" "
               "--limit 1 --back --depth 2")
def _lineage_back(r: Result, c: Ctx) -> None:
    # through state FD:0 blacklist['Bob'], written by his ¥5000 payment
    ok(r)
    lines = r.out.splitlines()
    assert re.match(r"FD:\d+:\d+/0  \{.*customer: 'Bob'.*label: 'Fraud'", lines[0]), str(r)
    assert "¥5000" not in lines[0], str(r)
    written = [line for line in lines if "through state FD:" in line and "blacklist['Bob'], written by FD:" in line]
    assert written and "amount: '¥5000'" in written[0], str(r)
    # down from there: the ¥5,000 payment as it entered G(θ) from the source
    assert any(f"{YEN}  {{id: 66666" in line and "amount: '¥5000'" in line
               and "entered G(θ) at FE (θ's input) from source U" in line for line in lines), str(r)
    assert re.search(r"^… \d+ more row\(s\) match --where \(--limit 1\)$", r.out, re.M), str(r)
    # the first query keeps the lineage index in the run file, and says so on stderr; off a
    # terminal, indexing for longer than 30 s says how far it is every 30 s before that
    # (cli/output.Progress: on a slow machine this run's index takes a minute)
    progress = r"tt: indexing lineage \(once\): [\d,]+ of [\d,]+ \(\d+:\d\d\)\n"
    assert re.fullmatch(rf"(?:{progress})*tt: indexed the lineage of the [\d,]+ tuples of G\(θ\), kept in "
                        rf"run\.db \([\d.]+ MB\): later queries read it\n", r.err), str(r)


@runs(LINEAGE, f"tt lineage run.db {YEN} --forward --depth 1")
def _lineage_forward(r: Result, c: Ctx) -> None:
    # what the ¥5000 payment became: FD's input, and through FE:1 highest['Bob'] the rows after it
    ok(r)
    lines = r.out.splitlines()
    assert lines[0].startswith(f"{YEN}  ") and "amount: '¥5000'" in lines[0], str(r)
    emitted = [line for line in lines if re.match(r"\W*emitted as FD:\d+:\d+ ", line)]
    assert len(emitted) == 1 and "usd: 5000.0" in emitted[0], str(r)
    later = [line for line in lines if "through state FE:1 highest['Bob'], read by FE:1:" in line]
    assert later and all("customer: 'Bob'" in line and "highest: 5000.0" in line for line in later), str(r)
    assert r.err == "", "later queries read the index: " + str(r)


# --- Responsive jumps: checkpoints ------------------------------------------------------------------

JUMPS = "Responsive jumps: checkpoints"


@runs(JUMPS, "tt checkpoint run.db --tau 2s")
def _checkpoint_offline(r: Result, c: Ctx) -> None:
    # offline: profile, cheapest plan meeting τ, take it, measure
    ok(r)
    assert re.search(r"^run\.db: offline plan for τ = 2s — \d+ checkpoint\(s\), .*; slowest jump measured "
                     r"\d+\.\d+s", r.out, re.M), str(r)


@runs(JUMPS, "tt inspect run.db checkpoints --json")
def _checkpoints_json(r: Result, c: Ctx) -> None:
    # plans, cost per checkpoint, predicted and measured jumps
    ok(r)
    plans = json_objects(r.out)
    [plan] = [p for p in plans if p["active"]]
    assert plan["policy"] == "offline" and plan["tau"] == 2.0, plan
    # the cheapest plan: none at all on a machine where every jump from the start meets τ
    assert plan["checkpoints"] or max(i["predicted"] for i in plan["interactions"]) <= 2.0, plan
    ks = [i["k"] for i in plan["interactions"]]
    assert set(plan["checkpoints"]) <= set(ks), plan["checkpoints"]
    assert {i["k"] for i in plan["interactions"] if i["checkpoint"]} == set(plan["checkpoints"])
    for i in plan["interactions"]:
        assert isinstance(i["cost"], int) and i["cost"] >= 0, i
        assert all(isinstance(i[f], (int, float)) and i[f] >= 0 for f in ("predicted", "measured")), i


@runs(JUMPS, "tt record sample_runs/fraud/job.py --every 1s --checkpoint online --tau 2s -o online.db",
      timeout=RECORD_TIMEOUT)
def _record_online(r: Result, c: Ctx) -> None:
    # online: decided while recording
    ok(r)
    # θ by default: the first stateful operator, FE
    assert re.search(r"^recorded online\.db: \d+ interactions, 200,000 tuples into θ = FE", r.out, re.M), str(r)
    from tt.store.reader import RunReader

    reader = RunReader(c.dir / "online.db")
    try:
        plan = reader.active_plan()
    finally:
        reader.close()
    assert plan is not None and plan["policy"] == "online" and plan["tau"] == 2.0, plan


@runs(JUMPS, "tt checkpoint online.db --measure")
def _measure(r: Result, c: Ctx) -> None:
    # measure every jump with the active plan
    ok(r)
    assert re.search(r"^online\.db: online plan \(τ = 2s\): slowest jump measured \d+\.\d+s", r.out, re.M), str(r)


# --- Plain PySpark jobs, unchanged -------------------------------------------------------------------

PLAIN = "Plain PySpark jobs, unchanged"
BOB_YEN_ID = 50_000 // 3   # generate.py puts Bob's ¥5000 a third of the way into the fraud_pyspark sample's 50,000


@runs(PLAIN, "tt record sample_runs/fraud_pyspark/job.py -o pyspark.db", timeout=RECORD_TIMEOUT)
def _record_plain(r: Result, c: Ctx) -> None:
    # θ: the first hooked operator, FeatureEnrichment
    ok(r)
    assert re.search(r"^recorded pyspark\.db: \d+ interactions, \d+ tuples into θ = FeatureEnrichment", r.out,
                     re.M), str(r)
    assert (c.dir / "sample_runs" / "fraud_pyspark" / "data" / "payments.parquet").is_file()


@runs(PLAIN, "tt inspect pyspark.db")
def _inspect_plain(r: Result, c: Ctx) -> None:
    # FeatureEnrichment (mapInPandas, a batch a step) and detect (applyInPandas, a group a step)
    ok(r)
    assert re.search(r"^FeatureEnrichment\s+mapInPandas\s+job\.py:\d+\s+\d+\s+2\s+θ", r.out, re.M), str(r)
    assert re.search(r"^detect\s+applyInPandas\s+job\.py:\d+\s+\d+\s+2\s+G", r.out, re.M), str(r)
    assert "one step = one unit (applyInPandas: a group; mapInPandas: a batch)" in r.out, str(r)
    assert "not tuple-consistent across its shuffles" in r.out, str(r)   # the paragraph after the block


@runs(PLAIN, "tt replay pyspark.db --run-until \"FeatureEnrichment.highest.get('Bob', 0) > 2000\"")
def _until_enrichment(r: Result, c: Ctx) -> None:
    # stops after the batch that read Bob's ¥5000 as $5,000
    ok(r)
    assert re.search(r"^run_until FeatureEnrichment\.highest\.get\('Bob', 0\) > 2000: ok", r.out, re.M), str(r)
    assert re.search(r"^  stopped after FeatureEnrichment:\d:\d+: the condition holds", r.out, re.M), str(r)
    assert re.search(r"^  FeatureEnrichment:\d\.highest\.Bob: \S+ → 5000\.0$", r.out, re.M), str(r)


@runs(PLAIN, "tt replay pyspark.db --run-until \"'Bob' in detect.closure['blacklist']\"")
def _until_detect(r: Result, c: Ctx) -> None:
    # detect blacklists Bob for payment 16666, the ¥ one
    ok(r)
    assert re.search(r"^  stopped after detect:\d:\d+: the condition holds", r.out, re.M), str(r)
    after = re.findall(r"^  detect:\d\.closure\.blacklist: .* → \{(.*)\}$", r.out, re.M)   # (the closure's key that changed)
    assert any(f"Bob: {BOB_YEN_ID}" in blacklist for blacklist in after), str(r)
    import pyarrow.parquet as pq   # payment 16666 is the ¥ one, as the sample's data says

    rows = pq.read_table(c.dir / "sample_runs" / "fraud_pyspark" / "data" / "payments.parquet").to_pylist()
    assert rows[BOB_YEN_ID]["customer"] == "Bob" and rows[BOB_YEN_ID]["amount"] == "¥5000"


@runs(PLAIN, "tt verify pyspark.db")
def _verify_plain(r: Result, c: Ctx) -> None:
    # replays both functions locally, without Spark
    ok(r)
    assert re.search(r"^pyspark\.db: verified (\d+) of \1 interactions", r.out, re.M), str(r)


@runs(PLAIN, "tt lineage pyspark.db detect --where \"customer == 'Bob' and label != 'Approved'\" --limit 1 --back "
              "--depth 2")
def _lineage_plain(r: Result, c: Ctx) -> None:
    # Bob's group, and through Spark's shuffle the batches of FeatureEnrichment that held his payments
    ok(r)
    lines = r.out.splitlines()
    assert re.match(r"^detect:\d:\d+/0  <DataFrame: \d+ rows", lines[0]), str(r)
    assert re.match(r"^└─ emitted while processing detect:\d:\d+  \(\('Bob',\), <DataFrame:", lines[1]), str(r)
    spark = [re.search(r"through Spark \(shuffle by customer\), ([\d,]+) rows? matched by value in "
                       r"FeatureEnrichment:\d:\d+/0  <DataFrame", line) for line in lines[2:]]
    assert spark and all(spark), str(r)
    import pyarrow.parquet as pq   # every one of Bob's payments, as the sample's data says

    rows = pq.read_table(c.dir / "sample_runs" / "fraud_pyspark" / "data" / "payments.parquet").to_pylist()
    assert sum(int(m.group(1).replace(",", "")) for m in spark) == sum(r["customer"] == "Bob" for r in rows)


# --- Stateful processors ------------------------------------------------------------------------------

PROCESSORS = "Stateful processors"


@runs(PROCESSORS, "tt record sample_runs/fraud_tws/job.py -o tws.db", timeout=RECORD_TIMEOUT)
def _record_tws(r: Result, c: Ctx) -> None:
    # θ: FraudDetector (transformWithState, a row a step)
    ok(r)
    assert re.search(r"^recorded tws\.db: \d+ interactions, [\d,]+ tuples into θ = FraudDetector", r.out, re.M), str(r)
    assert "Bob has 76 approved" in r.out, str(r)   # the job's own line: the bug is recorded, not fixed


@runs(PROCESSORS, "tt replay tws.db --run-until \"'Bob' in FraudDetector.blacklist\"")
def _until_tws(r: Result, c: Ctx) -> None:
    # stops after payment 16666, Bob's ¥5000: blacklist {Bob: {m392: 16666}}
    ok(r)
    assert re.search(r"^  stopped after FraudDetector:\d:\d+: the condition holds", r.out, re.M), str(r)
    assert re.search(rf"^  FraudDetector:\d:\d+ \('row', \{{id: {BOB_YEN_ID}, customer: 'Bob', amount: '¥5000', "
                     rf"merchant: 'm392', ts: \d+\}}\)$", r.out, re.M), str(r)   # the Row, by its fields
    assert re.search(rf"^  FraudDetector:\d\.blacklist: \(absent\) → \{{Bob: \{{m392: {BOB_YEN_ID}\}}\}}$", r.out,
                     re.M), str(r)


@runs(PROCESSORS, "tt verify tws.db")
def _verify_tws(r: Result, c: Ctx) -> None:
    # replays the processor without Spark, its state calls answered from the log
    ok(r)
    assert re.search(r"^tws\.db: verified (\d+) of \1 interactions", r.out, re.M), str(r)


SESSIONS = "A streaming query: sessions that close too early"
ALICE_SESSION, ALICE_TIMER = 1772442000000, 1772443800   # her first click, 09:00 UTC, in ms; + 30 min, in seconds


@runs(SESSIONS, "tt record sample_runs/sessions_streaming/job.py -o sessions.db", timeout=RECORD_TIMEOUT)
def _record_sessions(r: Result, c: Ctx) -> None:
    # sessions closed: 10 (alice 3, bob 3, carol 3, dave 1)
    ok(r)
    assert re.search(r"^recorded sessions\.db: \d+ interactions, [\d,]+ tuples into θ = SessionProcessor", r.out,
                     re.M), str(r)
    assert r.command.claim in r.out.splitlines(), str(r)   # the job's own line: the bug is recorded, not fixed
    # the prose: one JSON file a step, and the query stopped after the fifth
    clicks = c.dir / "sample_runs" / "sessions_streaming" / "data" / "clicks"
    assert sorted(p.name for p in clicks.iterdir()) == [f"step-{i}.json" for i in range(5)], str(r)


@runs(SESSIONS, "tt replay sessions.db --run-until \"'alice' in SessionProcessor.timers\"")
def _until_sessions(r: Result, c: Ctx) -> None:
    # stops at Alice's first click: session {alice: (1772442000000, 1772442000000, 1)}, timers {alice: [1772443800]}
    ok(r)
    assert f"({ALICE_SESSION}, " in r.command.claim and f"[{ALICE_TIMER}]" in r.command.claim
    assert ALICE_TIMER == ALICE_SESSION // 1000 + 30 * 60   # the bug: her click plus 30 minutes, in seconds
    assert re.search(r"^  stopped after SessionProcessor:\d:\d+: the condition holds", r.out, re.M), str(r)
    assert re.search(r"^  SessionProcessor:\d:\d+ \('row', \{ts: .+, user: 'alice', page: 'home'\}\)$", r.out,
                     re.M), str(r)   # the Row, by its fields
    assert re.search(rf"^  SessionProcessor:\d\.session: \(absent\) → \{{alice: \({ALICE_SESSION}, {ALICE_SESSION}, "
                     rf"1\)\}}$", r.out, re.M), str(r)
    assert re.search(rf"^  SessionProcessor:\d\.timers: \(absent\) → \{{alice: \[{ALICE_TIMER}\]\}}$", r.out,
                     re.M), str(r)


@runs(SESSIONS, "tt verify sessions.db")
def _verify_sessions(r: Result, c: Ctx) -> None:
    # replays every micro-batch's task without Spark
    ok(r)
    assert re.search(r"^sessions\.db: verified (\d+) of \1 interactions", r.out, re.M), str(r)
    from tt.store.reader import RunReader

    reader = RunReader(c.dir / "sessions.db")
    try:   # each instance of the processor is one micro-batch's task
        assert len(reader.plan["micro_batches"]["SessionProcessor"]) == reader.operator("SessionProcessor").instances > 1
    finally:
        reader.close()


# --- How it works: a run that failed ---------------------------------------------------------------

FAILED = "How it works"


@runs(FAILED, "tt inspect run.db failures", where="failed")
def _failures(r: Result, c: Ctx) -> None:
    # FE:1 input #999 raised ZeroDivisionError: division by zero (4 attempts)
    ok(r)
    assert r.command.claim in r.out.splitlines(), str(r)
    assert r.out.count(" raised ") == 1, str(r)


@runs(FAILED, "tt replay run.db --step-into FE:1:999", where="failed")
def _replay_failed(r: Result, c: Ctx) -> None:
    # re-raises it in the replay; the state stays as just before it
    ok(r, rc=1)   # a step that re-raised the operator's exception (`tt replay --help`: exit status 1)
    assert "goto_failure FE:1:999: ok" in r.out, str(r)
    assert "step_into FE:1:999: re-raised" in r.out, str(r)
    assert re.search(r"FE:1:999 raised ZeroDivisionError: division by zero \(as in the recording\), at "
                     r"workloads\.py line \d+, in process; the state is as it was just before it", r.out), str(r)
    step = r.out[r.out.index("step_into FE:1:999"):]
    assert "next FE:1:999 " in step and "→" not in step, "no state changed; the tuple still waits"


@runs(FAILED, "tt verify run.db", where="failed")
def _verify_failed(r: Result, c: Ctx) -> None:
    # the interactions, then on to FE:1:999: the failure reproduces
    ok(r)
    assert r.out.splitlines()[0].startswith("run.db: verified "), str(r)
    assert ("run.db: the recorded failure reproduces: FE:1:999 raises ZeroDivisionError: division by zero in "
            "replay too") in r.out.splitlines(), str(r)


# --- the tests ----------------------------------------------------------------------------------

def _test_exists(ref: str) -> bool:
    path, _, name = ref.partition("::")
    file = ROOT / path
    return file.is_file() and re.search(rf"^(async )?def {re.escape(name)}\(", file.read_text(), re.M) is not None


def test_every_readme_command_is_run_or_covered_elsewhere():
    commands = readme_commands()
    keys = [c.key for c in commands]
    blocks = sum(1 for line in README.read_text().splitlines() if line.strip() == "```sh")
    assert blocks and len({c.block for c in commands}) == blocks, "a ```sh block without a command"
    neither = [k for k in keys if k not in RUN and k not in COVERED_ELSEWHERE]
    assert not neither, ("README commands that no test runs: run them in tests/test_readme.py (or list them in "
                         f"COVERED_ELSEWHERE with the test that covers them): {neither}")
    assert not set(RUN) & set(COVERED_ELSEWHERE)
    assert len(set(keys)) == len(keys), "the same command twice in one section"
    stale = [k for k in [*RUN, *COVERED_ELSEWHERE] if k not in keys]
    assert not stale, f"no longer in the README (update tests/test_readme.py): {stale}"
    for key, (why, tests) in COVERED_ELSEWHERE.items():
        assert why and tests, key
        missing = [t for t in tests if not _test_exists(t)]
        assert not missing, f"{key} is said to be covered by tests that do not exist: {missing}"
    # what the README's ```sh blocks are made of: tt commands, and the Quickstart's two
    assert all(c.text.startswith("tt ") for c in commands if c.heading != "Quickstart"), keys


def test_the_parser_joins_continued_lines_and_keeps_quoted_hashes():
    text = ("# A\n\n```sh\ntt x \"a # b\" \\\n    --y   # the claim # with a hash\ntt z '#'\n```\n"
            "```python\ntt not_sh  # no\n```\n")
    assert readme_commands(text) == [Command("A", 'tt x "a # b"     --y', "the claim # with a hash", 0),
                                     Command("A", "tt z '#'", "", 0)]


# The first test to ask for a folder's fixture runs every command of that folder (`_run_all`), each
# bounded by its own timeout; pytest's 900 s a test (pyproject.toml) would bound them all together,
# and a README session beside a loaded machine (two busy loops and two valgrind runs, 2026-12-07)
# took longer: every test of the folder then failed on that one timeout, none naming a command.
SESSION_TIMEOUT = sum(check.timeout for check in RUN.values()) + 300


@pytest.mark.slow
@pytest.mark.timeout(SESSION_TIMEOUT)
@pytest.mark.parametrize("command", [c for c in COMMANDS if c.key in RUN],
                         ids=lambda c: f"{c.heading}: {c.key[1]}")
def test_readme_command(command: Command, request):
    """The command, as written, exits as it should and shows what its comment says."""
    check = RUN[command.key]
    ctx: Ctx = request.getfixturevalue(check.where)
    check.fn(ctx.results[command.key], ctx)
