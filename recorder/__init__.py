"""Recording on Spark: compiling a dataflow into stages, the coordinator beside the
driver, the code that runs in executors, and the recorder side of `tt record`.

The only part of tt that imports pyspark.
"""
