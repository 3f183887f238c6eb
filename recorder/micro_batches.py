"""The last micro-batch end of a streaming query, as an interaction of the run.

Structured Streaming runs a stateful processor as a new Spark task per partition in
every micro-batch; the end of a micro-batch is where a user expects to look at the
state. The coordinator makes that interaction when the first task of the next
micro-batch reports, before welcoming it: Spark had ended every task of the previous
one, so the interaction is exact. The last micro-batch has no next one; `MicroBatchEnds`
listens for Spark's query progress on the driver for it (Spark reports from its listener
bus, a moment after the batch's tasks ended), and the end of the run ends it for sure
(`RecordingSession.end`), whichever comes first. A micro-batch with no key and no timer for
the processor records nothing and makes no interaction.

The same listener notes where each query keeps its checkpoint (`query_checkpoint`): Spark's
own state store lives there, and `tt verify --statestore` reads it back as a second oracle.
Spark reports a query's start synchronously, before `start()` returns, so the query is
still active then and its resolved checkpoint root can be asked for.
"""

from __future__ import annotations

from typing import Any, Callable

from pyspark.sql.streaming import StreamingQueryListener


class MicroBatchEnds(StreamingQueryListener):
    def __init__(self, coordinator: Any, spark: Any = None,
                 on_query: Callable[[str, dict], None] | None = None):
        self.coordinator = coordinator
        self.spark = spark
        self.on_query = on_query
        self.known: set[str] = set()

    def _note(self, query: str, name: Any = None) -> None:
        if self.on_query is None or query in self.known:
            return
        info = query_checkpoint(self.spark, query)
        if info is None:   # not active any more (a progress event after the query stopped)
            return
        self.known.add(query)
        if name is not None and info.get("name") is None:
            info["name"] = str(name)
        self.on_query(query, info)

    def onQueryStarted(self, event: Any) -> None:
        self._note(str(event.id), event.name)

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        query, batch = str(p.id), int(p.batchId)
        c = self.coordinator
        if c.micro_batch.get(query) == batch:   # the last one tt recorded tasks of
            c.micro_batch_ended(query, batch)
        self._note(query, p.name)   # a query that started before tt listened

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def query_checkpoint(spark: Any, query: str) -> dict | None:
    """`{"checkpoint": the query's resolved checkpoint root (a URI), "name": its name}` for an
    active query of `spark` (None when it is not active): the root Spark resolved from the
    query's `checkpointLocation` option, `spark.sql.streaming.checkpointLocation`/NAME, or the
    temporary folder it made (deleted when that query stops)."""
    try:
        jq = spark._jsparkSession.streams().get(query)
        if jq is None:
            return None
        execution = jq.streamingQuery()
        name = jq.name()
        return {"checkpoint": str(execution.resolvedCheckpointRoot()),
                "name": None if name is None else str(name)}
    except Exception:  # noqa: BLE001  Spark Connect, a stopped session: where it is stays unknown
        return None


def watch(spark: Any, coordinator: Any, on_query: Callable[[str, dict], None] | None = None) -> Any:
    """Listen on `spark`'s streaming queries; returns the function that stops listening.
    `on_query(query id, {"checkpoint", "name"})` is called once per query seen."""
    listener = MicroBatchEnds(coordinator, spark, on_query)
    spark.streams.addListener(listener)

    def stop() -> None:
        try:
            spark.streams.removeListener(listener)
        except Exception:  # noqa: BLE001  the session may be stopped already
            pass
    return stop


__all__ = ["MicroBatchEnds", "query_checkpoint", "watch"]
