"""The benches' shared parts: the interval and verdict a bench prints, a results file that
keeps the day's runs and tt's modules compiled before a bench starts processes
(benches/reporting.py), two variants run at once on a core each (benches/side_by_side.py),
and the instructions bench's count of what the Python workers did and its workloads
(benches/instructions.py)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benches"))

import reporting  # noqa: E402


def test_the_interval_holds_the_median_and_says_when_repetitions_cannot_tell():
    spread = [0.93, 1.06, 1.07, 1.00, 1.04, 1.06]   # an A/B of this machine's: ±7 % a repetition
    med, low, high = reporting.paired_interval(spread)
    assert med == 1.05 and low <= med <= high and min(spread) <= low and high <= max(spread)
    assert reporting.verdict(low, high, 1.02) == "cannot tell"
    tight = [1.101, 1.099, 1.1, 1.102, 1.098]
    assert reporting.verdict(*reporting.paired_interval(tight)[1:], 1.05) == "not met"
    assert reporting.verdict(*reporting.paired_interval(tight)[1:], 1.2) == "met"
    assert reporting.paired_interval([1.3]) == (1.3, 1.3, 1.3)
    assert reporting.paired_interval(spread) == reporting.paired_interval(spread)   # a fixed seed
    assert reporting.interval_text(tight, 1.05).endswith("goal ×1.05: not met)")
    # one or two repetitions name no verdict: their interval is the ratios themselves
    assert reporting.interval_text([0.99], 1.05).endswith("goal ×1.05: cannot tell from 1 repetition)")
    assert reporting.interval_text([0.99, 1.0], 1.05).endswith("cannot tell from 2 repetitions)")
    assert reporting.interval_text([0.99, 1.0, 0.98], 1.05).endswith("goal ×1.05: met)")


def test_a_second_run_the_same_day_keeps_the_first_below_it(tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "RESULTS", tmp_path)
    monkeypatch.setattr(reporting, "revision", lambda: "aaaa111")
    first = reporting.write_result("w2", "A bench", "    python benches/x.py\n\nfigures one", "2026-11-27")
    monkeypatch.setattr(reporting, "revision", lambda: "bbbb222")
    reporting.write_result("w2", "A bench", "figures two", "2026-11-27")
    monkeypatch.setattr(reporting, "revision", lambda: "cccc333")
    reporting.write_result("w2", "A bench", "figures three", "2026-11-27")
    text = first.read_text()
    assert text.startswith("# A bench (2026-11-27)\n\nfigures three\n\nRun on cccc333.\n")
    assert text.count("# A bench") == 1
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads == ["## Earlier the same day (bbbb222)", "## Earlier the same day (aaaa111)"]
    assert text.index("figures three") < text.index("figures two") < text.index("figures one")
    assert "\n\n    python benches/x.py\n\nfigures one" in text   # an earlier run's command keeps its indent


RUNNER = """
import os, sys
sys.path.insert(0, {benches!r})
from side_by_side import serve
print("what a job prints itself")   # (not an answer: skipped)

def run(variant, rep):
    if variant == "broken":
        raise ValueError("no such workload")
    return {{"variant": variant, "rep": rep, "cores": sorted(os.sched_getaffinity(0))}}
serve(run)
"""


def test_a_smoke_run_writes_its_results_where_tt_bench_results_says(tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "RESULTS", tmp_path / "kept")
    monkeypatch.setenv("TT_BENCH_RESULTS", str(tmp_path / "smoke"))
    out = reporting.write_result("w2", "A bench", "figures", "2026-12-08")
    assert out == tmp_path / "smoke" / "2026-12-08-w2.md" and "figures" in out.read_text()
    assert not (tmp_path / "kept").exists()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="side by side needs two cores")
def test_side_by_side_runs_the_two_variants_at_once_and_swaps_their_cores(tmp_path):
    import side_by_side

    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER.format(benches=str(Path(side_by_side.__file__).parent)))
    asked, seen = [], []
    pairs = side_by_side.run_pairs([sys.executable, str(runner)], ("off", "10s"), 3,
                                   lambda variant, rep: asked.append((variant, rep)) or {"variant": variant, "rep": rep},
                                   lambda rep, a, b: seen.append(rep))
    assert [(a["variant"], b["variant"]) for a, b in pairs] == [("off", "10s")] * 3
    assert [(a["rep"], b["rep"]) for a, b in pairs] == [(0, 0), (1, 1), (2, 2)] and seen == [0, 1, 2]
    assert sorted(asked[:4]) == [("10s", -2), ("10s", -1), ("off", -2), ("off", -1)], "a warm-up pair each way round"
    first, second = side_by_side.cores()
    assert [(a["cores"], b["cores"]) for a, b in pairs] == [([first], [second]), ([second], [first]), ([first], [second])]
    with pytest.raises(SystemExit, match="ValueError: no such workload"):
        side_by_side.run_pairs([sys.executable, str(runner)], ("off", "broken"), 1,
                               lambda variant, rep: {"variant": variant, "rep": rep})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="side by side needs two cores")
def test_same_core_runs_a_pair_on_each_core_and_swaps_the_variants_runners(tmp_path):
    import side_by_side

    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER.format(benches=str(Path(side_by_side.__file__).parent)))
    pairs = side_by_side.run_pairs([sys.executable, str(runner)], ("off", "10s"), 2,
                                   lambda variant, rep: {"variant": variant, "rep": rep}, same_core=True)
    first, second = side_by_side.cores()
    assert [(a["variant"], b["variant"], a["rep"]) for a, b in pairs] == [
        ("off", "10s", 0), ("off", "10s", 0), ("off", "10s", 1), ("off", "10s", 1)], "two pairs a repetition"
    assert [(a["cores"], b["cores"]) for a, b in pairs] == [([first], [first]), ([second], [second])] * 2


def test_page_in_reads_every_file_it_is_given_and_every_file_under_a_directory(tmp_path):
    (tmp_path / "table" / "part=1").mkdir(parents=True)
    (tmp_path / "table" / "part=1" / "a.parquet").write_bytes(b"x" * 10_000_000)   # more than one read
    (tmp_path / "table" / "b.parquet").write_bytes(b"y" * 7)
    (tmp_path / "alone.parquet").write_bytes(b"z" * 3)
    assert reporting.page_in([tmp_path / "table", tmp_path / "alone.parquet"]) == 10_000_010
    assert reporting.page_in(p for p in [tmp_path / "alone.parquet"]) == 3   # any iterable of paths


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_the_instructions_bench_counts_what_the_forked_workers_did_themselves(tmp_path):
    """benches/instructions.py: a process forked by PySpark's daemon counts the daemon's
    instructions before the fork too, and the bench takes them off. Two workers that add 1M
    numbers more each count, together, what 2M additions count in a process of their own (an
    oracle measured apart), and not the daemon's 4M additions before it forked them."""
    import subprocess

    import instructions

    add = "def add(n):\n    s = 0\n    for i in range(n):\n        s += i\n"   # local names: no dict lookups
    daemon = tmp_path / "pyspark" / "daemon.py"   # named so: the bench finds the daemon by its command
    daemon.parent.mkdir()
    (daemon.parent / "__init__.py").write_text("")
    daemon.write_text("import os, sys\n" + add + "add(4_000_000)\n"
                      "for _ in range(2):\n"
                      "    pid = os.fork()\n"
                      "    if pid == 0:\n"
                      "        add(int(sys.argv[1]))\n"
                      "        os._exit(0)\n"
                      "    os.waitpid(pid, 0)\n")
    alone = tmp_path / "alone.py"
    alone.write_text("import sys\n" + add + "add(int(sys.argv[1]))\n")

    def valgrind(logs, *args, sim="--cache-sim=no"):
        logs.mkdir(exist_ok=True)
        subprocess.run(["valgrind", "--tool=cachegrind", *sim.split(), "--cachegrind-out-file=/dev/null",
                        f"--log-file={logs}/log.%p", sys.executable, *args],
                       cwd=tmp_path, check=True,   # the bench's fixed hash seed: the same counts every run
                       env={"PYTHONPATH": str(tmp_path), "PATH": os.environ["PATH"], "PYTHONHASHSEED": "0"})

    counted = {}
    for n in (1_000_000, 2_000_000):
        valgrind(tmp_path / f"forked-{n}", "-m", "pyspark.daemon", str(n))
        counted[n] = instructions.worker_instructions(tmp_path / f"forked-{n}")
        valgrind(tmp_path / f"alone-{n}", str(alone), str(n))
    assert counted[1_000_000][1] == counted[2_000_000][1] == 2
    alone_counts = [int(re.search(r"I\s+refs:\s+([\d,]+)", log.read_text())[1].replace(",", ""))
                    for n in (1_000_000, 2_000_000) for log in (tmp_path / f"alone-{n}").iterdir()]
    million = alone_counts[1] - alone_counts[0]       # 1M additions, in a process of their own
    more = counted[2_000_000][0] - counted[1_000_000][0]   # two workers' 1M more each
    assert 1.9 < more / million < 2.1   # (1.975 on 2026-12-01, the same every run)
    assert 0 < counted[1_000_000][0] < 2.5 * million   # not the daemon's 4M before the fork

    # `--simulate`: the instructions of a run without it (the one just before: the test's first
    # run counted 1.3 % more on 2026-12-07, two later ones 242 apart), and the simulated caches'
    # and branch predictor's counts: a million loops' branches at least. (Not their misses: a
    # worker that only loops misses less than the daemon's exit, which is taken off it.)
    valgrind(tmp_path / "plain", "-m", "pyspark.daemon", "1000000")
    valgrind(tmp_path / "simulated", "-m", "pyspark.daemon", "1000000", sim="--cache-sim=yes --branch-sim=yes")
    counts, workers = instructions.worker_counts(tmp_path / "simulated")
    plain = instructions.worker_instructions(tmp_path / "plain")[0]
    assert workers == 2 and abs(counts["I refs"] - plain) < 1e-5 * plain
    assert set(instructions.SIMULATED) <= set(counts) and counts["Branches"] > 2_000_000


def test_the_benches_leave_every_tt_module_compiled_for_a_new_process(tmp_path):
    """`reporting.bytecode_cached`: every tt module gets the `.pyc` a new process (a Python worker,
    a `tt` command) reads instead of compiling the source, as from an installed package, even
    where `PYTHONDONTWRITEBYTECODE` is set."""
    import importlib.util
    import subprocess

    reporting.bytecode_cached()
    modules = [p for p in reporting.ROOT.rglob("*.py")
               if not {".venv", "benches", "tests", "sample_runs"} & set(p.relative_to(reporting.ROOT).parts)]
    assert len(modules) > 50
    for source in modules:
        cached = Path(importlib.util.cache_from_source(str(source)))
        assert cached.exists(), source
        header = cached.read_bytes()[:16]   # magic, flags, then the source's mtime and size it was made from
        assert int.from_bytes(header[8:12], "little") == int(source.stat().st_mtime) & 0xFFFFFFFF, source
        assert int.from_bytes(header[12:16], "little") == source.stat().st_size & 0xFFFFFFFF, source
    # a new process that imports tt's recorder compiles none of tt's modules, only one without a .pyc
    (tmp_path / "fresh_module.py").write_text("x = 1\n")
    probe = ("import builtins\ncompiled = []\nreal = builtins.compile\n"
             "builtins.compile = lambda *a, **k: (compiled.append(str(a[1])), real(*a, **k))[1]\n"
             "import tt.recorder.task, tt.replay.lineage, fresh_module\n"
             f"print([c for c in compiled if c.startswith(({str(reporting.ROOT)!r}, {str(tmp_path)!r}))])\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}).stdout
    assert out.strip() == repr([str(tmp_path / "fresh_module.py")])


def test_the_processor_path_bench_runs_each_way_spark_free():
    """benches/processor_path.py --child (what it counts under valgrind), here without it: the
    processor's step directly and through θ's runner, with and without the output digest, each
    giving one output a key (the child checks it and exits non-zero otherwise)."""
    import subprocess

    bench = reporting.ROOT / "benches" / "processor_path.py"
    for mode in ("direct", "tt", "tt-nodigest"):
        out = subprocess.run([sys.executable, str(bench), "--child", mode, "30"], capture_output=True, text=True)
        assert out.returncode == 0, (mode, out.stderr[-2000:])


@pytest.mark.slow
def test_the_instructions_benchs_tws_workload_runs_both_ways_and_checks_its_answer():
    """benches/instructions.py --child TWS (what each variant runs under valgrind), here without
    it: the transformWithStateInPandas job plainly and under `tt record`, each answer checked
    against Spark SQL's, the recording's two interactions counted."""
    import subprocess

    bench = reporting.ROOT / "benches" / "instructions.py"
    for variant, interactions in (("off", "0"), ("end", "2")):
        out = subprocess.run([sys.executable, str(bench), "--child", "TWS", variant, "0.01", "2"],
                             capture_output=True, text=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        assert out.returncode == 0, out.stderr[-2000:]
        found = re.search(r"^RESULT (\S+) (\d+)$", out.stdout, re.M)
        assert found and float(found[1]) > 0 and found[2] == interactions, out.stdout


def test_the_instructions_benchs_lineage_variants_record_w2_without_and_with_lineage(spark, tmp_path):
    """benches/instructions.py --lineage: W2 with θ = REV recorded without and with `--lineage`
    (what the two variants run under valgrind), here without it, over TPC-H-shaped tables of a
    few rows: both answers are Spark SQL's, and only `--lineage` keeps logs outside G(θ)."""
    import datetime
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    import instructions
    import lineage
    import tpch

    money = pa.decimal128(15, 2)
    day = datetime.date
    tables = {
        "nation": pa.table({"n_nationkey": pa.array([0, 1], pa.int64()), "n_name": ["ALGERIA", "BRAZIL"]}),
        "customer": pa.table({"c_custkey": pa.array([1, 2, 3], pa.int64()), "c_name": ["a", "b", "c"],
                              "c_acctbal": pa.array([Decimal("10.50"), Decimal("-3.00"), Decimal("7.25")], money),
                              "c_nationkey": pa.array([0, 1, 0], pa.int64()), "c_phone": ["p1", "p2", "p3"],
                              "c_address": ["x", "y", "z"], "c_comment": ["", "", ""]}),
        "orders": pa.table({"o_orderkey": pa.array([10, 11, 12, 13], pa.int64()),
                            "o_custkey": pa.array([1, 2, 3, 1], pa.int64()),
                            "o_orderdate": [day(1993, 10, 5), day(1993, 11, 1), day(1994, 2, 1), day(1993, 12, 31)]}),
        "lineitem": pa.table({"l_orderkey": pa.array([10, 10, 11, 12, 13, 13], pa.int64()),
                              "l_extendedprice": pa.array([Decimal(p) for p in ("100.00", "50.00", "70.00", "90.00",
                                                                                  "20.00", "30.00")], money),
                              "l_discount": pa.array([Decimal(d) for d in ("0.05", "0.00", "0.10", "0.02", "0.00",
                                                                           "0.04")], money),
                              "l_returnflag": ["R", "N", "R", "R", "R", "A"]}),
    }
    data = tmp_path / "tpch"
    data.mkdir()
    for name, table in tables.items():
        pq.write_table(table, data / f"{name}.parquet")
        spark.read.parquet(str(data / f"{name}.parquet")).createOrReplaceTempView(name)
    try:
        want = tpch.q10_sql(spark)
        assert [r[0] for r in want] == [1, 2], "customer 1's returns come to 115, 2's to 63; 3's order is later"
        logged = {}
        for variant in instructions.LINEAGE_VARIANTS:
            out = tmp_path / f"{variant}.db"
            got = instructions.lineage_variant(spark, variant, data, 2, out)
            tpch.check(got, want, variant)
            logged[variant] = lineage.lineage_bytes(out)
    finally:
        for name in tables:
            spark.catalog.dropTempView(name)
    assert logged["rev"] == 0 < logged["rev+lineage"], logged
