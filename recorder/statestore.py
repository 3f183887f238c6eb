"""Spark's own state store, read back from a streaming query's checkpoint.

`tt verify --statestore` compares what a replay shows of a transformWithState processor's
state with what Spark committed, read with Spark's `state-metadata` and `statestore` data
sources (docs/PROCESSORS.md §5): an oracle that reads none of tt's logs. This is the only
part of `tt verify` that needs Spark and Java, so nothing imports it unless asked to.

`StateStore.read` gives a variable's state after a micro-batch as `{key: value}`, shaped as
the replay's view shows it (core/state_handle.py `shown`): a one-column key or value is its
column, a ListState's value a list, a MapState's a dict; `StateStore.timers` the timers
registered per key; `StateStore.group_states` an applyInPandasWithState function's
GroupStates; `StateStore.changes` gives the grouping keys Spark's change feed says a
micro-batch wrote, `StateStore.group_state_changes` the GroupStates it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from ..core.errors import TTError
from ..core.state_handle import shown

#: state-metadata's `stateVariableType` -> the kind StoreView uses
KINDS = {"ValueState": "value", "ListState": "list", "MapState": "map", "TimerState": "timers"}


class StateStoreError(TTError):
    """Spark's state store cannot be read (no checkpoint, no Spark, no Java, a bad read)."""


class ChangeFeedUnavailable(StateStoreError):
    """The change feed of a variable cannot be read (the query ran without changelog checkpointing)."""


def local_path(checkpoint: str) -> Path | None:
    """The checkpoint as a local path (`file:/x`, `file:///x` or a plain path), None for another scheme."""
    url = urlparse(checkpoint)
    if url.scheme in ("", "file") or (len(url.scheme) == 1 and os.name == "nt"):
        return Path(unquote(url.path) if url.scheme == "file" else checkpoint)
    return None


def check_checkpoint(checkpoint: str, what: str = "the checkpoint") -> None:
    """Refuse, in one line, a local checkpoint that is not there or holds no state store."""
    path = local_path(checkpoint)
    if path is None:
        return   # hdfs://, s3a://…: only Spark can tell
    if not path.exists():
        hint = (" (Spark deletes a query's temporary checkpoint when the query stops: give the query a "
                "checkpointLocation to compare with its store)" if path.name.startswith("temporary-")
                else "" if "--checkpoint" in what else " (if it moved, give its new place with --checkpoint PATH)")
        raise StateStoreError(f"{what} is not there: {path} does not exist{hint}")
    if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
        raise StateStoreError(f"{what} cannot be read: {path} is not a readable folder")
    if not (path / "state").is_dir() or not (path / "commits").is_dir():
        raise StateStoreError(f"{what} holds no state store: {path} has no state/ and commits/ folders, so it is "
                              f"not the checkpoint of a streaming query with a stateful operator")


def check_query(checkpoint: str, query: str | None, what: str) -> None:
    """Refuse, in one line, a local checkpoint whose query is not the recorded one (its
    `metadata` names another query id): a job that deleted its checkpoint and ran again since
    the recording writes a new query's state there, which any replay would differ from."""
    path = local_path(checkpoint)
    if path is None or query is None:
        return
    try:
        held = json.loads((path / "metadata").read_text()).get("id")
    except (OSError, ValueError, AttributeError):
        return   # (no metadata file: Spark's own read says what it finds)
    if held and held != query:
        raise StateStoreError(f"{what} now holds another query's state: {path}/metadata names query {held}, the "
                              f"recording's was {query} (the job ran again with that checkpoint location since it was "
                              f"recorded); record again, or give a copy of the recorded query's checkpoint with "
                              f"--checkpoint PATH")


def _timeout(value: Any) -> int:
    """A stored GroupState's timeout timestamp (ms), or -1: a query with `NoTimeout` stores none
    (its value is the `groupState` alone)."""
    fields = value.asDict()
    timeout = fields.get("timeoutTimestamp")
    return -1 if timeout is None else int(timeout)


def _condensed(e: BaseException) -> str:
    """Spark's error in a line: its condition and the first line of its message (for an error
    the JVM raised through py4j, the Java exception's, not py4j's "An error occurred while
    calling o59.collectToPython")."""
    text = ""
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            text = str(java.getMessage() or java.toString())
        except Exception:  # noqa: BLE001  the JVM may be gone
            text = ""
    if not text:
        lines = [line.strip() for line in str(e).strip().split("\n") if line.strip()]
        lines = [line for line in lines if not line.startswith("An error occurred while calling")] or lines
        text = lines[0].lstrip(": ") if lines else ""
    text = text.split("\n")[0].split(" SQLSTATE:")[0].strip()
    return " ".join(text.split())[:300] or type(e).__name__


def _spark() -> tuple[Any, bool]:
    """A SparkSession (the process's own if it has one) and whether it was started here."""
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise StateStoreError(f"tt verify --statestore reads Spark's state store and needs pyspark, which cannot "
                              f"be imported here ({e}); install tt with Spark (pip install pyspark)") from None
    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate(), False
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and (Path(java_home) / "bin" / "java").exists()):
        raise StateStoreError("tt verify --statestore reads Spark's state store, which needs Java 17 or 21: there "
                              "is no `java` on PATH and JAVA_HOME is not set")
    from .job import _StderrToFile
    from .spark import session

    fd, log = tempfile.mkstemp(prefix="tt-statestore-", suffix=".log")
    os.close(fd)
    redirect = _StderrToFile(Path(log))   # the JVM's startup noise goes to the log, tt's lines stay on stderr
    try:
        spark = session("tt-verify-statestore", master="local[2]")
    except Exception as e:  # noqa: BLE001  whatever stops Spark from starting, in one line
        raise StateStoreError(f"Spark could not start to read the state store ({_condensed(e)}); its output is in "
                              f"{log}") from None
    finally:
        redirect.restore()
    return spark, True


class StateStore:
    """One streaming query's checkpoint, read through Spark."""

    def __init__(self, checkpoint: str, spark: Any = None):
        check_checkpoint(checkpoint)
        self.checkpoint = checkpoint
        self._started = False
        if spark is None:
            spark, self._started = _spark()
        self.spark = spark
        self._rows: dict[tuple, list[tuple[int, Any, Any]]] = {}
        self._operators: list[dict] | None = None

    def close(self) -> None:
        """Stop Spark if this store started it."""
        if self._started:
            self.spark.stop()
            self._started = False

    def _load(self, fmt: str, **options: Any):
        reader = self.spark.read.format(fmt)
        for k, v in options.items():
            reader = reader.option(k, str(v).lower() if isinstance(v, bool) else str(v))
        return reader.load(self.checkpoint)

    def operators(self) -> list[dict]:
        """The checkpoint's stateful operators: `{"id", "name", "partitions", "min_batch",
        "max_batch", "variables": {name: {"kind", "ttl"}}}` (state-metadata), by id."""
        if self._operators is None:
            try:
                rows = self._load("state-metadata").collect()
            except Exception as e:  # noqa: BLE001  Spark's errors come as many types
                raise StateStoreError(f"Spark cannot read the state metadata of the checkpoint {self.checkpoint}: "
                                      f"{_condensed(e)}") from None
            out = {}
            for r in rows:
                if str(r["stateStoreName"]).lower() != "default" and r["operatorId"] in out:
                    continue
                props = json.loads(r["operatorProperties"] or "{}")
                variables = {v["stateName"]: {"kind": KINDS.get(v.get("stateVariableType"), "?"),
                                              "ttl": bool(v.get("ttlEnabled"))}
                             for v in props.get("stateVariables", [])}
                out[int(r["operatorId"])] = {"id": int(r["operatorId"]), "name": str(r["operatorName"]),
                                             "partitions": int(r["numPartitions"]),
                                             "min_batch": int(r["minBatchId"]), "max_batch": int(r["maxBatchId"]),
                                             "variables": variables}
            self._operators = [out[k] for k in sorted(out)]
        return self._operators

    def read(self, operator: int, variable: str, batch: int, kind: str, ttl: bool = False,
             partition: int | None = None) -> dict:
        """`{key: value}` of one state variable as committed after micro-batch `batch` (only the
        store partition `partition`'s keys, if given)."""
        cache = (operator, variable, batch)
        if cache not in self._rows:
            try:
                self._rows[cache] = self._read(operator, variable, batch, kind, ttl)
            except Exception as e:  # noqa: BLE001
                raise StateStoreError(f"Spark cannot read {variable} of operator {operator} after micro-batch {batch} "
                                      f"from the checkpoint {self.checkpoint}: {_condensed(e)}") from None
        out: dict = {}
        for part, key, value in self._rows[cache]:
            if partition is not None and part != partition:
                continue
            if kind == "map":
                out.setdefault(key, {})[value[0]] = value[1]
            else:
                out[key] = value
        return out

    def _read(self, operator: int, variable: str, batch: int, kind: str, ttl: bool) -> list[tuple[int, Any, Any]]:
        def unwrap(v: Any) -> Any:   # a TTL'd value is stored as {value, ttlExpirationMs}
            return shown(v["value"] if ttl and v is not None else v)
        options = {"stateVarName": variable, "operatorId": operator, "batchId": batch}
        if kind == "list":   # one row per key, its elements in order
            df = self._load("statestore", flattenCollectionTypes=False, **options)
            return [(int(r["partition_id"]), shown(r["key"]), [unwrap(v) for v in r["list_value"] or []])
                    for r in df.collect()]
        df = self._load("statestore", **options)
        if kind == "map":
            return [(int(r["partition_id"]), shown(r["key"]), (shown(r["user_map_key"]), unwrap(r["user_map_value"])))
                    for r in df.collect()]
        return [(int(r["partition_id"]), shown(r["key"]), unwrap(r["value"])) for r in df.collect()]

    def group_states(self, operator: int, batch: int, partition: int | None = None) -> dict[Any, tuple[Any, int]]:
        """`{key: (value, timeout timestamp ms or -1)}` of an applyInPandasWithState operator's
        GroupStates after micro-batch `batch` (only the store partition `partition`'s keys, if
        given): the store's `groupState` and `timeoutTimestamp`."""
        cache = (operator, "$groupState", batch)
        if cache not in self._rows:
            try:
                df = self._load("statestore", operatorId=operator, batchId=batch)
                self._rows[cache] = [(int(r["partition_id"]), shown(r["key"]),
                                      (shown(r["value"]["groupState"]), _timeout(r["value"])))
                                     for r in df.collect()]
            except Exception as e:  # noqa: BLE001
                raise StateStoreError(f"Spark cannot read the GroupStates of operator {operator} after micro-batch "
                                      f"{batch} from the checkpoint {self.checkpoint}: {_condensed(e)}") from None
        return {key: state for part, key, state in self._rows[cache] if partition is None or part == partition}

    def timers(self, operator: int, batch: int, partition: int | None = None) -> dict[Any, list[int]]:
        """`{key: [expiry ms, sorted]}` of the timers registered after micro-batch `batch` (only the
        store partition `partition`'s keys, if given): `readRegisteredTimers`."""
        cache = (operator, "$timers", batch)
        if cache not in self._rows:
            try:
                df = self._load("statestore", operatorId=operator, batchId=batch, readRegisteredTimers=True)
                self._rows[cache] = [(int(r["partition_id"]), shown(r["key"]), int(r["expiration_timestamp_ms"]))
                                     for r in df.collect()]
            except Exception as e:  # noqa: BLE001
                raise StateStoreError(f"Spark cannot read the timers of operator {operator} after micro-batch {batch} "
                                      f"from the checkpoint {self.checkpoint}: {_condensed(e)}") from None
        out: dict[Any, list[int]] = {}
        for part, key, expiry in self._rows[cache]:
            if partition is None or part == partition:
                out.setdefault(key, []).append(expiry)
        return {k: sorted(v) for k, v in out.items()}

    def changes(self, operator: int, variable: str, first: int, last: int) -> dict[int, set]:
        """{micro-batch: the grouping keys whose `variable` Spark's change feed says it wrote}, for
        micro-batches `first`..`last`. Needs changelog checkpointing (RocksDB's
        `changelogCheckpointing.enabled`); without it, `ChangeFeedUnavailable` says so."""
        rows = self._change_feed(operator, first, last, ["batch_id", "key"], stateVarName=variable)
        out: dict[int, set] = {b: set() for b in range(first, last + 1)}
        for r in rows:
            out.setdefault(int(r["batch_id"]), set()).add(shown(r["key"]))
        return out

    def group_state_changes(self, operator: int, first: int, last: int) -> dict[int, dict]:
        """{micro-batch: {key: what it wrote last}} of an applyInPandasWithState operator's
        GroupStates, for micro-batches `first`..`last`, from Spark's change feed: `("delete",)`
        or `("update", value or None, timeout timestamp ms or -1)`, as `store_write` in
        core/group_state.py makes them from the replay (both state store providers keep it)."""
        rows = self._change_feed(operator, first, last, ["batch_id", "change_type", "key", "value"])
        out: dict[int, dict] = {b: {} for b in range(first, last + 1)}
        for r in rows:   # a partition's changes in the order it wrote them
            value = r["value"]
            write = ("delete",) if r["change_type"] == "delete" or value is None else (
                "update", None if value["groupState"] is None else shown(value["groupState"]), _timeout(value))
            out.setdefault(int(r["batch_id"]), {})[shown(r["key"])] = write
        return out

    def _change_feed(self, operator: int, first: int, last: int, columns: list[str], **options: Any) -> list:
        """The rows of the change feed of micro-batches `first`..`last`, or `ChangeFeedUnavailable`."""
        try:
            return self._load("statestore", operatorId=operator, readChangeFeed=True, changeStartBatchId=first,
                              changeEndBatchId=last, **options).select(*columns).collect()
        except Exception as e:  # noqa: BLE001
            why = _condensed(e)
            if "changelog" in why.lower():
                why = ("the query ran without changelog checkpointing "
                       "(spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled)")
            raise ChangeFeedUnavailable(why) from None


def open_store(checkpoint: str) -> StateStore:
    """The state store in `checkpoint`; one-line `StateStoreError`s when it cannot be read."""
    return StateStore(checkpoint)


__all__ = ["StateStore", "StateStoreError", "ChangeFeedUnavailable", "open_store", "check_checkpoint", "local_path",
           "KINDS"]
