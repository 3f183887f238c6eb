"""How the run evolved: tuples processed and stored state size, interaction by interaction.

A state that keeps growing, or a stretch where few tuples went through, shows
where to jump first. Both series come from the run file alone
(`tt.replay.facts.series`); the session's current interaction is marked.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid
from textual_plotext import PlotextPlot


def _int_ticks(lo: float, hi: float, n: int = 5) -> list[int]:
    """Up to `n` round whole-number ticks covering lo…hi."""
    lo, hi = int(lo), int(-(-hi // 1))
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / (n - 1)
    mag = 10 ** (len(str(int(raw))) - 1) if raw >= 1 else 1
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = lo - lo % step
    return list(range(start, hi + step, step))


class RunPlots(Grid):
    """Two plots over the interactions: tuples processed, state bytes."""

    DEFAULT_CSS = """
    RunPlots { grid-size: 1 2; }
    RunPlots.-wide { grid-size: 2 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.series: list[dict] = []
        self.current: int | None = None

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="plot-tuples")
        yield PlotextPlot(id="plot-states")

    def show(self, series: list[dict], current: int | None = None) -> None:
        self.series = series
        self.current = current
        self._draw()

    def mark(self, current: int | None) -> None:
        if current != self.current:
            self.current = current
            self._draw()

    def _draw(self) -> None:
        ks = [r["k"] for r in self.series]
        for pid, field, title, scale in (("#plot-tuples", "tuples", "tuples processed (all of G(θ))", 1),
                                         ("#plot-states", "state_bytes", "stored state size (KB)", 1024)):
            plot = self.query_one(pid, PlotextPlot)
            plt = plot.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title)
            plt.xlabel("interaction")
            if ks:
                ys = [r[field] / scale for r in self.series]
                plt.plot(ks, ys, marker="braille")
                plt.scatter(ks, ys, marker="dot")
                if len(ks) <= 12:
                    plt.xticks(ks, [str(k) for k in ks])
                ticks = _int_ticks(min(ys), max(ys))
                plt.yticks(ticks, [f"{t:,}" for t in ticks])   # whole numbers, not "799617.0"
                if self.current is not None:
                    plt.vline(self.current, "yellow")
            plot.refresh()
