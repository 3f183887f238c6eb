"""`tt inspect`: the facts of a run as text or JSON, for scripts and quick looks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..core import kept_inputs, values
from ..core.code_pickle import same_python
from ..core.errors import UsageError, where_raised
from ..core.libraries import described
from ..replay.facts import condition_tuple
from ..store.sources import shown
from .main import app
from .output import CSV, JSON, NL, cut_hint, emit, human_bytes, only_one, require_intact, table

_VIEWS = ("summary", "interactions", "state", "failures", "scope", "overlaps", "checkpoints")
_CSV_VIEWS = ("summary", "interactions", "failures", "overlaps")
KEPT_SHOWN = 10   # the small files read that the summary names one a line; --json lists them all


@app.command()
def inspect(
    run: Path = typer.Argument(..., help="A run file written by `tt record`."),
    what: str = typer.Argument("summary", help="summary | interactions | state | failures | scope | "
                                               "overlaps | checkpoints"),
    target: Optional[str] = typer.Argument(None, help="For `scope`: the tuple, as OP:INSTANCE:INPUT#."),
    at: Optional[int] = typer.Option(None, "--at", help="Interaction index (for `state`)."),
    op: Optional[str] = typer.Option(None, "--op", help="Only this operator (for `state`)."),
    trust: bool = typer.Option(False, "--trust", help="Allow replaying code (and decoding pickled tuples) "
                               "from a run you did not record."),
    json: bool = JSON, nl: bool = NL, csv: bool = CSV,
):
    """Show what a run file holds: the run and its DAG, interactions, states, failures,
    a tuple's scope, the θ inputs without a step-over, the checkpoint plans.

    Tuples are named OP:INSTANCE:INPUT# and counted as in every other view: an
    instance's count is the tuples it consumed (its end-of-input step is not one).
    --json prints one document (an object, or a list of rows); --nl one object per
    line; --csv (summary, interactions, failures, overlaps) a header row, then rows.

    Examples:
      tt inspect fraud.db
      tt inspect fraud.db interactions --json
      tt inspect fraud.db state --at 3 --op FD
      tt inspect fraud.db scope FE:1:48716
    """
    from ..replay import facts
    from ..store.reader import RunReader

    only_one(json=json, nl=nl, csv=csv)
    if what not in _VIEWS:
        raise UsageError(f"unknown view {what!r}; choose one of {', '.join(_VIEWS)}")
    if csv and what not in _CSV_VIEWS:
        raise UsageError(f"--csv is for the {', '.join(_CSV_VIEWS)} views; use --json or --nl for {what}")
    reader = RunReader(run)
    try:
        require_intact(reader)
        if what == "summary":
            s = facts.summary(reader)
            s["wal"] = {"bytes": reader.wal_bytes(), "note": reader.wal_note}
            _count_tuples(reader, s)
            emit(s, json=json, nl=nl, csv_=csv, text=_summary_text(s))
        elif what == "interactions":
            rows = interaction_rows(reader, tuples=json or nl or csv, trust=trust)
            emit(rows, json=json, nl=nl, csv_=csv, text=_interactions_text(rows),
                 columns=["k", "time", "t", "trigger", "complete", "detail", "positions", "ended"])
        elif what == "state":
            if at is None:
                raise UsageError("which interaction? pass --at K (see `tt inspect RUN interactions`)")
            states = facts.states_at(reader, at, op)
            _state_positions(reader, states, at)
            text, cut = _states_text(states, at)
            again = f"`tt inspect {run} state --at {at}{f' --op {op}' if op else ''} --json`"
            if any(kept_inputs.is_kept(v) for e in states.values() if isinstance(e["state"], dict)
                   for v in e["state"].values()):
                text += (f"\n‹kept as inputs›: a join's stored rows are its inputs, which the run file holds "
                         f"already; it keeps their keys and rows, and their digest at its task's end. "
                         f"A replay shows them: tt replay {run} --to {at} --states all")
            emit(states, json=json, nl=nl, csv_=False, text=text + ("\n" + cut_hint(again) if cut else ""))
        elif what == "failures":
            rows = reader.failures()  # one per failure, however many attempts Spark made
            emit(rows, json=json, nl=nl, csv_=csv, text="\n".join(_failure_text(f, run) for f in rows)
                 or "no operator failed")
        else:
            from . import inspect_replay

            inspect_replay.show(reader, what, target, at=at, trust=trust, json=json, nl=nl, csv=csv)
    finally:
        reader.close()


def interaction_rows(reader, *, tuples: bool = False, trust: bool = False) -> list[dict]:
    """`facts.interactions`, with positions counted in tuples (see `_end_steps`) and, with
    `tuples`, the tuple that met a condition as a JSON object (`_condition_detail`)."""
    from ..replay import facts

    rows = facts.interactions(reader)
    ends = _end_steps(reader)
    for r in rows:
        _tuple_positions(reader, r, ends)
        if tuples and r["trigger"] == "condition":
            r["detail"] = _condition_detail(reader, r["detail"], trust)
    return rows


def _failure_text(f: dict, run: Path) -> str:
    n = f["attempts"]
    where = where_raised(f.get("traceback"))
    line = (f"{f['op']}:{f['instance']} input #{f['position']} raised {f['error']} "
            f"({n} attempt{'s' if n != 1 else ''})" + (f"\n  at {where}" if where else "") + f"\n  tuple: {f['row']}")
    if f["visible"] and f["in_g"]:
        line += (f"\n  debug it: tt debug {run} opens just before it; tt replay {run} --step-into "
                 f"{f['op']}:{f['instance']}:{f['position']} re-raises it")
    elif f.get("unrecorded"):
        line += ("\n  in a run Spark made again of a recorded task, which tt did not record: the run it recorded "
                 "did not raise there")
    return line


def _summary_text(s: dict) -> str:
    lines = [f"{s['file']}: {s['status']}" + (f" — {s['error']}" if s["error"] else "")]
    lines.append(f"job      {s['job']} {' '.join(s['args'] or [])}".rstrip())
    lines.append(f"spark    {s['spark_version'] or '?'} on {s['master'] or '?'}, {s['stages']} stages, "
                 f"{s['tasks']['committed']} tasks committed")
    if s["seconds"] is not None:
        lines.append(f"time     {s['started']} · {s['seconds']:.1f}s")
    if not s["operators"]:   # the job ran nothing tt records (the status line says why)
        lines.append("θ        none: the run has no operator")
        lines.append(f"sizes    file {human_bytes(s['sizes']['file'])}")
        return "\n".join(lines)
    in_g = [o for o in s["operators"] if o["in_g"]]
    # (a PySpark job's hooked functions are all recorded, whichever is θ: Spark owns what lies between them)
    g = "every hooked function is in G(θ): " if all(o["site"] for o in in_g) else "G(θ) = "
    lines.append(f"θ        {s['theta']}   ({g}{', '.join(o['name'] for o in in_g)})"
                 + (f"; {s['theta_tuples']:,} tuples into θ" if s.get("theta_tuples") is not None else ""))
    logged = [o["name"] for o in s["operators"] if o.get("lineage")]
    if logged:
        lines.append(f"lineage  {', '.join(logged)} outside G(θ) logged for lineage too (tt record --lineage)")
    lines.append("")
    lines.append(table([[o["name"], o["kind"], o["site"] or o["class"].rsplit(".", 1)[-1], o["stage"],
                         o["instances"], ("θ" if o["theta"] else "G") if o["in_g"] else "lineage" if o["lineage"] else "",
                         f"{o['tuples']:,}" if o.get("tuples") is not None else ""] for o in s["operators"]],
                       ["operator", "kind", "class or call", "stage", "instances", "in G(θ)", "tuples in"]))
    lines.append("")
    hooked = [o for o in s["operators"] if o["site"]]
    if hooked:
        units = sorted({f"{o['kind']}: a {o['unit']}" for o in hooked})
        lines.append(f"hooked   one step = one unit ({'; '.join(units)}). Each hooked operator takes an "
                     f"interaction between two of its own units; Spark owns what lies between them, so "
                     f"snapshots are not tuple-consistent across its shuffles (docs/HOOKS.md)")
    for u in s.get("unrecorded", []):   # (a run recorded by a tt that left some API unrecorded)
        lines.append(f"unrecorded  {u['name']} ({u['kind']} at {u['site']}) ran without tt: {u['why']}")
    for w in s.get("warnings", []):
        lines.append(f"warning  {w}")
    for r in s.get("reruns", []):
        n, again = r["runs"], r["another_action"]
        why = ("in a later Spark stage" if again == n else "in the same Spark stage" if not again
               else f"{again} in a later Spark stage")
        lines.append(f"rerun    Spark ran {n} of {r['op']}'s recorded tasks again ({why}; instances "
                     f"{', '.join(map(str, r['instances'][:8]))}{' …' if len(r['instances']) > 8 else ''}): "
                     f"tt recorded each one's first run, and `tt verify` compares what the later runs emitted")
    lines.append("edges    " + ", ".join([f"{e['from']}→{e['to']}" + (" (shuffle)" if e["shuffle"] else "")
                                         for e in s["edges"]]
                                        + [f"{e['from']}⇢{e['to']} (Spark: {e['label']})"
                                           for e in s.get("spark_edges", [])]))
    lines.append(f"interactions  {s['interactions']} complete of {s['interactions_recorded']} recorded")
    sz = s["sizes"]
    lines.append(f"sizes    file {human_bytes(sz['file'])}; control log {human_bytes(s['control_log_bytes'])}"
                 + (f" = {100 * s['control_log_ratio']:.2f}% of {human_bytes(s['input_bytes'])} input"
                    if s["control_log_ratio"] else "")
                 + f"; recorded tuples {human_bytes(sz['recorded_tuples'])}; states {human_bytes(sz['states'])}"
                 + (f"; files read {human_bytes(sz['files_read'])}" if sz.get("files_read") else ""))
    for src in s.get("sources", []):
        lines.append(f"source   {src['source']}: " + _source_text(src))
    if s.get("modules"):
        names = ", ".join(m["name"] + ("" if m["here"] == "unchanged" else f" ({m['here']} here since)")
                          for m in s["modules"])
        lines.append(f"modules  {names}: the job's own, stored with the run; a replay runs them as recorded")
    for f in s.get("files_read", []):
        lines.append(f"file     {f['path']} ({human_bytes(f['size'])}), read by the job's functions: "
                     + {"packed": "copied into the run file by tt pack",
                        "unchanged": "too large to keep in the run file, and as here"}.get(
                         f["here"], f"too large to keep in the run file, and {f['here']} here: a replay stops "
                                    f"where a function reads it (tt pack the run where it is)"))
    kept = s.get("files_kept", [])
    for f in kept[:KEPT_SHOWN]:
        lines.append(f"file     {f['path']} ({human_bytes(f['size'])}), read by the job's functions: kept in the run "
                     f"file as read")
    if len(kept) > KEPT_SHOWN:
        lines.append(f"file     and {len(kept) - KEPT_SHOWN:,} more read by the job's functions and kept in the run "
                     f"file (--json lists them)")
    workers = s.get("workers") or {}
    if workers.get("python") or workers.get("timezone"):
        said = []
        if workers.get("python"):
            py, py_here = workers["python"], workers["python_here"]
            said.append(f"{py['implementation']} {py['version']}" + (
                "" if same_python(py, py_here) else f" (here {py_here['implementation']} {py_here['version']}, "
                                                    f"which cannot replay it)"))
        said.append(f"hash seed {workers['hash_seed']}")
        if workers.get("timezone"):
            zone, here = workers["timezone"], workers["timezone_here"]
            said.append(f"time zone {zone}" + ("" if here == zone else f" (here {here or 'unknown'})"))
        lines.append(f"workers  {', '.join(said)}: a replay runs with these")
        if workers.get("timezone_note"):
            lines.append(f"warning  {workers['timezone_note']}")
    if workers.get("libraries"):
        differ = [(d["name"], d["version"], d["here"]) for d in workers["libraries_differing"]]
        same = len(workers["libraries"]) - len(differ)
        if differ:
            lines.append(f"libraries  {described(differ)}: a replay runs this machine's; {same} other{'s' if same != 1 else ''} as here")
        else:
            lines.append(f"libraries  the {same} packages the workers had loaded are as here")
    for f in s["failures"]:
        lines.append(f"failure  {f['op']}:{f['instance']} input #{f['position']}: {f['error']}")
    wal = s.get("wal") or {}
    if wal.get("bytes"):
        lines.append(f"wal      {human_bytes(wal['bytes'])} in {Path(s['file']).name}-wal, not yet in the file: "
                     + (wal["note"] or "a recorder is writing it (copy both files, or wait until it ends)"))
    return "\n".join(lines)


def _source_text(src: dict) -> str:
    """`copied (why)`, or `by reference to N Parquet files (…)` with each file's state here."""
    if src["stored"] == "copied":
        return f"rows copied into the run file ({src['why']})"
    if src["stored"] == "packed":
        return f"rows copied into the run file by `tt pack` from {len(src['files'])} {src['format'].capitalize()} file(s)"
    copies = [f for f in src["files"] if f["here"].startswith("a copy:")]
    bad = [f for f in src["files"] if f["here"] != "unchanged" and f not in copies]
    n = len(src["files"])
    kept = "row counts" if src.get("positions") == "counted" else "positions"
    text = (f"by reference: {src['rows']:,} rows as {human_bytes(src['position_bytes'])} of "
            f"{kept} in {n} {src['format'].capitalize()} file{'s' if n != 1 else ''}"
            + (f" (partitioned by {', '.join(src['partitioned_by'])})" if src.get("partitioned_by") else "") + ", ")
    copied = src.get("copied_units", 0)
    also = (f"; {copied:,} of its units copied into the run file instead (their tasks' rows were not where "
            f"the tasks' partitions say: a union or a coalesce after the call?)" if copied else "")
    if not bad and copies:   # (a later time, the recorded size and footer: store/sources.py `identity`)
        which = "" if len(copies) == n else f"{len(copies):,} of them "
        return (text + ("all " if n > 1 else "") + f"here, {which}copied since the recording (their times differ, "
                f"not their sizes or footers: replay checks their rows by digest)" + also)
    if not bad:
        return text + ("all " if n > 1 else "") + "here and unchanged" + also
    return text + "; ".join(f"{shown(f['uri'])} {f['here']}" for f in bad[:3]) + (" …" if len(bad) > 3 else "") \
        + " (replaying needs them: `tt pack` where they are)" + also


def _interactions_text(rows: list[dict]) -> str:
    out = []
    for r in rows:
        pos = r["positions"]
        brief = ", ".join(f"{k}={v}" for k, v in list(pos.items())[:6]) + (" …" if pos and len(pos) > 6 else "") \
            if pos else "(incomplete)"
        detail = ""
        if r["trigger"] == "condition":
            detail = " " + (condition_tuple(r["detail"]) or "?")
        out.append([r["k"], f"{r['t']:.2f}s", r["trigger"] + detail, brief])
    return table(out, ["k", "t", "trigger", "positions"])


def _states_text(states: dict, k: int) -> tuple[str, bool]:
    lines, cut = [f"states at interaction {k}:"], False
    for name, entry in states.items():
        where = f"{entry['origin']}; " if entry.get("origin") else ""
        lines.append(f"{name}  ({where}after {entry['position']:,} tuples"
                     + (", and its end of input)" if entry.get("ended") else ")"))
        state = entry["state"]
        items = state.items() if isinstance(state, dict) and state else [(None, state)]
        for key, value in items:
            text = values.render(value, limit=None)   # as tt replay shows values: {Bob: 16666}, (A, F)
            if len(text) > 2000:
                text, cut = f"{text[:2000]}…[+{len(text) - 2000} chars]", True
            lines.append(f"  {key} = {text}" if key is not None else f"  {text}")
    return "\n".join(lines), cut


# --- counting tuples: an instance's end-of-input step is logged as one more input ---------------

def _end_steps(reader) -> dict[tuple[int, int], int]:
    """Per instance of G(θ) that reached the end of its input: the position of its END step.

    The Input log records the end of input (the step that calls `finish()`) as one more
    input, so a position counts it; the tuples an instance consumed are those before it."""
    from ..core.logs import END

    ends = {}
    for op, i in reader.g_instances():
        runs = reader.input_runs(op, i)
        if runs and (runs[-1][0], runs[-1][1]) == END:
            ends[(op, i)] = sum(n for _, _, n in runs) - runs[-1][2]
    return ends


def _tuples(ends: dict, key: tuple[int, int], position: int) -> tuple[int, bool]:
    """(tuples consumed, whether the END step was taken) at a logged position."""
    end = ends.get(key)
    return (end, True) if end is not None and position > end else (position, False)


def _tuple_positions(reader, row: dict, ends: dict) -> None:
    """An interaction's positions as tuples consumed; `ended`: the instances past their input."""
    snap = reader.instances_at(row["k"])
    if not snap:
        row["ended"] = []
        return
    positions, ended = {}, []
    for key, at in sorted(snap.items()):
        name = facts_label(reader, key)
        positions[name], done = _tuples(ends, key, at.position)
        if done:
            ended.append(name)
    row["positions"], row["ended"] = positions, ended


def _state_positions(reader, states: dict, k: int) -> None:
    snap = reader.instances_at(k) or {}
    ends = _end_steps(reader)
    by_name = {facts_label(reader, key): (key, at) for key, at in snap.items()}
    for name, entry in states.items():
        key, at = by_name[name]
        entry["position"], entry["ended"] = _tuples(ends, key, at.position)


def _count_tuples(reader, s: dict) -> None:
    """Per operator of G(θ) (and outside it with --lineage): the tuples its instances consumed in
    the whole run."""
    from ..core.logs import END

    ends = _end_steps(reader)
    for o, info in zip(s["operators"], reader.operators):
        total = None
        if info.in_g:
            for i in range(info.instances):
                final = reader.final(info.id, i)
                if final is not None:
                    total = (total or 0) + _tuples(ends, (info.id, i), final.position)[0]
        elif o.get("lineage"):   # outside G(θ), --lineage: its Input log, END steps left out
            total = sum(n for i in range(info.instances) for port, src, n in reader.input_runs(info.id, i)
                        if (port, src) != END)
        o["tuples"] = total
    s["theta_tuples"] = next((o["tuples"] for o in s["operators"] if o["theta"]), None)


def facts_label(reader, key: tuple[int, int]) -> str:
    return f"{reader.operators[key[0]].name}:{key[1]}"


# --- the tuple that met a --when condition ------------------------------------------------------

def _condition_detail(reader, detail: dict, trust: bool) -> dict:
    """The detail of a condition interaction as JSON: the tuple's name and the tuple itself
    as an object (read from the recorded tuples into θ; recorded as text only, the recorder
    kept its first 200 characters, given as {"$repr": text} when it cannot be read)."""
    out = {k: detail.get(k) for k in ("op", "instance", "position")}
    out["tuple"] = condition_tuple(detail) or "?"
    text = detail.get("row")
    row = None
    try:
        op = reader.operator(detail["op"])
        row = _recorded_tuple(reader, op.id, int(detail["instance"]), int(detail["position"]) - 1, trust)
    except Exception:  # noqa: BLE001  (an unreadable tuple: fall back on the text the recorder kept)
        row = None
    out["row"] = row if row is not None else ({"$repr": text} if isinstance(text, str) else text)
    out.update({k: v for k, v in detail.items() if k not in out})
    return out


def _recorded_tuple(reader, op_id: int, instance: int, position: int, trust: bool):
    """Input #position of an instance where tuples enter G(θ) (θ), from the recorded tuples,
    JSON-encoded; None when it is not there or is pickled and the run is not trusted."""
    from array import array

    from ..core import values
    from ..core.logs import END
    from ..core.scopes import InstanceIndex
    from ..store import blobs

    ch = InstanceIndex(reader.input_runs(op_id, instance), array("q"), {}, {}).channel_at(position)
    if ch is None or (ch[0], ch[1]) == END:
        return None
    port, src, seq = ch
    for rowid, p, s_, start, n, codec in reader.entry_index(op_id, instance):
        if (p, s_) == (port, src) and start <= seq < start + n:
            if codec not in blobs.INERT:
                if not (trust or reader.signed_by_me):
                    return None
                reader.vouch(trust)
            rows = reader.entry_tuples(codec, rowid)
            return values.encode_readable(rows[seq - start])
    return None
