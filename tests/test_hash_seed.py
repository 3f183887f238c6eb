"""A replay hashes strings with the seed the job's Python workers had (cli/hash_seed.py).

A set of strings iterates in the order of their hashes, which CPython salts with PYTHONHASHSEED.
PySpark starts its workers with the driver's seed, else 0; `tt verify` in a shell that sets
none ran with a random one, and the job below, which keeps the words of each partition in the
order it met them, failed it on every run. The oracle is the job's output, each partition's
count of distinct words so far, which the replayed states must hold again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tt.cli import hash_seed

pytestmark = pytest.mark.slow   # (both record the job with Spark)

TEXT = ["the quick brown fox", "jumps over the lazy dog", "a stitch in time saves nine"] * 40
JOB = f"TEXT = {TEXT!r}\n" + textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession

    def first_words(rows):
        order = []          # each new word, in the order this partition met it
        for r in rows:
            for w in set(r.split()):
                if w not in order:
                    order.append(w)
            yield len(order)

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    text = TEXT
    counts = spark.sparkContext.parallelize(text, 2).mapPartitions(first_words).collect()
    open(sys.argv[1], "w").write(json.dumps(counts))
""")


def _tt(*args: str, cwd: Path, seed: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    return subprocess.run([sys.executable, "-m", "tt", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def words_run(tmp_path_factory) -> Path:
    """The job recorded by `tt record` with PYTHONHASHSEED=7, an interaction after every input."""
    where = tmp_path_factory.mktemp("hash_seed")
    (where / "job.py").write_text(JOB)
    recorded = _tt("record", "job.py", "-o", "run.db", "--when", "True", "--", str(where / "out.json"),
                   cwd=where, seed="7")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    return where / "run.db"


def test_a_replay_hashes_with_the_workers_seed(words_run):
    from tt.store.reader import RunReader

    reader = RunReader(words_run)
    assert reader.hash_seed == "7"   # what the workers had: the driver's seed, which PySpark passed on
    reader.close()
    where = words_run.parent
    for seed in (None, None, "0", "random"):   # the shell's seed does not matter
        verified = _tt("verify", str(words_run), cwd=where, seed=seed)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "every replayed state equals the recorded one" in verified.stdout

    # what the replay would be under another seed: the debug session's jump says it differs
    check = textwrap.dedent(f"""
        import json
        from tt.replay.session import DebugSession
        s = DebugSession({str(words_run)!r})
        op = s.reader.operator("first_words").id
        k = next(i.k for i in s.interactions() if s.reader.instances_at(i.k)[(op, 0)].position == 30)
        print(json.dumps([s.jump(k).differs is not None, s.state("first_words:0")["locals"]["order"]]))
    """)
    counts = json.loads((where / "out.json").read_text())   # the job's output: partition 0's, then 1's
    orders = {}
    for seed, differs in (("0", True), ("7", False)):
        out = subprocess.run([sys.executable, "-c", check], env={**os.environ, "PYTHONHASHSEED": seed},
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        found, orders[seed] = json.loads(out.stdout.splitlines()[-1])
        assert found is differs, seed
        assert len(orders[seed]) == counts[29] == len(set(" ".join(TEXT[:30]).split()))   # partition 0's first 30 lines
    assert orders["0"] != orders["7"] and sorted(orders["0"]) == sorted(orders["7"])   # in another order


def test_only_commands_that_record_or_replay_start_again_with_a_seed(words_run, monkeypatch):
    """Which seed a command starts again with, if any (the exec itself is caught)."""
    execs = []
    monkeypatch.setattr(sys, "argv", [str(Path(hash_seed.__file__).parent.parent / "__main__.py")])   # python -m tt
    monkeypatch.setattr(os, "execve", lambda exe, args, env: execs.append((args[3:], env["PYTHONHASHSEED"])))
    run = str(words_run)
    for env_seed, argv in ((None, ["record", "job.py"]), (None, ["--debug", "verify", run]),
                           ("0", ["replay", "--to", "3", run]), ("7", ["debug", run]), (None, ["inspect", run]),
                           (None, ["verify", "missing.db"]), ("5", ["record", "job.py"]), (None, ["demo"])):
        if env_seed is None:
            monkeypatch.delenv("PYTHONHASHSEED", raising=False)
        else:
            monkeypatch.setenv("PYTHONHASHSEED", env_seed)
        hash_seed.rerun_with_hash_seed(argv)
    assert execs == [(["record", "job.py"], "0"), (["--debug", "verify", run], "7"),
                     (["replay", "--to", "3", run], "7"), (["demo"], "0")]
