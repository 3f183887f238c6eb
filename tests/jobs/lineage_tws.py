"""A plain PySpark job whose StatefulProcessor's rows carry, as plain data, the rows its
state calls read were written by: the oracle of tests/test_lineage.py for lineage through a
processor's state variables, which the handle reports per key.

`Trail` (`transformWithState`, a row a step), per customer:
- a ListState `ids`: each row reads it (`get`) and appends its own id (`appendValue`), so
  what a row reads was written by every earlier row of its customer;
- a ValueState `latest`: a row whose id // 4 is odd writes its id without reading it
  (`update`), any other reads it (`get`), so what the other rows read was written by the
  last writing row of their customer alone (a customer's ids are 4 apart: they take turns).
Each row emits (id, customer, the ids it read from `ids`, the id it read from `latest` or -1).

    python lineage_tws.py OUT.json [ROWS]
"""

import json
import sys

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StatefulProcessor

from job_settings import spark_settings   # tests/jobs/job_settings.py


class Trail(StatefulProcessor):
    def init(self, handle):
        self.ids = handle.getListState("ids", "id long")
        self.latest = handle.getValueState("latest", "id long")

    def handleInputRows(self, key, rows, timerValues):
        for row in rows:
            before = [r[0] for r in self.ids.get()]
            self.ids.appendValue((row.id,))
            read = -1
            if (row.id // 4) % 2:
                self.latest.update((row.id,))
            else:
                got = self.latest.get()
                read = got[0] if got else -1
            yield Row(id=row.id, customer=row.customer, earlier=json.dumps(sorted(before)), latest=read)

    def close(self):
        pass


def main(out: str, rows: int = 60) -> None:
    spark = SparkSession.builder.master("local[2]").appName("lineage-tws").getOrCreate()
    with spark_settings(spark, {"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "false"}):
        payments = spark.range(0, rows, numPartitions=2).selectExpr("id", "concat('c', id % 4) AS customer")
        trail = payments.groupBy("customer").transformWithState(
            Trail(), "id long, customer string, earlier string, latest long", "Update", "None")
        result = sorted([list(r) for r in trail.collect()])
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
