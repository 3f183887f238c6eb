"""`tt debug`: the Textual app over one run file.

The first screen comes from the run file's facts (the DAG, the interactions,
the stored states at interaction 0), which are cheap to read even in a
gigabyte-sized file; the replay engine (`DebugSession`) loads meanwhile, and
every action on it runs in a worker too, so the UI never blocks. Workers hand
every call into the session to one engine thread (`EngineThread`, which loads
it too): the engine runs users' generators in greenlets, which only the thread
that made them can resume. Long actions show progress and stop on Escape.

Layout: at 80×24 one view at a time (debug: DAG, pending tuples and state;
timeline; scope; logs; plots), switched with 1…5; from 140×40 up the debug
view puts DAG and timeline, pending tuples and scope, and the state side by
side. Keys follow pudb and gdb's single-key mode (n s f, N S F back, c C j [ ]
/ ? q); the footer lists them, greyed when the selected tuple does not allow
them, and the command palette (Ctrl+P) has every action with the reason.
"""

from __future__ import annotations

import threading
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.containers import Container, Horizontal, Vertical
from textual.events import Key, Resize
from textual.screen import Screen
from textual.widgets import Footer, Header, Input
from textual.worker import get_current_worker

from ..core.errors import RunFileError, TTError, UsageError
from ..core.scopes import TupleRef, operator_of
from ..replay import facts, state_paths
from ..store.reader import RunReader, ranges
from . import actions, layout
from .actions import When
from .help_screen import HelpScreen
from .messages import (ActionDone, ActionProgress, LineageReady, OverlapsReady, Report, RunPolled, Say,
                       SelectionShown, SeriesLoaded, SessionFailed, SessionReady, TupleFetched, WatchesEvaluated)
from .engine_thread import EngineThread
from .model import PENDING_PER_INSTANCE, Model, Shown
from .prompt_screen import PromptScreen
from .tuple_screen import TupleScreen
from .warnings_screen import WarningsScreen
from .widgets.availability_line import AvailabilityLine
from .widgets.dag_view import DagEdge, DagNode, DagView
from .widgets.lineage_tree import LineageTree, outline
from .widgets.log_browser import LogBrowser
from .widgets.message_line import MessageLine
from .widgets.pending_tuples import PendingTuples
from .widgets.plots import RunPlots
from .widgets.progress_line import ProgressLine
from .widgets.scope_view import ScopeView
from .widgets.state_inspector import StateInspector
from .widgets.timeline import InteractionTimeline
from .widgets.view_bar import ViewBar
from .widgets.watch_list import WatchList, format_values

WIDE = layout.WIDE   # from this size up, the debug view shows its panes side by side
BUSY_AFTER = 0.15  # seconds an action runs before the progress line and the footer say "busy"
FOOTER = [action.name for action in actions.ACTIONS if action.footer]


class LiveJob:
    """What the app needs from a recording running beside it (`tt record --tui`)."""

    def __init__(self) -> None:
        self.finished = False
        self.outcome: str | None = None
        self.output: list[str] = []   # what the job printed while the app was open
        self.coordinator: Callable[[], Any] = lambda: None

    def interact(self) -> str:
        coord = self.coordinator()
        if self.finished:
            return "the job has finished; no more interactions can be taken"
        if coord is None:
            return "the job has not started its dataflow yet; try again in a moment"
        coord.interaction("user", {"via": "tui"})
        return "interaction requested; it appears in the timeline once every instance has taken it"


class DebuggerApp(App):
    """The terminal debugger over one run file."""

    CSS_PATH = "debugger.tcss"
    TITLE = "tt debug"

    BINDINGS = actions.bindings()

    def __init__(self, path: str | Path, *, trust: bool = False, live: LiveJob | None = None,
                 poll_seconds: float = 1.0, timings: bool = True) -> None:
        """`timings=False` leaves out how long actions took (for reproducible screenshots)."""
        super().__init__()
        self.timings = timings
        self.path = Path(path)
        self.trust = trust
        self.live = live
        self.poll_seconds = poll_seconds
        self.reader: RunReader | None = None
        self.model: Model | None = None
        self.shown: Shown | None = None
        self.view = "debug"
        self.watches: list[str] = []   # expressions re-evaluated after every action (+, -)
        self._lineage = None           # `w`: the session's Lineage (its own replay), made on first use
        self._job_announced = False    # `tt record --tui` said how the job ended (job_finished)
        self._note_after: str | None = None   # said when the running action's result is shown
        self.wide = False
        self.status = "?"
        self.busy: str | None = None
        self.cancellable = False
        self.cancel_event = threading.Event()
        self.engine_thread = EngineThread()   # loads the session and runs every call into it (`_open_session`)
        self.interactions: list[dict] = []
        self.session_error: str | None = None
        self.selected_op: str | None = None
        self.selected_ref: TupleRef | None = None
        self.theta: str | None = None
        self._facts_loaded = False
        self._stored_k: int | None = None   # facts only: the interaction whose stored states are shown
        self._series_loaded = False
        self._poll_timer = None
        self._poll_reader: RunReader | None = None
        self._last_progress = 0.0
        self._bindings_shown: tuple | None = None
        self._busy_timer = None
        self._term_size: tuple[int, int] | None = None   # the size of the last resize event
        self._asking = 0          # prompts opened by an action whose answer has not been handled yet
        self._rows_seen: dict[TupleRef, Any] = {}        # rows of tuples seen waiting (the inputs of a step)
        self._unhandled: set[Report] = set()              # reports posted by workers, not yet handled

    # --- building the screen ----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="⏪")
        yield ProgressLine(id="progress")
        yield ViewBar(id="views")
        with Container(id="main"):
            with Horizontal(id="debug-area"):
                with Vertical(id="col-run", classes="column"):
                    yield DagView(id="dag", classes="pane")
                    yield InteractionTimeline(id="timeline", classes="pane")
                with Vertical(id="col-tuples", classes="column"):
                    yield PendingTuples(id="pending", classes="pane")
                    yield AvailabilityLine(id="avail")
                    yield ScopeView(id="scope", classes="pane")
                with Vertical(id="col-state", classes="column"):
                    yield WatchList(id="watch", classes="pane")
                    yield LineageTree(id="why", classes="pane")
                    yield StateInspector(id="state", classes="pane")
            yield LogBrowser(self.path, trust=self.trust, id="logs")
            yield RunPlots(id="plots")
        yield MessageLine(id="message")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#dag").border_title = "dataflow"
        self.query_one("#timeline").border_title = "interactions"
        self.query_one("#pending").border_title = f"waiting tuples · {PendingTuples.LEGEND}"
        self.query_one("#scope").border_title = "scope"
        self.query_one("#state").border_title = "state"
        self.query_one("#why").display = False
        self._apply_layout()
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_published, immediate=True)
        self._load_facts()
        if self.live is not None or self.status == "recording":
            self._poll_timer = self.set_interval(self.poll_seconds, self._poll)
        if self.live is not None:  # the job's own prints: kept, and shown when the app closes
            self.begin_capture_print(self, stdout=True, stderr=False)
        if self._facts_loaded:
            self._open_session()

    def on_unmount(self) -> None:
        """The app is closing: stop a cancellable action, and let every worker still waiting for the engine
        thread go (the thread is a daemon: an action that cannot be cancelled never holds up the exit)."""
        self.cancel_event.set()
        self.engine_thread.close()

    # --- layout -----------------------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self._term_size = (event.size.width, event.size.height)   # self.size may still be the old one
        self._apply_layout()

    def _apply_layout(self) -> None:
        arrangement = layout.arrange(*(self._term_size or self.size), self.view)
        self.wide = arrangement.wide
        for selector, classes in arrangement.classes.items():
            widget = self.query_one(selector)
            for name, on_ in classes.items():
                widget.set_class(on_, name)
        for selector, on_ in arrangement.display.items():
            self.query_one(selector).display = on_
        live = ""
        if self.status == "recording":
            live = "[bold green]● live[/]"
        self.query_one(ViewBar).show(arrangement.views, arrangement.view, live)
        if arrangement.view == "logs":
            self.query_one(LogBrowser).start()
        if arrangement.view == "plots":
            self._load_series()

    def action_view(self, name: str) -> None:
        """Show a view; in the wide layout the timeline and the scope are panes of the debug view: focus them."""
        self.view = layout.shown_view(name, self.wide)
        self._apply_layout()
        target = {"debug": "#pending", "timeline": "#timeline", "scope": "#scope-tree", "logs": "#log-lines"}.get(name)
        if target:
            try:
                self.query_one(target).focus()
            except Exception:
                pass
        if self.wide and name in ("timeline", "scope"):   # (no view of its own to switch to: say where it is)
            pane = "interactions" if name == "timeline" else "scope"
            self._say(f"at this size the {name} is the {pane} pane of the debug view (1): it has the focus")

    # --- facts (no replay) ------------------------------------------------------------------------

    def _load_facts(self) -> bool:
        """Read what the run file says outright; False while a live run has not started its dataflow."""
        try:
            if self.reader is None:
                self.reader = RunReader(self.path)
            else:
                self.reader.refresh()  # a live run: the plan may have been written since
            reader = self.reader
            self.status = reader.status
            plan = reader.plan
            ops = reader.operators
        except RunFileError as e:
            if (self.live is not None and not self.live.finished) or self.status == "recording":
                self.query_one(ProgressLine).show_text(Text("waiting for the job to start its dataflow…", style="italic"))
                return False
            # the run ended before its dataflow started: nothing will come, so nothing waits (is_idle)
            self.session_error = str(e)
            if not self._job_announced:   # (a live job's end, said already, names why)
                self.query_one(MessageLine).say(str(e), "error")
            self.query_one(ProgressLine).show_text(Text("no dataflow ran: nothing to replay", style="italic"))
            if self._poll_timer is not None:
                self._poll_timer.stop()
                self._poll_timer = None
            return False
        theta = next((o for o in ops if o.is_theta), None)
        self.theta = theta.name if theta else None
        if self.selected_op is None:
            self.selected_op = self.theta
        spark_edges = plan.get("spark_edges", [])   # Spark, between two hooked operators (docs/HOOKS.md)
        notes = {e["dst"]: f"Spark: {e['label']}" for e in spark_edges}
        warnings = reader.warnings()   # ("NAME: ..." or "NAME (...) ...": the operator it concerns)
        nodes = [DagNode(o.id, o.name, o.kind, o.in_g, o.is_theta, o.instances, notes.get(o.id, ""),
                         any(w.startswith((f"{o.name}: ", f"{o.name} (")) for w in warnings))
                 for o in ops]
        edges = [DagEdge(e["src"], e["dst"], bool(e["shuffle"])) for e in plan.get("edges", [])]
        edges += [DagEdge(e["src"], e["dst"], True) for e in spark_edges]
        dag = self.query_one(DagView)
        dag.set_graph(nodes, edges)
        self.query_one(StateInspector).origins = {   # where a streaming query's instances ran
            facts.label(reader, o.id, i): where for o in ops for i in range(o.instances)
            if (where := facts.origin(reader, o.id, i))}
        self._refresh_interactions()
        self._update_title()
        if not self._facts_loaded:
            self._facts_loaded = True
            self._initial_state()
        return True

    def _update_title(self) -> None:
        status = self.status
        self.sub_title = f"{self.path.name} · {status}" + (f" · θ = {self.theta}" if self.theta else "")
        self._apply_layout()

    def _refresh_interactions(self) -> bool:
        reader = self.reader
        return self._set_interactions(facts.interactions(reader), reader.checkpointed())

    def _set_interactions(self, rows: list[dict], checkpointed: set[int]) -> bool:
        """Show `rows` (facts.interactions) in the timeline; True if any interaction appeared or completed."""
        self.query_one(InteractionTimeline).live = self.status == "recording"
        changed = [(r["k"], r["complete"]) for r in rows] != [(r["k"], r["complete"]) for r in self.interactions]
        self.interactions = rows
        self.query_one(InteractionTimeline).set_interactions(rows, checkpointed)
        if changed and self._series_loaded:
            self._series_loaded = False
            if self.view == "plots":
                self._load_series()
        return changed

    def _totals(self) -> tuple[int, dict[str, int]]:
        complete = [r for r in self.interactions if r["complete"]]
        if not complete:
            return 0, {}
        last = complete[-1]["positions"]
        return sum(last.values()), last

    def _initial_state(self) -> None:
        """Before the engine is loaded: the stored states at interaction 0, and position 0."""
        total, _ = self._totals()
        first = next((r for r in self.interactions if r["complete"]), None)
        self.query_one(DagView).set_counts(_per_operator(first["positions"]) if first is not None else {})
        self.query_one(InteractionTimeline).set_current(first["k"] if first else None)
        self.query_one(ProgressLine).show_position(first["k"] if first else None, None, 0, total, 0.0,
                                                   "loading the replay engine…")
        self.query_one(AvailabilityLine).waiting("loading the replay engine…")
        if first is not None and self.selected_op is not None:
            self._initial_state_for(self.selected_op)
            self.query_one("#state").border_title = f"state of {self.selected_op}"

    # --- the session ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="open", exit_on_error=False)
    def _open_session(self) -> None:
        """Load the session on the engine thread (loading replays) and wait for it here, off the UI thread."""
        from ..replay.session import DebugSession

        op = self.selected_op

        def open_() -> tuple[Model, Shown, Any]:
            session = DebugSession(self.path, trust=self.trust)
            model = Model(session, self.engine_thread)
            failed = session.failure
            if failed is not None and failed.steppable:  # post-mortem: open just before the failing tuple
                session.goto_failure()
                return model, model.build(failed.op, session.parse_ref(failed.label)), failed
            return model, model.build(op, None), failed

        try:
            model, shown, failed = self.engine_thread.call(open_)
        except TTError as e:
            self._report(SessionFailed(str(e)))
            return
        except Exception as e:  # a bug in tt: keep the UI, say what happened
            traceback.print_exc()
            self._report(SessionFailed(f"internal error: {type(e).__name__}: {e}"))
            return
        self._report(SessionReady(model, shown, failed))
        overlaps = model.compute_overlaps()
        if overlaps is not None:
            self._report(OverlapsReady())

    @on(SessionReady)
    def _session_ready(self, report: SessionReady) -> None:
        self.model = report.model
        self._show_position(report.shown)
        failed = report.failure
        if failed is not None and failed.steppable:
            self.query_one(MessageLine).say(f"the run failed at {failed.label}: {failed.error} · you are just "
                                            f"before it · s re-raises it", "warning")
        elif failed is not None:
            self.query_one(MessageLine).say(f"the run failed at {failed.label}: {failed.error} · {failed.reason}",
                                            "warning")
        elif report.model.session.engine.zone_note:   # (local time here cannot be the workers')
            self.query_one(MessageLine).say(f"replay engine ready · {report.model.session.engine.zone_note}", "warning")
        elif warned := self.reader.warnings():   # what the replay may not give back as it ran, said where it is used
            more = f" (and {len(warned) - 1} more: ! lists them)" if len(warned) > 1 else ""
            self.query_one(MessageLine).say(f"replay engine ready · the recording warned: {warned[0]}{more}", "warning")
        else:
            self.query_one(MessageLine).say("replay engine ready · n/s step · j jump · c run until · ? help")

    @on(SessionFailed)
    def _session_failed(self, report: SessionFailed) -> None:
        message = self.session_error = report.message
        self.query_one(MessageLine).say(f"cannot replay: {message}; browsing the recorded facts only", "error")
        self.query_one(AvailabilityLine).waiting("no replay: " + message)
        self.query_one(ProgressLine).show_text(Text("no replay engine (facts only)", style="italic"))

    @on(OverlapsReady)
    def _overlaps_ready(self) -> None:
        if self.busy:  # what the running action shows is built with them; a reselect now would apply a stale op
            return
        self._reselect()

    def _show_where(self, shown: Shown) -> None:
        """The progress line: where the replay stands."""
        p = shown.progress
        last = self._last_interaction(shown.position) if shown.interaction is None else None
        note = f"inside {' › '.join(shown.scope_stack)}" if shown.scope_stack else ""
        self.query_one(ProgressLine).show_position(shown.interaction, last, p["tuples"], p["total"], p["percent"], note)

    def _show_position(self, shown: Shown) -> None:
        if len(self._rows_seen) > 2000:
            self._rows_seen.clear()
        self._rows_seen.update((p.ref, p.row) for p in shown.pending if not p.end)
        self.shown = shown
        self.selected_ref = shown.selected
        self.selected_op = shown.op
        dag = self.query_one(DagView)
        dag.set_counts(shown.counts)
        with self.prevent(DagView.OperatorSelected):
            dag.select_name(shown.op)
        self.query_one(InteractionTimeline).set_current(shown.interaction)
        self._show_where(shown)
        self.query_one(PendingTuples).show(shown.pending, shown.selected, shown.default, shown.to_come)
        self.query_one(AvailabilityLine).show(shown.selected_label, shown.availability)
        ops = self.reader.operators if self.reader else []
        in_g = next((o.in_g for o in ops if o.name == shown.op), True)
        note = "" if in_g else f"{shown.op} is not in G(θ) (θ = {self.theta}): its state is not recorded"
        self.query_one(StateInspector).show(shown.op, shown.states, shown.changes, note=note)
        self.query_one("#state").border_title = f"state of {shown.op}" + (" · changes highlighted" if shown.changes else "")
        overlap_count = None if shown.overlaps is None else len(shown.overlaps)
        self.query_one(ScopeView).show(shown.selected_label, shown.scope, shown.scope_truncated, shown.availability,
                                       shown.overlaps, overlap_count)
        self.query_one(RunPlots).mark(shown.interaction)
        self._sync_bindings()

    def _last_interaction(self, position: dict[str, int]) -> int | None:
        """The last interaction the replay is past: every instance at or after where it stood
        there. (Summed over the instances, a replay that ran one operator ahead, which a run-until
        on another may do, was said to be after interactions the other had not reached.)"""
        best = None
        for r in self.interactions:
            if r["complete"] and all(position.get(label, 0) >= n for label, n in r["positions"].items()):
                best = r["k"]
        return best

    # --- running actions ----------------------------------------------------------------------------

    IDLE_EXEMPT = {"poll"}   # worker groups that run on their own (following a live run)

    @property
    def is_idle(self) -> bool:
        """Nothing is under way: the engine is loaded (or failed), no action, answer, worker or report is pending.

        Tests (and snapshots) wait on this rather than on time: it is False from the
        moment a key starts an action (or opens its prompt) until its result is on screen."""
        from textual.worker import WorkerState

        if self.model is None and self.session_error is None:
            return False
        if self.busy or self._unhandled or (self._asking and not isinstance(self.screen, PromptScreen)):
            return False   # (a prompt on screen waits for the user; once answered, the action is under way)
        return not any(w.state in (WorkerState.PENDING, WorkerState.RUNNING)
                       for w in self.workers if w.group not in self.IDLE_EXEMPT)

    def _ask(self, screen: PromptScreen, answered: Callable[[str | None], None]) -> None:
        """Open a prompt; until its answer has been handled the app is not idle."""
        self._asking += 1

        def done(value: str | None) -> None:
            try:
                answered(value)
            finally:
                self._asking -= 1
        self.push_screen(screen, done)

    def _report(self, report: Report) -> None:
        """From a worker: hand `report` to the UI thread; the app is not idle until it has been handled."""
        self._unhandled.add(report)
        if not self.post_message(report):   # the app is closing
            self._unhandled.discard(report)

    @on(Report)
    def _report_handled(self, report: Report) -> None:
        """After the report's own handler (Textual calls the handlers of a message's class before its base's)."""
        self._unhandled.discard(report)

    @on(Say)
    def _said(self, report: Say) -> None:
        self._say(report.text, report.level)

    def _say(self, text: str | Text, level: str = "info") -> None:
        self.query_one(MessageLine).say(text, level)

    def _can_act(self) -> bool:
        if self.model is None:
            self._say(self.session_error and f"no replay: {self.session_error}" or
                      "the replay engine is still loading…", "warning")
            return False
        if self.busy:
            self._say(f"busy: {self.busy} (Esc cancels)", "warning")
            return False
        return True

    def _start(self, label: str, fn: Callable, select_after=None,
               cancellable: bool = False) -> None:
        """Run `fn(session, progress, cancel)` in a worker; what it leaves replaces the screen.

        `cancellable`: the session action takes the cancel event (jump, run until)."""
        if not self._can_act():
            return
        self.busy = label
        self.cancellable = cancellable
        self.cancel_event = threading.Event()
        # A step takes tens of milliseconds: showing "busy" and greying the footer for it would only
        # flicker (and re-laying the footer costs more than the step). Long actions show it after a beat.
        self._last_progress = time.perf_counter() + BUSY_AFTER - 0.1
        self._busy_timer = self.set_timer(BUSY_AFTER, lambda: self._show_busy(label, cancellable))
        self._act_worker(label, fn, select_after, self.cancel_event)

    def _show_busy(self, label: str, cancellable: bool) -> None:
        if self.busy != label:  # the timer fired after the action had finished: never show a stale bar
            return
        if not self.is_running:  # (a timer can fire while the app shuts down and its widgets go)
            return
        self.query_one(ProgressLine).busy(label, cancellable=cancellable)
        self._sync_bindings()

    def _sync_bindings(self) -> None:
        """Ask the footer to redraw only when what it shows would change (a redraw re-mounts every key)."""
        shown = tuple(self.check_action(name, ()) for name in FOOTER)
        if shown != self._bindings_shown:
            self.refresh_bindings()

    def _bindings_published(self, _screen) -> None:
        self._bindings_shown = tuple(self.check_action(name, ()) for name in FOOTER)

    @work(thread=True, group="session", exit_on_error=False)
    def _act_worker(self, label: str, fn: Callable, select_after, cancel: threading.Event) -> None:
        from ..core.errors import Cancelled

        model = self.model
        op, ref = self.selected_op, self.selected_ref
        cancellable = self.cancellable
        engine, run_total = model.call(lambda s: (s.engine,
                                                  sum(inst.tuple_total for inst in s.engine.instances.values())))

        def progress(done: int, total: int) -> None:
            # The session's ticker passes a running count of this action's steps (and, for a jump, how
            # many it will take); a run-until or last-change may also restart from an earlier point. What
            # the user wants is where the replay stands in the run: read it off the engine (this runs on
            # the engine thread, inside the action, so the read is consistent). Esc sets `cancel`, and the
            # ticker raises `Cancelled` there; this worker gets it from `model.act`.
            now = time.perf_counter()
            if now - self._last_progress >= 0.1 and not cancel.is_set():
                self._last_progress = now
                at = sum(inst.tuples for inst in engine.instances.values())
                self._report(ActionProgress(label, at, run_total, cancellable))

        shown, message, level = None, None, "info"
        try:
            shown = model.act(lambda s: fn(s, progress, cancel), op, ref, select_after)
        except Cancelled:
            message, level = f"{label}: cancelled; the position is where it was", "warning"
            shown = model.select(op, ref)
        except TTError as e:
            message, level = f"{label}: {e}", "error"
            shown = model.select(op, ref)
        except Exception as e:  # a bug in tt: keep the session usable
            traceback.print_exc()
            message, level = f"{label}: internal error: {type(e).__name__}: {e}", "error"
            try:
                shown = model.select(op, ref)
            except Exception:
                shown = None
        self._report(ActionDone(shown, message, level))

    @on(ActionProgress)
    def _action_progress(self, report: ActionProgress) -> None:
        if not self.cancel_event.is_set():   # (the progress line says "cancelling…" by then)
            self.query_one(ProgressLine).busy(report.label, report.done, report.total, report.cancellable)

    @on(ActionDone)
    def _action_done(self, report: ActionDone) -> None:
        shown, message = report.shown, report.message
        self.busy = None
        self._busy_timer.stop()
        self.query_one(ProgressLine).idle()
        if shown is not None:
            self._show_position(shown)
            if message is None and shown.result is not None:
                self.query_one(MessageLine).result(shown.result, timings=self.timings, first=shown.op)
        if message is not None:
            self._say(message, report.level)
        elif self._note_after is not None:   # what the action wants said once it is shown (`w`'s jump)
            self._say(self._note_after)
        self._note_after = None
        self._sync_bindings()
        if self.watches:
            self._watch_worker(list(self.watches))

    def _reselect(self) -> None:
        if self.model is not None:
            self._select_worker(self.selected_op, self.selected_ref)

    @work(thread=True, exclusive=True, group="select", exit_on_error=False)
    def _select_worker(self, op: str | None, ref: TupleRef | None) -> None:
        """A newer selection cancels this one: if it has by the time the engine thread is free, skip it."""
        model = self.model
        worker = get_current_worker()
        try:
            shown = model.call(lambda s: None if worker.is_cancelled else model.select(op, ref))
        except TTError as e:
            self._report(Say(str(e), "error"))
            return
        if shown is not None and not worker.is_cancelled:
            self._report(SelectionShown(shown))

    @on(SelectionShown)
    def _selection_shown(self, report: SelectionShown) -> None:
        self._show_position(report.shown)

    # --- selections ---------------------------------------------------------------------------------

    @on(DagView.OperatorSelected)
    def _operator_selected(self, event: DagView.OperatorSelected) -> None:
        self.selected_op = event.name
        if self.model is not None:
            self._select_worker(event.name, self.selected_ref)
        elif self.reader is not None and self._facts_loaded:
            self._initial_state_for(event.name)
        if event.chosen and not self.wide and self.view != "debug":
            self.action_view("debug")

    def _initial_state_for(self, op: str) -> None:
        first = next((r for r in self.interactions if r["complete"]), None)
        k = self._stored_k if self._stored_k is not None else first["k"] if first is not None else None
        states = {}
        if k is not None:
            try:
                states = {key: v["state"] for key, v in facts.states_at(self.reader, k, op).items()}
            except TTError as e:
                self.query_one(StateInspector).show(op, {}, {}, note=str(e))
                return
        self.query_one(StateInspector).show(op, states, {}, note=f"stored state at interaction {k}"
                                            if k is not None else "")

    def _show_stored(self, k: int) -> None:
        """Facts only: interaction k as recorded (its instances' positions and stored states), where
        a jump cannot replay to it."""
        row = next((r for r in self.interactions if r["k"] == k), None)
        if row is None or not row["complete"]:
            complete = [r["k"] for r in self.interactions if r["complete"]]
            return self._say(f"no complete interaction {k} (complete: {ranges(complete) or 'none'})", "warning")
        self._stored_k = k
        self.query_one(DagView).set_counts(_per_operator(row["positions"]))
        self.query_one(InteractionTimeline).set_current(k)
        if self.selected_op is not None:
            self._initial_state_for(self.selected_op)
        self._say(f"stored state at interaction {k}: no replay here, so no steps; what is shown is what the "
                  f"recording stored", "warning")

    @on(PendingTuples.TupleSelected)
    def _tuple_selected(self, event: PendingTuples.TupleSelected) -> None:
        self.selected_ref = event.ref
        if self.model is not None:
            self._select_worker(self.selected_op, event.ref)

    @on(InteractionTimeline.JumpRequested)
    def _timeline_jump(self, event: InteractionTimeline.JumpRequested) -> None:
        self._jump(event.k)

    # --- a tuple in full ----------------------------------------------------------------------------

    @on(PendingTuples.TupleChosen)
    def _pending_chosen(self, event: PendingTuples.TupleChosen) -> None:
        self._show_tuple(event.ref, None)

    @on(ScopeView.TupleChosen)
    def _scope_chosen(self, event: ScopeView.TupleChosen) -> None:
        self._show_tuple(None, event.label)

    def _show_tuple(self, ref: TupleRef | None, label: str | None) -> None:
        if not self._can_act():
            return
        rows = dict(self._rows_seen)
        for p in self.shown.pending if self.shown else []:
            rows[p.ref] = p.row
        self._tuple_worker(ref, label, rows)

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def _tuple_worker(self, ref: TupleRef | None, label: str | None, rows: dict) -> None:
        """The tuple's row and, when another operator emitted it, the input that operator was processing."""
        model = self.model

        def fetch(s):
            r = ref if ref is not None else s.parse_ref(label)
            row = rows[r] if r in rows else s.payload(r)
            origin = s.provenance.origin(r)
            if origin is None:
                return s.label(r), row, None, None
            before = rows[origin] if origin in rows else s.payload(origin)
            return s.label(r), row, s.label(origin), before
        try:
            name, row, origin, before = model.call(fetch)
        except TTError as e:
            self._report(Say(f"cannot show {label or ref}: {e}", "error"))
            return
        except Exception as e:  # a bug in tt: say so, keep the session
            traceback.print_exc()
            self._report(Say(f"cannot show {label or ref}: internal error: {type(e).__name__}: {e}", "error"))
            return
        self._report(TupleFetched(name, row, origin, before))

    @on(TupleFetched)
    def _tuple_fetched(self, report: TupleFetched) -> None:
        name, origin = report.label, report.origin
        if origin is None:
            screen = TupleScreen(f"{name}", report.row)
        else:
            # side by side: what the emitting operator consumed, and this tuple (what it emitted)
            screen = TupleScreen(f"{name} · emitted by {operator_of(origin)} processing {origin}", report.before,
                                 outputs=[(name, report.row)],
                                 note="fields the operator added first, changed values in yellow · Esc returns")
        self.push_screen(screen)

    # --- actions ----------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self._available(actions.WHEN.get(action, When.ALWAYS))

    def _available(self, when: When) -> bool | None:
        """True: the action can be taken; None: not now (the footer greys its key); False: hidden."""
        if when.step is not None:
            if self.model is None or self.shown is None or self.busy:
                return None
            return True if self.shown.availability[when.step].ok else None
        if when is When.ENGINE:
            return None if (self.model is None or self.busy) else True
        if when is When.STORED:
            return True if self._facts_only() else None if (self.model is None or self.busy) else True
        if when is When.LIVE:
            if self.live is None:
                return False
            return None if self.live.finished else True
        if when is When.RUNNING:
            return bool(self.busy)
        if when is When.CANCELLABLE:
            return bool(self.busy and self.cancellable)
        if when is When.WATCHING:
            return bool(self.watches)
        return True

    def on_key(self, event: Key) -> None:
        """A disabled key (a step, one that needs the replay engine, `i` without a recording beside
        the app) says why instead of doing nothing."""
        action = actions.BY_KEY.get(event.key)
        if action is None or self.check_action(action.name, ()):
            return
        if isinstance(self.screen, (PromptScreen, HelpScreen, WarningsScreen)) or isinstance(self.focused, Input):
            return
        if action.when.step is not None:
            self._explain(action.name)
        elif action.when in (When.ENGINE, When.STORED):   # (a jump, run-until, why: no replay here, or one under way)
            self._can_act()
        elif action.when is When.LIVE and not isinstance(self.screen, TupleScreen):
            self._say(self._why_no_interaction(), "warning")

    def _explain(self, action: str) -> None:
        if not self._can_act():
            return
        step = actions.WHEN[action].step
        a = self.shown.availability[step] if self.shown else None
        if a is not None and not a.ok:
            # over and into act on the selected tuple; out and back on what was done last
            target = self.shown.selected_label if step in ("over", "into") else None
            self._say(Text.assemble((" ".join(filter(None, ("✗", action.replace("_", " "), target))) + ": ",
                                     "bold red"), a.reason), "warning")

    def _ref_for_step(self) -> TupleRef | None:
        return self.selected_ref or (self.shown.default if self.shown else None)

    def action_step_over(self) -> None:
        ref = self._ref_for_step()
        if ref is None:
            return self._say("no tuple is waiting", "warning")
        self._start("step over", lambda s, p, c: s.step_over(ref), select_after=_after_step)

    def action_step_into(self) -> None:
        ref = self._ref_for_step()
        if ref is None:
            return self._say("no tuple is waiting", "warning")
        self._start("step into", lambda s, p, c: s.step_into(ref), select_after=_after_step)

    def action_step_out(self) -> None:
        self._start("step out", lambda s, p, c: s.step_out(), select_after=_after_step)

    def action_step_back(self) -> None:
        self._start("step back", lambda s, p, c: s.step_back(p, c), select_after=_after_step, cancellable=True)

    def _facts_only(self) -> bool:
        """No replay engine here (it could not load): the app browses the recorded facts."""
        return self.model is None and bool(self.session_error)

    def action_jump(self) -> None:
        if not self._facts_only() and not self._can_act():
            return
        # Always ask, even on the timeline: `j 0 Enter` must land on interaction 0 wherever the cursor
        # is. The highlighted row's k is filled in (typing replaces it), so `j Enter` jumps there.
        timeline = self.query_one(InteractionTimeline)
        complete = [r["k"] for r in self.interactions if r["complete"]]
        hint = f"complete interactions: {ranges(complete) or 'none'}"
        default = timeline.highlighted_k
        self._ask(PromptScreen("Jump to interaction", hint, "" if default is None else str(default)),
                  self._jump_answer)

    def _jump_answer(self, text: str | None) -> None:
        if text is None:
            return
        try:
            k = int(text.strip().lstrip("Ii"))
        except ValueError:
            self._say(f"jump takes an interaction number, not {text!r}", "error")
            return
        self._jump(k)

    def _jump(self, k: int) -> None:
        self.query_one(InteractionTimeline).highlight(k)
        if self._facts_only():
            return self._show_stored(k)
        self._start(f"jump to {k}", lambda s, p, c: s.jump(k, progress=p, cancel=c), select_after=_after_step,
                    cancellable=True)

    def _neighbour(self, direction: int) -> int | None:
        complete = [r for r in self.interactions if r["complete"]]
        if not complete:
            return None
        ks = [r["k"] for r in complete]
        at = self.shown.interaction if self.shown else self._stored_k if self._stored_k is not None else ks[0]
        if at is not None and at in ks:
            i = ks.index(at) + direction
            return ks[i] if 0 <= i < len(ks) else None
        last = self._last_interaction(self.shown.position) if self.shown else None   # (between two: the one it is past)
        if direction < 0:
            return last
        after = [k for k in ks if last is None or k > last]
        return after[0] if after else None

    def action_prev_interaction(self) -> None:
        k = self._neighbour(-1)
        if k is None:
            return self._say("no earlier interaction", "warning")
        self._jump(k)

    def action_next_interaction(self) -> None:
        k = self._neighbour(1)
        if k is None:
            at = self.shown.interaction if self.shown else None
            coming = [r["k"] for r in self.interactions if not r["complete"] and (at is None or r["k"] > at)]
            if coming and self.status == "recording":
                return self._say(f"interaction {coming[0]} is still being taken (not every instance has reported "
                                 f"its state yet); try again in a moment", "warning")
            return self._say("no later interaction", "warning")
        self._jump(k)

    def action_run_until(self) -> None:
        if not self._can_act():
            return
        self._ask(PromptScreen("Run until (a Python condition, checked after every tuple)",
                               self._condition_hint(), getattr(self, "_last_condition", "")),
                  self._run_until_answer)

    def _condition_hint(self) -> str:
        names = [o.name for o in (self.reader.operators if self.reader else []) if o.in_g and not o.is_theta]
        op = self.selected_op if self.selected_op in names else (names[0] if names else self.theta)
        field = next(iter(self.shown.states.get(next(iter(self.shown.states), ""), {}) or {}), "field") \
            if self.shown and self.shown.op == op else "field"
        return (f"names: row (the tuple just consumed), op, instance, position, and operators: "
                f"{', '.join(o.name for o in self.reader.operators if o.in_g)}.  e.g. "
                f"len({op}.{field}) > 0   ·   row['id'] == 42   ·   {op}[0].{field}")

    def _run_until_answer(self, text: str | None) -> None:
        if text is None:
            return
        self._last_condition = text
        self._start(f"run until {text}", lambda s, p, c: s.run_until(text, progress=p, cancel=c),
                    select_after=_after_run_until, cancellable=True)

    def action_last_change(self) -> None:
        if not self._can_act():
            return
        default = getattr(self, "_last_field", "")
        node = self.query_one(StateInspector).tree.cursor_node
        if node is not None and node.data is not None and not node.data.more and node.data.path \
                and node.data.path[-1] != "…":
            default = ".".join([node.data.instance, *map(str, state_paths.field_path(node.data.path))])
        self._ask(PromptScreen("Back to the last change of", "OP:INSTANCE.FIELD[.KEY], e.g. "
                               f"{(self.shown.op if self.shown else 'FD')}:0.{'field'} (the state tree's cursor "
                               "fills it in)", default), self._last_change_answer)

    def _last_change_answer(self, text: str | None) -> None:
        if text is None:
            return
        instance, _, field = text.partition(".")
        if not field:
            self._say(f"write OP:INSTANCE.FIELD, e.g. FD:0.blacklist, not {text!r}", "error")
            return
        self._last_field = text
        def select_after(session, result):
            """Show the operator, with the tuple that will redo the change selected."""
            nxt = next((p.ref for p in session.pending(instance, limit=1) if p.next), None) \
                if result is not None and result.ok else None
            return operator_of(instance), nxt
        self._start(f"last change of {text}", lambda s, p, c: s.last_change(instance, field, p, c),
                    select_after=select_after, cancellable=True)

    # --- evaluating and watching expressions ---------------------------------------------------------

    def _expression_hint(self) -> str:
        names = ", ".join(o.name for o in self.reader.operators if o.in_g) if self.reader else ""
        shown = self.shown
        state = next(iter(shown.states.values()), None) if shown is not None and shown.states else None
        field = next((f for f in state if f != "locals"), None) if isinstance(state, dict) else None
        example = (f"e.g. {shown.op}[0].{field}   ·   len({shown.op}[0].{field})" if field else
                   "e.g. len(FD.blacklist)   ·   FE[1].highest.get('Bob')")
        return (f"over the states here: {names}; OP.field is each instance, OP[i].field one; row is the selected "
                f"tuple, as its operator gets it.  {example}")

    def action_evaluate(self) -> None:
        if not self._can_act():
            return
        self._ask(PromptScreen("Evaluate (shown once; + watches it after every action)", self._expression_hint(),
                               getattr(self, "_last_expression", "")), self._evaluate_answer)

    def _evaluate_answer(self, text: str | None) -> None:
        if text:
            self._last_expression = text
            self._evaluate_worker(text, self.shown.selected if self.shown else None)

    @work(thread=True, group="evaluate", exit_on_error=False)
    def _evaluate_worker(self, text: str, ref: TupleRef | None) -> None:
        try:
            values = self.model.call(lambda s: s.evaluate(text, s.waiting_row(ref) if ref is not None else None))
        except TTError as e:
            self._report(Say(str(e), "error"))
            return
        self._report(Say(f"{text} = {format_values(text, values)}"))

    def action_watch(self) -> None:
        if not self._can_act():
            return
        self._ask(PromptScreen("Watch (re-evaluated after every action; - removes the last one)",
                               self._expression_hint(), getattr(self, "_last_expression", "")), self._watch_answer)

    def _watch_answer(self, text: str | None) -> None:
        if not text:
            return
        if text in self.watches:
            self._say(f"already watching {text}", "warning")
            return
        self._last_expression = text
        self._watch_worker([*self.watches, text], adding=text)

    def action_unwatch(self) -> None:
        if not self.watches:
            self._say("nothing is watched; + adds an expression", "warning")
            return
        gone = self.watches.pop()
        self._say(f"no longer watching {gone}")
        self._watch_worker(list(self.watches))

    @work(thread=True, exclusive=True, group="watch", exit_on_error=False)
    def _watch_worker(self, expressions: list[str], adding: str | None = None) -> None:
        """Evaluate the watched expressions here; a new one that cannot be evaluated is not added."""
        def evaluate(s) -> list:
            results: list = []
            for text in expressions:
                try:
                    results.append((text, s.evaluate(text)))
                except TTError as e:
                    if text == adding:
                        raise
                    results.append((text, str(e)))
            return results
        try:
            results = self.model.call(evaluate)
        except TTError as e:   # the new expression
            self._report(Say(str(e), "error"))
            return
        self._report(WatchesEvaluated(results, adding))

    @on(WatchesEvaluated)
    def _watches_evaluated(self, report: WatchesEvaluated) -> None:
        if report.adding is not None:
            self.watches.append(report.adding)
            self._say(f"watching {report.adding}")
        self.query_one(WatchList).show(report.results)

    # --- why: lineage -------------------------------------------------------------------------------

    def action_why(self) -> None:
        """The lineage of the state field under the state tree's cursor (when the state tree has the
        focus), of the log row under the cursor (in the logs view) or of the selected tuple, beside
        the state; `w` again closes it (in the logs view, `w` traces the row: the tree is not shown)."""
        why = self.query_one(LineageTree)
        if why.display and self.view != "logs":
            why.display = False
            self.query_one(StateInspector).tree.focus()
            return
        if not self._can_act():
            return
        target = None
        state = self.query_one(StateInspector)
        node = state.tree.cursor_node
        logs = self.query_one(LogBrowser)
        if self.view == "logs" or (self.focused is not None and logs in self.focused.ancestors_with_self):
            picked = logs.selected_tuple()   # a row of an Input or Output log (a sink's rows too), a recorded tuple
            if picked is None:
                self._say("nothing to trace in this row: choose a row of an Input log (a sink's Input log "
                          "holds its rows), an Output log or recorded tuples", "warning")
                return
            target = ("log", picked)
        elif state.tree.has_focus and node is not None and node.data is not None and not node.data.more \
                and node.data.path and node.data.path[-1] != "…":
            field = state_paths.field_path(node.data.path)[:2] or node.data.path[:1]
            target = ("state", node.data.instance, ".".join(map(str, field)))
        else:
            ref = self._ref_for_step()
            if ref is not None:
                target = ("tuple", ref)
        if target is None:
            self._say("nothing to trace: select a waiting tuple, or a state field in the state tree", "warning")
            return
        self.busy = "why"
        self.cancellable = False
        self.query_one(ProgressLine).busy("why: replaying the run with the operators' state tracked",
                                          cancellable=False)
        self._why_worker(target)

    @work(thread=True, exclusive=True, group="why", exit_on_error=False)
    def _why_worker(self, target: tuple) -> None:
        def compute(s):
            from ..replay.lineage import Lineage

            lineage = self._lineage
            if target[0] == "state":
                key = s.parse_instance(target[1])
                at = s.engine.instances[key].count
                if lineage is None or lineage.session is not s or lineage.engine.instances[key].count > at:
                    lineage = Lineage(s)   # (its replay only goes forward)
                    lineage.use_index(build=False)
                root = lineage.state_value(target[1], target[2], at=at)
            else:
                if lineage is None or lineage.session is not s:
                    lineage = Lineage(s)
                    lineage.use_index(build=False)   # one `tt lineage` built: no replay for a tuple
                root = target[1] if target[0] == "tuple" else _logged_tuple(s, target[1])
            self._lineage = lineage
            (tree,) = lineage.trees([root], back=True)
            return lineage.label(root), outline(lineage, tree), len(tree.nodes)
        try:
            title, root, size = self.model.call(compute)
        except (TTError, ValueError) as e:
            self._report(LineageReady(str(target[-1]), error=str(e)))
            return
        except Exception as e:  # a bug in tt: say so, keep the session (and the app not busy)
            traceback.print_exc()
            self._report(LineageReady(str(target[-1]), error=f"internal error: {type(e).__name__}: {e}"))
            return
        self._report(LineageReady(title, root, size=size))

    @on(LineageReady)
    def _lineage_ready(self, report: LineageReady) -> None:
        self.busy = None
        self.query_one(ProgressLine).idle()
        if self.shown is not None:
            self._show_where(self.shown)   # (the line said "why: replaying…")
        self._sync_bindings()
        if report.error is not None:
            self._say(f"why {report.title}: {report.error}", "error")
            return
        if self.view == "logs":   # `w` on a log row: the tree opens above the state, in the debug view
            self.action_view("debug")
        why = self.query_one(LineageTree)
        why.border_title = f"why {report.title}"
        why.show(report.title, report.root)
        why.display = True
        why.focus()
        tuples = f"{report.size} tuple{'' if report.size == 1 else 's'}"
        self._say(f"why {report.title}: {tuples}; Enter on a leaf (←) goes to just before it is consumed; w closes")

    @on(LineageTree.LeafChosen)
    def _lineage_leaf(self, event: LineageTree.LeafChosen) -> None:
        """Go to just before the leaf entered G(θ) (`DebugSession.goto_before`), the leaf selected."""
        ref = event.ref
        if self.reader is None or not self._can_act():
            return
        op = self.reader.operators[ref.op].name

        def select_after(session, result):
            self._note_after = result.note
            waiting = [p.ref for p in session.pending(session.label((ref.op, ref.instance)), limit=PENDING_PER_INSTANCE)]
            return op, ref if ref in waiting else None
        self._start(f"go to before {op}:{ref.instance}:{ref.position}",
                    lambda s, p, c: s.goto_before(ref, progress=p, cancel=c), select_after=select_after,
                    cancellable=True)

    def action_cancel(self) -> None:
        if self.busy and not self.cancellable:
            self._say(f"{self.busy} cannot be cancelled; it stops by itself", "warning")
        elif self.busy:
            self.cancel_event.set()
            self.query_one(ProgressLine).show_text(Text(f"cancelling {self.busy}…", style="bold yellow"))

    def action_search(self) -> None:
        logs = self.query_one(LogBrowser)
        in_logs = self.view == "logs" or (self.focused is not None and logs in self.focused.ancestors_with_self)
        if in_logs or self.view not in ("debug",):
            self.action_view("logs")
            logs.focus_search()
            return
        self._ask(PromptScreen("Search the state tree (keys and values)", "Enter again with the same text "
                               "finds the next match", getattr(self, "_last_search", "")),
                  self._search_answer)

    def _search_answer(self, text: str | None) -> None:
        if not text:
            return
        self._last_search = text
        if self.query_one(StateInspector).search(text):
            self._say(f"found {text!r} in the state of {self.selected_op}")
            self.query_one("#state-tree").focus()
        else:
            self._say(f"{text!r} is not in the state of {self.selected_op}", "warning")

    def action_overlaps(self) -> None:
        if not self._can_act():
            return
        def compute(session, progress, cancel) -> None:
            found = self.model.compute_overlaps(force=True)
            self._note_after = (   # (said by `_action_done` once the position is shown again)
                f"{len(found):,} θ input{'' if len(found) == 1 else 's'} without a step-over in this run: "
                f"{'its scope overlaps' if len(found) == 1 else 'their scopes overlap'} a later one's (3 shows "
                f"a tuple's scope)" if found else "no scopes overlap in this run: every θ input can be stepped over")

        self._start("computing overlaps", compute)

    def _why_no_interaction(self) -> str:
        if self.status == "recording" and self.live is None:
            return ("this run is being recorded by another process; take interactions there "
                    "(Enter in `tt record`, or kill -USR1 the recorder)")
        return "the run is finished; interactions can only be taken while recording"

    def on_print(self, event) -> None:
        """What the live job printed (its stdout): `tt record --tui` prints it when the app closes."""
        if self.live is not None:
            self.live.output.append(event.text)

    def action_interact(self) -> None:
        if self.live is None or self.live.finished:
            self._say(self._why_no_interaction(), "warning")
            return
        self._say(self.live.interact())
        self._poll()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_warnings(self) -> None:
        """Every warning the recording made (a live run's as far as it got)."""
        if self.reader is None:
            self._say("the run file is still being read", "warning")
        elif warned := self.reader.warnings():
            self.push_screen(WarningsScreen(warned, str(self.path)))
        else:
            self._say("the recording made no warnings")

    def live_event(self) -> None:
        """The recorder took an interaction: look now rather than at the next poll."""
        self._poll()

    def job_finished(self, outcome: str, error: str | None = None) -> None:
        """Called by `tt record --tui` when the recorded job ends."""
        if self.live is not None:
            self.live.finished = True
            self.live.outcome = outcome
        if not self.is_running:  # (the job ended as the app shut down: no widgets to tell)
            return
        level = "info" if outcome == "complete" else "error"
        self._job_announced = True   # (the poll that sees the run end must not replace this line)
        self._say(f"the job finished ({outcome}{': ' + error if error else ''}); keep debugging, q quits", level)
        self._poll()
        self.refresh_bindings()

    # --- live follow ------------------------------------------------------------------------------

    def _poll(self) -> None:
        """Every second while the run is being recorded: look for new interactions (off the UI thread).

        Its timer can fire while the app shuts down, after the widgets it updates are gone: then
        there is nobody to tell, and it does nothing."""
        if not self.is_running:
            return
        if not self._facts_loaded:
            if self._load_facts() and self.model is None:
                self._open_session()
            return
        self._poll_worker()

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _poll_worker(self) -> None:
        """Its messages are posted, not reported: the poll runs on its own and never keeps the app busy."""
        try:
            if self._poll_reader is None:
                self._poll_reader = RunReader(self.path)
            reader = self._poll_reader
            reader.refresh()
            status = reader.status
            rows = facts.interactions(reader)
            checkpointed = reader.checkpointed()
        except TTError as e:
            self.post_message(Say(f"cannot follow the run: {e}", "error"))
            return
        self.post_message(RunPolled(status, rows, checkpointed))

    @on(RunPolled)
    def _run_polled(self, polled: RunPolled) -> None:
        was = self.status
        self.status = polled.status
        grew = self._set_interactions(polled.interactions, polled.checkpointed)
        if grew:
            self.query_one(LogBrowser).refresh_live()
            if self.model is not None:
                self._refresh_session()
        if self.status != was:
            self.reader.refresh()
            self._update_title()
            if was == "recording" and not self._job_announced:
                self._say(f"the recording finished: {self.status}")
        if self.status != "recording" and (self.live is None or self.live.finished) and self._poll_timer:
            self._poll_timer.stop()
            self._poll_timer = None

    @work(thread=True, exclusive=True, group="refresh", exit_on_error=False)
    def _refresh_session(self) -> None:
        try:
            shown = self.model.refresh(self.selected_op, self.selected_ref)
        except TTError as e:
            self._report(Say(f"cannot follow the run: {e}", "error"))
            return
        self._report(SelectionShown(shown))

    # --- plots --------------------------------------------------------------------------------------

    def _load_series(self) -> None:
        if self._series_loaded or not self._facts_loaded:
            return
        self._series_loaded = True
        self._series_worker()

    @work(thread=True, exclusive=True, group="series", exit_on_error=False)
    def _series_worker(self) -> None:
        reader = RunReader(self.path)
        try:
            data = facts.series(reader)
        finally:
            reader.close()
        self._report(SeriesLoaded(data))

    @on(SeriesLoaded)
    def _series_loaded(self, report: SeriesLoaded) -> None:
        self.query_one(RunPlots).show(report.data, self.shown.interaction if self.shown else None)

    # --- command palette ----------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands, then every action of the table the app offers now; a step it cannot take
        says why (choosing it explains)."""
        yield from super().get_system_commands(screen)
        target = (self.shown.selected_label if self.shown else None) or "the selected tuple"
        for action in actions.ACTIONS:
            if action.palette is None or self._available(action.palette_when or action.when) is False:
                continue
            help_ = action.palette_help.format(target=target, watch=self.watches[-1] if self.watches else "",
                                               busy=self.busy)
            reason = self._why_not(action.when.step) if action.when.step else ""
            if reason:
                yield SystemCommand(action.palette, f"{help_}  [{reason}]", partial(self._explain, action.name))
            else:
                run = getattr(self, f"action_{action.name}")
                arguments = () if action.argument is None else (action.argument,)
                yield SystemCommand(action.palette, help_, partial(run, *arguments))

    def _why_not(self, step: str) -> str:
        """Why the palette cannot take this step now ("" if it can)."""
        if self.model is None:
            return "unavailable: the replay engine is still loading"
        a = self.shown.availability.get(step) if self.shown else None
        if a is None or a.ok:
            return ""
        return f"unavailable: {a.reason}"


def _after_step(session, result) -> tuple[str | None, TupleRef | None]:
    """After a step or a jump, let the model pick the default tuple (θ's next, or the next one in
    the scope), the one ▶ marks: a tuple picked at another position may be waiting here too (an
    instance that had not started), and `n` stepped it, not the one marked."""
    return None, None


def _after_run_until(session, result) -> tuple[str | None, TupleRef | None]:
    """Show the operator whose step made the condition hold."""
    if result is not None and result.ok and result.stopped_at is not None:
        return session.graph.nodes[result.stopped_at.op].name, None
    return None, None


def _logged_tuple(session, row: tuple) -> TupleRef:
    """The tuple a log row is about (`logview.Source.tuple_at`): a position of an Input or Output
    log, or the position a recorded tuple was consumed at."""
    if row[0] == "input":
        _, op, instance, position = row
        return session.parse_ref(f"{session.label((op, instance))}:{position}", lineage=True)
    _, op, instance, channel, seq = row
    position = session.provenance.index(op, instance).position_of(channel, seq)
    if position is None:
        raise UsageError(f"recorded tuple #{seq} into {session.label((op, instance))} was not consumed before the "
                         f"run ended: nothing was made from it")
    return TupleRef(op, instance, position)


def _per_operator(positions: dict[str, int]) -> dict[str, int]:
    """An interaction's instance positions (`{"FD:0": 12, ...}`) summed per operator: the DAG's counts."""
    counts: dict[str, int] = {}
    for label, n in positions.items():
        name = operator_of(label)
        counts[name] = counts.get(name, 0) + n
    return counts
