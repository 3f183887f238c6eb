"""The answer to the last key press: what a step consumed and changed, or why it could not run.

Like gdb's echo area: one or two lines above the footer, replaced by the next
action, so the user always sees the outcome of what they just did (including
a refused step's reason and a replay divergence) without a popup to dismiss.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...core.scopes import operator_of


_UNDONE = {"step_over": "over", "step_into": "into", "step_out": "out of", "jump": "from the jump to",
           "run_until": "from run until", "last_change": "from the last change of", "goto_failure": "from the failure at"}


def headline(action: str, target: str | None) -> str:
    """What an action did, in words: "step over FE:1:48716"; a step back names what it undid,
    "stepped back over FE:1:48716", never the session's internal action names."""
    if action == "step_back":
        if not target:
            return "step back"
        undone, _, what = target.partition(" ")
        return f"stepped back {_UNDONE.get(undone, undone.replace('_', ' '))} {what}".strip()
    return f"{action.replace('_', ' ')} {target or ''}".strip()


class MessageLine(Static):
    """The last outcome; `say` replaces it."""

    DEFAULT_CSS = """
    MessageLine { height: auto; max-height: 2; padding: 0 1; }
    MessageLine.-error { color: $error; }
    MessageLine.-warning { color: $warning; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.plain = ""

    def say(self, text: str | Text, level: str = "info") -> None:
        self.plain = text.plain if isinstance(text, Text) else str(text)
        self.set_class(level == "error", "-error")
        self.set_class(level == "warning", "-warning")
        self.update(text if isinstance(text, Text) else Text(str(text)))   # (a condition's [k] is no markup)

    def result(self, r, timings: bool = True, first: str | None = None) -> None:
        """A `StepResult`."""
        from ...core.values import render

        head = headline(r.action, r.target)
        t = Text()
        if not r.ok:
            t.append(f"✗ {head}: ", style="bold red")
            t.append(r.note or "not possible")
            self.say(t, "warning")
            return
        if r.differs is not None:   # the interaction it ended at replays other states than recorded
            d = r.differs
            t.append(f"! {head}: the replay differs from the recording ", style="bold red")
            def short(v: str) -> str:   # (rendered already)
                return v if len(v) <= 24 else v[:23] + "…"
            t.append(f"at {d['op']}:{d['instance']}.{d['field']}, recorded {short(d['recorded'])}, replayed "
                     f"{short(d['replayed'])}: what is shown is not what ran (tt verify finds where)")
            self.say(t, "error")
            return
        diverged = r.diverged
        if diverged is not None:   # past an interaction where the replay differed: still not what ran
            t.append(f"! {head}", style="bold red")
            t.append(f" · past interaction {diverged['k']}, where the replay differs from the recording "
                     f"({diverged['op']}:{diverged['instance']}.{diverged['field']}): what is shown may not be what ran",
                     style="red")
            self.say(t, "error")
            return
        t.append(f"✓ {head}", style="bold green")
        if r.interaction is not None:
            t.append(f" → at interaction {r.interaction}")
        if timings:
            t.append(f" [{r.seconds * 1000:.0f} ms]", style="dim")
        if r.note and r.action != "step_back":  # ("back to before step_over …": the head says it in words)
            t.append(f" · {r.note}", style="italic")
        if r.consumed:
            t.append(f" · consumed {len(r.consumed)}: {', '.join(r.consumed[:3])}"
                     + (" …" if len(r.consumed) > 3 else ""))
        def show(v) -> str:
            return "∅" if v == "<missing>" else render(v, 24)
        ordered = sorted(r.changed.items(), key=lambda kv: operator_of(kv[0]) != first)
        changes = [f"{inst}.{f[:-2]}: {old}" if f.endswith(".…") else f"{inst}.{f} {show(old)}→{show(new)}"
                   for inst, fields in ordered for f, (old, new) in fields.items()]
        if changes:
            t.append(" · ")
            t.append("; ".join(changes[:3]) + (" …" if len(changes) > 3 else ""), style="yellow")
        self.say(t)
