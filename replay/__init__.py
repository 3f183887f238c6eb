"""Local replay of a recorded run: the engine, the debug session, verification.

Pure Python over the run file: never imports pyspark, needs no JVM.
"""
