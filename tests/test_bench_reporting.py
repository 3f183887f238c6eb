"""benches/reporting.py: the interval and verdict a bench prints, and a results file that keeps the day's runs."""

from __future__ import annotations

import sys
from pathlib import Path

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
