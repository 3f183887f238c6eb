"""The core: operator API, dataflow DAG, the pipelined runtime, log record types.

Imports only the standard library, orjson and cloudpickle: it runs in Spark
executors, in `tt debug` over SSH, and everywhere in between.
"""
