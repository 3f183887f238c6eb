"""Every action of the debugger, once: its keys, footer label, palette entry and help line.

The footer, the key handler, `check_action`, the command palette (Ctrl+P) and
the help screen (`?`) all read this table, so a key, a label or a reason why a
key is greyed cannot differ between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from textual.binding import Binding


class When(Enum):
    """When an action can be taken: what `DebuggerApp.check_action` looks at."""

    ALWAYS = "always"
    ENGINE = "engine"            # the replay engine has loaded and no action runs; greyed otherwise
    STORED = "stored"            # as ENGINE, or no replay here (facts only): then the recorded states
    OVER = "over"                # the step the session allows or refuses from here (`Shown.availability`)
    INTO = "into"
    OUT = "out"
    BACK = "back"
    LIVE = "live"                # a recording runs beside the app; greyed once it finished, hidden without one
    RUNNING = "running"          # an action runs; hidden otherwise
    CANCELLABLE = "cancellable"  # an action runs that Escape can stop (jump, run until, last change, step back)
    WATCHING = "watching"        # an expression is watched

    @property
    def step(self) -> str | None:
        """The key of `Shown.availability` this depends on, for a step."""
        return self.value if self in (When.OVER, When.INTO, When.OUT, When.BACK) else None


@dataclass(frozen=True)
class Action:
    """One action: a binding (or several, one per key), a footer label, a palette entry and a help line."""

    key: str                     # Textual's name of the key the footer shows
    id: str                      # the binding's id
    name: str                    # DebuggerApp.action_<name>
    label: str                   # the footer's word
    tooltip: str = ""
    footer: bool = True
    when: When = When.ALWAYS
    palette: str | None = None   # the command palette's title; None: not in the palette
    palette_help: str = ""       # under the title; {target}, {watch} and {busy} are filled in
    palette_when: When | None = None   # when the palette lists it, if not whenever the key is not hidden
    help: str = ""               # the help screen's line (actions sharing a line: on the first of them)
    help_keys: str = ""          # how the help screen writes the keys, if not as the footer does
    argument: str | None = None  # passed to the action method
    key_display: str | None = None
    group: str | None = None     # the footer shows the keys of a group together, under this label
    other_keys: dict[str, str] = field(default_factory=dict)   # more keys (never in the footer) -> binding id

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.key, *self.other_keys)

    @property
    def binding_action(self) -> str:
        """The action as a binding names it: `step_over`, `view('logs')`."""
        return self.name if self.argument is None else f"{self.name}({self.argument!r})"

    @property
    def keys_on_help(self) -> str:
        return self.help_keys or "  ".join([self.key_display or self.key, *self.other_keys])


def _view(key: str, name: str) -> Action:
    return Action(key, f"view-{name}", "view", name, footer=False, argument=name,
                  palette=f"View: {name}", palette_help=f"show the {name} view",
                  help="views: debug, timeline, scope, logs, plots (at 80×24 one at a time)", help_keys="1 … 5")


ACTIONS = (
    Action("n", "step-over", "step_over", "over", "Step over the selected tuple (its whole scope)",
           when=When.OVER, palette="Step over", palette_help="n · process {target} and its whole scope",
           help="step over: process the tuple and its whole scope"),
    Action("s", "step-into", "step_into", "into", "Step into the selected tuple (its operator only)",
           when=When.INTO, palette="Step into", palette_help="s · only {target}'s operator processes it",
           help="step into: only its operator processes it; its outputs wait downstream"),
    Action("f", "step-out", "step_out", "out", "Finish the scope stepped into last",
           when=When.OUT, palette="Step out", palette_help="f · finish the scope stepped into last",
           help="step out: finish the scope stepped into last"),
    Action("N", "step-back", "step_back", "back",
           "Undo the last action; after a jump, step back over θ's previous input",
           when=When.BACK, palette="Step back",
           palette_help="N, S or F · undo the last action; after a jump, back over θ's previous input",
           help="step back: undo the last action; after a jump, back over θ's previous input",
           other_keys={"S": "step-back-into", "F": "step-back-out"}),
    Action("c", "run-until", "run_until", "run", "Run until a condition holds",
           when=When.ENGINE, palette="Run until…", palette_help="c · go forward until a condition holds",
           help="run until a condition holds, e.g. 'Bob' in FD.blacklist"),
    Action("C", "last-change", "last_change", "last", "Back to the last change of a field",
           when=When.ENGINE, palette="Last change…", palette_help="C · back to just before a field last changed",
           help="go back to the last change of a field, e.g. FD:0.blacklist.Bob"),
    Action("j", "jump", "jump", "jump", "Jump to an interaction",
           when=When.STORED, palette="Jump to interaction…", palette_help="j · replay to an interaction",
           help="jump to an interaction: asks for its number (the timeline's highlighted row filled in); "
                "Enter on a timeline row jumps there"),
    Action("left_square_bracket", "prev-interaction", "prev_interaction", "prev",
           "Jump to the previous interaction", key_display="[", group="prev/next",
           when=When.STORED, palette="Previous interaction", palette_help="[ · jump to the interaction before",
           help="previous / next interaction"),
    Action("right_square_bracket", "next-interaction", "next_interaction", "next",
           "Jump to the next interaction", key_display="]", group="prev/next",
           when=When.STORED, palette="Next interaction", palette_help="] · jump to the interaction after"),
    Action("slash", "search", "search", "find", "Search the state or the logs", key_display="/",
           palette="Search", palette_help="/ · the state tree or the logs",
           help="search: the state tree in the debug view, the logs elsewhere (Esc leaves the search box)"),
    Action("e", "evaluate", "evaluate", "eval",
           "Evaluate an expression over the states here, e.g. len(FD.blacklist)", footer=False,
           palette="Evaluate…", palette_help="e · an expression over the states here, shown once",
           help="evaluate an expression over the states here, e.g. len(FD.blacklist); row is the selected tuple"),
    Action("plus", "watch", "watch", "watch", "Watch an expression: re-evaluated after every action", footer=False,
           key_display="+", palette="Watch…", palette_help="+ · an expression re-evaluated after every action",
           help="watch an expression (re-evaluated after every action, shown above the state); remove the last"),
    Action("minus", "unwatch", "unwatch", "unwatch", "Remove the last watched expression", footer=False,
           key_display="-", palette="Remove watch", palette_help="- · stop watching {watch}",
           palette_when=When.WATCHING),
    Action("w", "why", "why", "why", "Why is this here: what the selected tuple or state value was made from",
           when=When.ENGINE, palette="Why: lineage", footer=False,
           palette_help="w · the tuples {target} or the state field under the cursor was made from",
           help="why: the lineage of the selected tuple, of the state field under the cursor, or of the log row "
                "under the cursor (a sink's rows are its Input log), beside the state (Enter on a leaf goes to "
                "just before it is consumed; w again closes it)"),
    Action("exclamation_mark", "warnings", "warnings", "warnings", "Every warning the recording made",
           footer=False, key_display="!", palette="Recording warnings",
           palette_help="! · every warning the recording made (what a replay may not give back as it ran)",
           help="the recording's warnings, all of them (the message line says the first when the engine is ready)"),
    Action("i", "interact", "interact", "interact", "Take an interaction now (live recording)",
           when=When.LIVE, palette="Take an interaction", palette_help="i · snapshot the running job now",
           help="take an interaction now (only while recording, with `tt record --tui`)"),
    Action("question_mark", "help", "help", "help", "All keys", key_display="?",
           palette="Help", palette_help="? · every key", help="this help"),
    Action("q", "quit", "quit", "quit", "Quit", help="quit"),
    Action("escape", "cancel", "cancel", "cancel", "Cancel the running jump or run-until",
           when=When.RUNNING, palette="Cancel", palette_help="Esc · stop {busy}", palette_when=When.CANCELLABLE,
           help="cancel a running jump or run-until (the position stays where it was)", help_keys="Esc"),
    Action("o", "overlaps", "overlaps", "overlaps", footer=False,
           when=When.ENGINE, palette="Compute scope overlaps", palette_help="o · list θ inputs without step-over",
           help="compute scope overlaps now (large runs skip it at start)"),
    _view("1", "debug"),
    _view("2", "timeline"),
    _view("3", "scope"),
    _view("4", "logs"),
    _view("5", "plots"),
)

BY_KEY = {key: action for action in ACTIONS for key in action.keys}
WHEN = {action.name: action.when for action in ACTIONS}   # (every entry of a name has the same `when`)


def named(*names: str) -> list[Action]:
    return [action for action in ACTIONS if action.name in names]


def bindings() -> list[Binding]:
    """The app's bindings: one per key, in the table's order (the footer's)."""
    out = []
    for action in ACTIONS:
        group = Binding.Group(action.group, compact=True) if action.group else None
        out.append(Binding(action.key, action.binding_action, action.label, show=action.footer,
                           key_display=action.key_display, id=action.id, tooltip=action.tooltip, group=group))
        out.extend(Binding(key, action.binding_action, action.label, show=False, id=id_)
                   for key, id_ in action.other_keys.items())
    return out
