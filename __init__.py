"""tt: a time-travel debugger for PySpark dataflows.

The public API for jobs:

    import tt

    class FraudDetector(tt.Operator):
        def __init__(self):
            self.blacklist = {}
        def process(self, row, port=0):
            ...
            yield row

    flow = tt.Dataflow("fraud")
    flow.source("U", df).key_by(lambda r: r["customer"]).process(FraudDetector(), name="FD") \\
        .to_dataframe("S", schema="customer string, amount double")
    result = flow.run()

`python job.py` runs it with recording off; `tt record job.py` records it into a
run file that `tt debug` replays without Spark. A plain PySpark job needs no tt
API at all: `tt record` hooks its Python functions; `tt.hook(spark)` does the same
from a notebook.
"""

from .core.errors import TTError
from .core.operator import Operator, log_result
from .recorder import frames as _frames
from .recorder.dataflow import Dataflow, KeyedStream, Result, Stream
from .store import sources as _sources

_sources.frame_builder = _frames   # a mapInPandas unit read by reference is rebuilt by PySpark's conversion

__version__ = "0.1.0"
__all__ = ["Operator", "log_result", "Dataflow", "Stream", "KeyedStream", "Result", "TTError",
           "spark_session", "hook"]


def hook(spark, out="run.db", **options):
    """Record the unmodified PySpark calls that follow (mapInPandas, applyInPandas,
    rdd.mapPartitions, UDTFs…) into `out`, from a notebook or a script, until `.stop()`:

        rec = tt.hook(spark, "run.db")
        ...
        rec.stop()          # then: tt debug run.db

    Options as `tt record`'s: watch=, every= (seconds), when=, force=.
    """
    from .recorder.notebook import hook as _hook

    return _hook(spark, out, **options)


def spark_session(app_name: str = "tt-job", master: str | None = None, conf: dict | None = None):
    """A SparkSession with settings that suit local runs of tt jobs.

    Uses `master` if given, else `$TT_SPARK_MASTER`, else `spark.master` from the
    environment (spark-submit), else `local[2,4]` (two cores, up to four attempts
    per task, as on a cluster).
    """
    from .recorder.spark import session

    return session(app_name, master, conf)
