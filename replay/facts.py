"""Facts about a run that the run file states outright (no replay, no unpickling).

Shared by `tt inspect` and the debugger: the run summary, the DAG, the
interaction history with per-instance positions, stored states, and the
per-interaction series the plots draw (positions from the barriers, sizes
from the `states` table, never from a replay). Everything
is plain JSON-able data.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

from ..core import code_pickle, files_read, libraries, local_time
from ..core.errors import RunFileError, TTError, UsageError
from ..store.reader import RunReader


def condition_tuple(detail: dict) -> str | None:
    """The tuple that met a `--when` condition, as `OP:INSTANCE:INPUT#`. The recorder takes the
    interaction right after θ consumed that tuple and stores its position then: a count of the
    tuples consumed (1-based), one more than the tuple's input number (0-based), which is what
    every view names tuples by (the logs view said `#10` of the timeline's `Enrich:1:9`)."""
    try:
        return f"{detail['op']}:{int(detail['instance'])}:{int(detail['position']) - 1}"
    except (KeyError, TypeError, ValueError):
        return None


def label(reader: RunReader, op_id: int, instance: int) -> str:
    return f"{reader.operators[op_id].name}:{instance}"


def origin(reader: RunReader, op_id: int, instance: int) -> str | None:
    """Where a streaming query's instance ran: its micro-batch and partition (and which of the
    task's Python runs, for applyInPandasWithState's timed-out keys); None outside streaming."""
    slots = reader.plan.get("micro_batches", {}).get(reader.operators[op_id].name)
    if not slots or instance >= len(slots):
        return None
    slot = slots[instance]
    return f"micro-batch {slot[0]}, partition {slot[1]}" + (", timed-out keys" if slot[2:] == [1] else "")


def stored_state(reader: RunReader, key: tuple[int, int], state_hash: bytes | None, k: int) -> Any:
    """The state stored for instance `key` at interaction k, or a one-line RunFileError
    when its blob (or a delta base it needs) cannot be decompressed or decoded."""
    try:
        return reader.state(state_hash)
    except TTError:
        raise
    except Exception as e:  # noqa: BLE001  (zstd, JSON or delta errors: all mean the bytes are damaged)
        detail = " ".join(str(e).split())[:120]
        raise RunFileError(f"the run file is damaged: state of {label(reader, *key)} at interaction {k} "
                           f"cannot be decoded ({type(e).__name__}{': ' + detail if detail else ''})") from None


def summary(reader: RunReader) -> dict:
    run = reader.run
    complete = reader.interactions()
    sizes = reader.sizes()
    theta = next((o for o in reader.operators if o.is_theta), None)
    input_bytes = run.get("input_bytes")
    control = reader.control_log_bytes()
    plan = run.get("plan") or {}
    nodes = {n["id"]: n for n in plan.get("nodes", [])}
    by_reference = {e["src"] for e in plan.get("edges", []) if e["id"] in set(plan.get("by_reference", ()))}
    lineage = set(plan.get("lineage", ())) - (set() if (run.get("options") or {}).get("lineage") else by_reference)
    return {
        "file": str(reader.path),
        "status": reader.status,
        "job": run["job"],
        "args": run["argv"],
        "started": _iso(run["started"]),
        "finished": _iso(run["finished"]),
        "seconds": round(run["finished"] - run["started"], 3) if run["finished"] and run["started"] else None,
        "error": run["error"],
        "master": run["master"],
        "spark_version": run["spark_version"],
        "theta": theta.name if theta else None,
        "options": run["options"],
        "operators": [{"name": o.name, "kind": o.kind, "class": o.cls, "stage": o.stage,
                       "instances": o.instances, "in_g": o.in_g, "theta": o.is_theta,
                       "lineage": o.id in lineage,   # logged outside G(θ) (tt record --lineage)
                       "site": nodes.get(o.id, {}).get("site"), "unit": nodes.get(o.id, {}).get("unit")}
                      for o in reader.operators],
        "unrecorded": plan.get("unrecorded", []),   # hooked calls whose function ran without tt
        "warnings": reader.warnings(),              # what `tt record` warned of
        "reruns": _reruns(reader),                  # recorded tasks Spark ran again (replay/reruns.py)
        "spark_edges": [{"from": reader.operators[e["src"]].name, "to": reader.operators[e["dst"]].name,
                         "label": e["label"]} for e in plan.get("spark_edges", [])],   # Spark, between hooked ops
        "edges": [{"from": reader.operators[e["src"]].name, "to": reader.operators[e["dst"]].name,
                   "port": e["port"], "shuffle": e["shuffle"], "keyed": e["keyed"]}
                  for e in plan.get("edges", [])],
        "stages": len(plan.get("stages", [])),
        "interactions": len(complete),
        "interactions_recorded": len(reader.interactions_all),
        "tasks": {"committed": sum(1 for a, st in reader.visible.values() if st == "committed"),
                  "visible": len(reader.visible)},
        "sizes": sizes,
        "input_bytes": input_bytes,
        "control_log_bytes": control,
        "control_log_ratio": (control / input_bytes) if input_bytes else None,
        "failures": [{k: f[k] for k in ("op", "instance", "position", "error", "row")}
                     for f in reader.failures()],
        "sources": sources(reader),
        "modules": modules(reader),
        "files_read": files_needed(reader),
        "files_kept": [{"path": path, "size": read["size"]} for path, read in sorted(reader.files_kept.items())],
        # what the job's Python workers ran with that a replay runs with too (cli/hash_seed.py, core/local_time.py)
        "workers": {"python": reader.python, "python_here": code_pickle.python(), "hash_seed": reader.hash_seed,
                    "timezone": reader.timezone, "timezone_here": local_time.zone(),
                    "timezone_note": local_time.setting(reader.timezone, reader.timezone_facts).note,
                    "libraries": reader.libraries,
                    "libraries_differing": [{"name": n, "version": v, "here": h}
                                            for n, v, h in libraries.differing(reader.libraries)]},
    }


def files_needed(reader: RunReader) -> list[dict]:
    """The files too large to keep that the job's functions read (core/files_read.py), each
    `packed` into the run by `tt pack`, or checked here: `unchanged`, `changed` or `missing`."""
    packed = reader.file_digests()
    return [{"path": path, "size": read["size"],
             "here": "packed" if read["xxh3"] in packed else files_read.here(path, read)}
            for path, read in sorted(reader.files_read.items())]


def modules(reader: RunReader) -> list[dict]:
    """The job's own modules the run stores, which a replay imports as they ran
    (replay/recorded_modules.py), and whether the file here still reads the same."""
    out = []
    for name, (path, _, text) in sorted(reader.job_modules().items()):
        try:
            here = "unchanged" if Path(path).read_text(encoding="utf-8") == text else "changed"
        except (OSError, UnicodeDecodeError):
            here = "missing"
        out.append({"name": name, "path": path, "here": here})
    return out


def sources(reader: RunReader) -> list[dict]:
    """How each recorded source's rows are kept: copied (and why), or by reference to files,
    each file checked from here (present and unchanged, changed, or unreadable)."""
    from ..core.errors import SourceFileError
    from ..store.sources import FileRecord, identity

    out = []
    referenced, copied = reader.referenced(), reader.copied_units()
    for scan in reader.source_scans():
        name = reader.operators[scan["source"]].name
        info = scan["info"]
        if scan["format"] is None:
            out.append({"source": name, "stored": "copied", "why": info.get("copied")})
            continue
        if info.get("packed"):
            out.append({"source": name, "stored": "packed", "format": scan["format"], "columns": scan["columns"],
                        "files": [{"uri": f["uri"], "size": f["size"]} for f in scan["files"]]})
            continue
        rows, size = referenced.get(scan["source"], (0, 0))
        units = copied.get(scan["source"], 0)
        if rows == 0 and units:   # read by reference, but no row is kept so: no file is needed
            out.append({"source": name, "stored": "copied", "rows": 0, "copied_units": units,
                        "why": f"read from {scan['format'].capitalize()} files, but no task's rows were where its "
                               f"partition of the scan says: a union or a coalesce after the call?"})
            continue
        files = []
        for f in scan["files"]:
            rec = FileRecord(f["id"], scan["source"], f["uri"], f["size"], f["mtime_ms"],
                             bytes.fromhex(f["footer"]) if f["footer"] else None)
            try:
                change, retimed = identity(rec)
                here = f"changed: {change}" if change is not None else f"a copy: {retimed}" if retimed else "unchanged"
            except SourceFileError as e:
                here = f"unreadable: {getattr(e, 'reason', e)}"
            files.append({"uri": f["uri"], "size": f["size"], "here": here})
        out.append({"source": name, "stored": "referenced",
                    "format": scan["format"], "columns": scan["columns"], "files": files,
                    "filters": info.get("data_filters", []), "rows": rows, "position_bytes": size,
                    "copied_units": units,
                    # a table partitioned by directory: the columns whose values its directories give
                    "partitioned_by": (info.get("partitioned") or {}).get("columns", []),
                    # counted: chunks hold row counts, positions follow from the splits and the filter
                    "positions": "counted" if info.get("counted") else "listed"})
    return out


def interactions(reader: RunReader) -> list[dict]:
    out = []
    start = reader.run["started"] or 0
    for i in reader.interactions_all:
        snap = reader.instances_at(i.k)
        out.append({
            "k": i.k,
            "time": _iso(i.time),
            "t": round(i.time - start, 3),
            "trigger": i.trigger,
            "detail": i.detail,
            "complete": snap is not None,
            "positions": ({label(reader, op, inst): at.position for (op, inst), at in sorted(snap.items())}
                          if snap else None),
        })
    return out


def states_at(reader: RunReader, k: int, op: str | None = None) -> dict:
    snap = reader.instances_at(k)
    if snap is None:
        raise UsageError(reader.no_states_at(k))
    op_id = reader.operator(op).id if op is not None else None
    if op_id is not None and not reader.operators[op_id].in_g:
        raise UsageError(f"{op} is not in G(θ) (θ = {reader.theta.name}); its state is not recorded")
    out = {}
    for (o, i), at in sorted(snap.items()):
        if op_id is not None and o != op_id:
            continue
        out[label(reader, o, i)] = {"position": at.position, "state": stored_state(reader, (o, i), at.state, k)}
        where = origin(reader, o, i)
        if where:
            out[label(reader, o, i)]["origin"] = where
    return out


def _iso(t: float | None) -> str | None:
    return dt.datetime.fromtimestamp(t).isoformat(timespec="milliseconds") if t else None


def parse_instance(reader: RunReader, text: str) -> tuple[int, int]:
    """'FD:1' -> (op id, 1)."""
    name, _, inst = text.partition(":")
    op = reader.operator(name)
    try:
        i = int(inst)
    except ValueError:
        raise UsageError(f"bad instance {text!r}; write OP:INSTANCE, e.g. {op.name}:0") from None
    if not 0 <= i < op.instances:
        raise UsageError(f"{op.name} has instances 0..{op.instances - 1}, not {i}")
    return op.id, i


def render_value(v: Any) -> str:
    from ..core.values import render

    return render(v, 10_000)


# --- series for the plots ------------------------------------------------------------------

def series(reader: RunReader, cancel: Callable[[], bool] | None = None) -> list[dict]:
    """Per complete interaction: k, t (seconds since start), trigger, tuples processed, state bytes."""
    start = reader.run["started"] or 0
    sizes: dict[bytes, int] = {}
    out = []
    for inter in reader.interactions_all:
        if cancel is not None and cancel():
            break
        snap = reader.instances_at(inter.k)
        if snap is None:
            continue
        hashes = {at.state for at in snap.values() if at.state is not None and at.state not in sizes}
        if hashes:
            sizes.update(_sizes(reader, list(hashes)))
        out.append({
            "k": inter.k,
            "t": round(inter.time - start, 3),
            "trigger": inter.trigger,
            "tuples": sum(at.position for at in snap.values()),
            "state_bytes": sum(sizes.get(at.state, 0) for at in snap.values() if at.state is not None),
        })
    return out


def _sizes(reader: RunReader, hashes: list[bytes]) -> dict[bytes, int]:
    found = {}
    for i in range(0, len(hashes), 500):
        part = hashes[i:i + 500]
        marks = ",".join("?" * len(part))
        found.update(reader.conn.execute(f"SELECT hash, size FROM states WHERE hash IN ({marks})", part))
    return found


def _reruns(reader: RunReader) -> list[dict]:
    """Per operator, the later runs Spark made of its recorded tasks, in shadow: {"op", "instances",
    "runs", "another_action"} (how many of them ran in a later Spark stage: core/output_digest.py `why_again`)."""
    by_op: dict[int, dict] = {}
    for r in reader.reruns():
        o = by_op.setdefault(r["op"], {"op": reader.operators[r["op"]].name, "instances": [], "runs": 0,
                                       "another_action": 0})
        o["runs"] += 1
        o["another_action"] += r["another_action"]
        if r["instance"] not in o["instances"]:
            o["instances"].append(r["instance"])
    return list(by_op.values())
