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


def test_functions_run_one_after_another_on_reused_greenlets_as_on_fresh_ones():
    """Each function runs on a greenlet taken from the thread's idle ones (`_workers`): a
    function that returned, raised, or was dropped half-way must leave nothing behind for the
    next, and two functions driven in turn each keep their own frame. The oracle: each
    function run the ordinary way, pulling from a list."""
    import gc

    from tt.core import pulled as pulled_module

    def fragile(rows):
        for r in rows:
            yield 10 // r

    units = [3, 1, 4, 1, 5]
    for _ in range(3):
        p, attributed = drive(running_max, units)
        assert [o for _, o in attributed] == list(running_max(units))
        failing = Pulled(fragile)
        failing.start()
        assert failing._runner is p._runner, "the greenlet of a function that returned is reused"
        with pytest.raises(ZeroDivisionError):
            failing.feed(0)
        again, attributed = drive(pairs, units)
        assert again._runner is p._runner, "... and of one that raised"
        assert [o for _, o in attributed] == list(pairs(units))
        dropped = Pulled(running_max)   # left suspended in its pull, then dropped
        dropped.start()
        dropped.feed(7)
        del dropped
        gc.collect()
    assert all(not g.dead for g in pulled_module._workers.idle)

    a, b = Pulled(running_max), Pulled(pairs)   # driven in turn, as two operators of one task
    out_a, out_b = a.start(), b.start()
    for x, y in zip([1, 5, 2], [9, 8, 7]):
        out_a += a.feed(x)
        out_b += b.feed(y)
    out_a += a.end()
    out_b += b.end()
    assert out_a == list(running_max([1, 5, 2])) and out_b == list(pairs([9, 8, 7]))
    assert a._runner is not b._runner


def test_a_greenlet_ended_while_its_function_runs_is_not_reused():
    """A function suspended in its pull whose greenlet is ended (GreenletExit, as greenlet
    does to a greenlet it collects) runs its `finally` and ends with its greenlet, which
    does not go back to the idle ones."""
    from tt.core import pulled as pulled_module

    closed = []

    def guarded(rows):
        try:
            for r in rows:
                yield r
        finally:
            closed.append(True)

    p = Pulled(guarded)
    p.start()
    assert p.feed(1) == [1]
    p._runner.throw()   # GreenletExit
    assert closed == [True] and p._runner.dead and p._runner not in pulled_module._workers.idle
    q, attributed = drive(running_max, [2, 8])
    assert [o for _, o in attributed] == list(running_max([2, 8])) and q._runner is not p._runner


def test_a_pulled_dropped_mid_function_ends_it_and_frees_its_greenlet():
    """Replay drops a running hooked operator when it restores an instance (a jump back, a
    failed function's restart). Its function, suspended in a pull, must end there and then:
    its `finally` runs and its greenlet and frame are freed, not kept alive by a cycle
    through the Pulled (before, they stayed until the process ended)."""
    import weakref

    from tt.core import pulled as pulled_module

    closed = []

    def guarded(rows):
        big = list(range(1000))   # a frame local that must not outlive the Pulled
        try:
            for r in rows:
                yield r + len(big)
        finally:
            closed.append(True)

    p = Pulled(guarded)
    p.start()
    assert p.feed(1) == [1001]
    runner = weakref.ref(p._runner)
    del p   # no gc.collect(): reference counting alone frees it
    assert closed == [True] and runner() is None
    assert all(not g.dead for g in pulled_module._workers.idle)


def test_close_ends_the_function_as_pyspark_closes_a_generator_it_stops_reading():
    """`take(n)`: the consumer stops pulling; `close` raises GeneratorExit where the function
    waits for its next unit, so its `finally` runs, and it takes nothing more; an exception
    its `finally` raises propagates, and a function that is over is left as it is."""
    events = []

    def numbered(rows):
        try:
            for n, r in enumerate(rows, 1):
                yield (r, n)
        finally:
            events.append("closed")

    p = Pulled(numbered)
    p.start()
    assert p.feed("a") == [("a", 1)] and p.feed("b") == [("b", 2)]
    p.close()
    assert events == ["closed"] and p.finished and not p.failed
    p.close()   # (over already: nothing more)
    assert events == ["closed"]

    def failing_finally(rows):
        try:
            for r in rows:
                yield r
        finally:
            raise ValueError("cleanup failed")

    q = Pulled(failing_finally)
    q.start()
    q.feed(1)
    with pytest.raises(ValueError, match="cleanup failed"):
        q.close()
    assert q.finished and q.failed
