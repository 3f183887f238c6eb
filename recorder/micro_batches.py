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
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.streaming import StreamingQueryListener


class MicroBatchEnds(StreamingQueryListener):
    def __init__(self, coordinator: Any):
        self.coordinator = coordinator

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        query, batch = str(p.id), int(p.batchId)
        c = self.coordinator
        if c.micro_batch.get(query) == batch:   # the last one tt recorded tasks of
            c.micro_batch_ended(query, batch)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def watch(spark: Any, coordinator: Any) -> Any:
    """Listen on `spark`'s streaming queries; returns the function that stops listening."""
    listener = MicroBatchEnds(coordinator)
    spark.streams.addListener(listener)

    def stop() -> None:
        try:
            spark.streams.removeListener(listener)
        except Exception:  # noqa: BLE001  the session may be stopped already
            pass
    return stop


__all__ = ["MicroBatchEnds", "watch"]
