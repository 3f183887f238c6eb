"""`core/pulled.py`: a pull-based user function driven one input unit at a time (no Spark).

The oracle is the function run the ordinary way, pulling from a list: driven unit by
unit it must yield the same outputs in the same order, each attributed to the unit
that was pulled last when it was yielded.
"""

from __future__ import annotations

import pytest

from tt.core.pulled import Pulled


def running_max(rows):
    """A mapPartitions-style generator keeping state in its frame."""
    best = None
    for r in rows:
        if best is None or r > best:
            best = r
            yield ("new max", r)
    yield ("final", best)


def pairs(rows):
    """Pulls two inputs per output: attribution goes to the later one."""
    it = iter(rows)
    for a in it:
        b = next(it, None)
        yield (a, b)


class Header:
    """A callable class (as passed to mapInPandas) that yields before pulling anything."""

    def __init__(self):
        self.seen = 0

    def __call__(self, rows):
        yield "header"
        for r in rows:
            self.seen += 1
            yield r * 10


def drive(fn, units):
    p = Pulled(fn)
    attributed = [(-1, o) for o in p.start()]
    for i, u in enumerate(units):
        attributed += [(i, o) for o in p.feed(u)]
    attributed += [("end", o) for o in p.end()]
    return p, attributed


@pytest.mark.parametrize("fn", [running_max, pairs, Header()])
def test_same_outputs_as_the_function_run_on_a_list(fn):
    units = [3, 1, 4, 1, 5, 9, 2, 6]
    expected = list(fn(list(units))) if not isinstance(fn, Header) else list(Header()(list(units)))
    _, attributed = drive(fn, units)
    assert [o for _, o in attributed] == expected


def test_outputs_are_attributed_to_the_unit_pulled_last():
    p, attributed = drive(running_max, [3, 1, 4])
    assert attributed == [(0, ("new max", 3)), (2, ("new max", 4)), ("end", ("final", 4))]
    assert p.pulled == 3 and p.finished
    _, attributed = drive(pairs, [1, 2, 3])
    assert attributed == [(1, (1, 2)), ("end", (3, None))], "(3, None) is yielded after the input ran out"
    h = Header()
    _, attributed = drive(h, [1, 2])
    assert attributed == [(-1, "header"), (0, 10), (1, 20)] and h.seen == 2


def test_state_is_readable_between_units():
    """Between two units a generator is suspended inside its pull: its frame's locals are the
    state a step shows (what recording snapshots at an interaction)."""
    def gen(rows):
        total = 0
        for r in rows:
            total += r
            yield total

    p = Pulled(gen)
    p.start()
    assert p.feed(5) == [5] and p.returned.gi_frame.f_locals["total"] == 5
    assert p.feed(7) == [12] and p.returned.gi_frame.f_locals["total"] == 12
    assert p.end() == [] and p.finished


def test_an_exception_surfaces_from_the_unit_that_caused_it():
    def fragile(rows):
        for r in rows:
            yield 10 // r

    p = Pulled(fragile)
    p.start()
    assert p.feed(2) == [5]
    assert not p.failed
    with pytest.raises(ZeroDivisionError):
        p.feed(0)
    assert p.finished and p.failed   # the replay engine restarts a failed function from scratch
    with pytest.raises(RuntimeError, match="has finished"):
        p.feed(1)


def test_a_function_that_stops_early_takes_no_more_input():
    def first_two(rows):
        it = iter(rows)
        yield next(it)
        yield next(it)

    p = Pulled(first_two)
    p.start()
    assert p.feed("a") == ["a"]
    assert p.feed("b") == ["b"] and p.finished
    assert p.end() == []


def test_feed_before_start_is_refused():
    with pytest.raises(RuntimeError, match="start"):
        Pulled(running_max).feed(1)
