"""The run file: SQLite schema and migrations, the single batched writer, typed reads.

Kept importable without sqlite-utils so that executors can use `tt.store.blobs`.
"""
