"""Row lineage: which tuples a row of a recorded run was made from, and what a tuple became.

A row is related to a tuple in one of two ways (docs/LINEAGE.md):

* *emitted while processing*: it is an output of the call that processed the tuple;
  exact, from the Input and Output logs alone (`Provenance.emitted_by`, `consumers`);
* *through state*: the call that emitted it read state that the tuple's call wrote;
  found by replaying the run with the operators' state tracked (`state_access.py`),
  which the recording never does;
* *through Spark*: in a hooked job, a unit a hooked operator was handed holds rows equal to
  rows an upstream hooked operator emitted, Spark's own operators between them
  (`spark_links.py`: matched by value); or, between two RDD functions PySpark pipelines,
  it is the upstream output of the same number (exact).

Backward lineage follows both kinds down to the tuples that entered G(θ) (θ's inputs,
the other side of a join) and stops there, saying so; a source row shows its values
and, when the source was read by reference, its file and row number. Forward lineage
follows them up from a tuple to where each path ended: a sink, a call that emitted
nothing from it (filtered or absorbed), or an output still pending when the run ended.
"""

from __future__ import annotations

import ast
import bisect
import builtins
import collections
import sqlite3
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from ..core import values
from ..core.errors import TTError, UsageError
from ..core.graph import SOURCE
from ..core.logs import END
from ..core.scopes import TupleRef
from ..store import blobs
from ..store.sources import shown
from . import partition_store
from .conditions import BUILTINS
from .engine import Engine, Instance, Key
from .lineage_index import LineageIndex, MadeIndex, OutputRows
from .spark_links import KeyRows, Rows, UnitRows, columns_of, frame_of
from .state_access import StateAccess, path_text, positions

_MISSING = object()

EMITTED, STATE, CONSUMED, SPARK = "emitted", "state", "consumed", "spark"
PIPELINED = "pipelined"   # a Spark edge where PySpark hands one function's outputs to the next, in order


@dataclass(frozen=True)
class Output:
    """The index-th tuple a call emitted: a row no consumer names (a sink's row, a row still
    pending), or a row chosen among an operator's outputs with --where."""

    call: TupleRef
    index: int


@dataclass(frozen=True)
class StateValue:
    """A state field's value (or one key's, or one item of a key's list) where the tracked replay
    stands: the root of a backward tree whose links are the calls that wrote it."""

    op: int
    instance: int
    path: tuple                   # (field,), (field, key) or (field, key, item)
    position: int                 # the instance's inputs consumed when it was read


Node = TupleRef | Output | StateValue


def _span_text(file: str, span: dict) -> str:
    """`orders_0.parquet rows 1000–1999` (or `…, 1,000 of rows 0–4999` where they are not all)."""
    a, b, n = span["first"], span["last"], span["rows"]
    if n == 1:
        return f"{file} row {a}"
    return f"{file} rows {a}–{b}" if b - a + 1 == n else f"{file}, {n:,} of rows {a}–{b}"


def _spark_label(edge: dict) -> str:
    """What Spark did between two hooked operators, as a link says it: the plan's words, its
    aggregate named with the columns it grouped by where rows were matched by them."""
    label = edge["label"] or "as is"
    keys = edge.get("keys")
    if keys is None:
        return label
    by = f"aggregate by {', '.join(keys)}" if keys else "aggregate of all rows"
    return ", ".join(by if w == "aggregate" else w for w in label.split(", "))


@dataclass(frozen=True)
class Link:
    """Backward: `src` was made from `to`; forward: `to` was made from `src`."""

    src: Node
    to: Node
    kind: str                     # EMITTED, STATE, SPARK, or CONSUMED (forward from an Output: where it went)
    state: str | None = None      # through state: the instance and the path, "R:1 seen['c2']"
    by: TupleRef | None = None    # forward through state: the call that read it
    spark: str | None = None      # through Spark: what Spark did between the two ("shuffle by customer")
    rows: int = 0                 # through Spark: how many of the unit's rows the output holds
    keys: tuple[str, ...] | None = None   # through Spark's aggregate: its grouping columns, the rows matched by them

    def spark_text(self, back: bool) -> str:
        """How a through-Spark link reads before the row it leads to."""
        if self.spark == PIPELINED:   # (an exact link: PySpark passed the row on)
            return f"passed on by PySpark (pipelined) {'from' if back else 'to'}"
        rows = f"{self.rows:,} row{'s' if self.rows != 1 else ''}"
        if self.keys is None:
            return f"through Spark ({self.spark}), {rows} matched by value in"
        return f"through Spark ({self.spark}), {rows} matched by key in"


WRITERS_SHOWN = 5   # writers of one state path a tree view lists under a row (--json lists all)


@dataclass
class Tree:
    direction: str                # "back" or "forward"
    root: Node
    nodes: list[Node]             # breadth first, each once
    links: list[Link] = field(default_factory=list)
    cut: set[Node] = field(default_factory=set)                 # more beyond --depth
    entered: dict[Node, dict] = field(default_factory=dict)     # back: where each leaf entered G(θ)
    ends: dict[Node, dict] = field(default_factory=dict)        # forward: where each path ended
    rows: dict[Node, Any] = field(default_factory=dict)         # JSON-encoded values
    _by_src: dict[Node, list[Link]] | None = field(default=None, repr=False, compare=False)

    def shown_links(self, node: Node) -> list:
        """What a view lists under `node` (`tt lineage`'s text, `w` in the TUI): its links, emitted
        first, then through state by keys (the telling kind), then whole fields (counters and
        such), at most WRITERS_SHOWN writers per state path; then `(state, n)` for each path with
        n writers left out."""
        if self._by_src is None:
            self._by_src = collections.defaultdict(list)
            for link in self.links:
                self._by_src[link.src].append(link)
        out, per_state = [], collections.Counter()
        for link in sorted(self._by_src.get(node, ()), key=lambda k: (k.kind == STATE, "[" not in (k.state or ""))):
            if link.kind == STATE:
                per_state[link.state] += 1
                if per_state[link.state] > WRITERS_SHOWN:
                    continue
            out.append(link)
        out += [(state, n - WRITERS_SHOWN) for state, n in per_state.items() if n > WRITERS_SHOWN]
        return out

    def note(self, node: Node) -> str:
        """Where a leaf entered G(θ), or where a path ended ("" for any other node)."""
        e = self.entered.get(node)
        if e is not None:
            if e["as"] == "end of input":
                outside = ", outside G(θ): what it was made from is not known" if e.get("outside") else ""
                return f"← the end of input of {e['at']} (its finish(){outside})"
            if e["as"] == "source row":
                copied = "copied into the run file" if self.rows.get(node) is not None else "values not recorded"
                where = f"{shown(e['file'])} row {e['row']}" if "file" in e else \
                    f"partition {e['partition']}, row #{e['index']} of its read ({copied})"
                by = "" if e["at"] == e["from"] else f" read by {e['at']}"
                return f"← a row of source {e['from']}{by}: {where}"
            how = "θ's input" if e["as"] == "theta input" else "a free tuple"
            where = ", ".join(_span_text(shown(s["file"]), s) for s in e["spans"]) if "spans" in e else \
                f"{shown(e['file'])} row {e['row']}" if "file" in e else \
                "copied into the run file" if e["source"] else "lineage stops here"
            return f"← entered G(θ) at {e['at']} ({how}) from {'source ' if e['source'] else ''}{e['from']}: {where}"
        end = self.ends.get(node)
        if end is not None:
            return {"sink": f"→ reached sink {end['at']}",
                    "pending": f"→ still pending at {end['at']} when the run ended",
                    "absorbed": f"→ consumed with no output at {end['at']} (filtered or absorbed)",
                    "merged": f"→ into {end['at']}'s state, which reaches only rows shown above",
                    "spark": f"→ into Spark ({end.get('spark')}): no unit of {end['at']} holds rows equal to "
                             f"its rows"}[end["end"]]
        return ""


class Lineage:
    """Lineage queries over one run (a `DebugSession`), answered from the run's lineage index
    (`use_index`), or by one replay of its own with every operator's state tracked, advanced
    as far as the queries need. A state value is always read from that replay."""

    def __init__(self, session):
        self.session = session
        self.graph = session.graph
        self.provenance = session.provenance
        self.reader = session.reader
        self.engine = Engine(self.reader, trust=True)   # (the session established trust)
        self.access = {key: StateAccess(inst.runner.op) for key, inst in self.engine.instances.items()}
        self._calls = _Calls(self.engine, lambda key, fn: self.access[key].traced(fn))
        self._channel: dict[Key, tuple] = {}
        self._readers: dict[Key, MadeIndex] = {}   # forward through state: per instance, who read what
        self._kept: dict[Key, _Kept] = {}
        self._read_chunks: dict[int, list] = {}   # entry chunk packed by `tt pack` -> its rows
        self._entry_indexes: dict[Key, list] = {}   # instance -> its entry chunks (`RunReader.entry_index`)
        self._rows: dict[Node, Any] = {}
        self._leaves: dict[TupleRef, tuple[int, int]] = {}   # source rows read by reference, to read (`_read_leaves`)
        self._on_outputs: Callable[[Key, int, list], None] | None = None   # sees each tracked call's outputs
        self.index: LineageIndex | None = None
        self._building: dict[Key, OutputRows] | None = None   # while the index is built: each call's outputs
        # a hooked job: what Spark does between two hooked operators (docs/HOOKS.md), by the source it feeds
        # and by the operator it leaves; the rows on each side, matched by value (spark_links.py)
        self._spark_into: dict[int, list[dict]] = collections.defaultdict(list)
        self._spark_from: dict[int, list[dict]] = collections.defaultdict(list)
        for e in self.reader.plan.get("spark_edges", []):
            self._spark_into[e["dst"]].append(e)
            self._spark_from[e["src"]].append(e)
        self._replayed_outputs: dict[int, list] = {}   # (--no-index) what each such operator emitted
        self._spark_units: dict[tuple, UnitRows] = {}   # (operator, edge, keys) -> the units it got, by row

    # --- the index ------------------------------------------------------------------------

    def use_index(self, *, build: bool = True, rebuild: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> str | None:
        """Answer from the run's lineage index (replay/lineage_index.py): the one kept in the run
        file, or, with `build`, a new one made by one tracked replay of G(θ) to its end and kept
        there (`rebuild`: a new one even if one is kept). Returns a line for the user when it built
        one (where it was kept, or why not)."""
        totals = {key: _end(inst) for key, inst in self.engine.instances.items()}
        self.index = None if rebuild else LineageIndex.load(self.reader, totals)
        if self.index is not None:
            self.reader.sources().known_counts = self.index.load_counts
            self.reader.sources().known_rows = self.index.load_rows
        if self.index is not None or not build:
            return None
        if any(inst.count for inst in self.engine.instances.values()):
            raise ValueError("the tracked replay has begun: an index is built from the start of the run")
        outputs = self._building = {key: OutputRows() for key in self.engine.instances}
        done, total = 0, sum(totals.values())

        def step(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(min(done, total), total)
        try:
            with self.engine.hooks(self._before, self._after), values.gc_resumed():
                self.engine.advance_to(totals, progress=step, pull=True)
        finally:
            self._building = None
        for rows in outputs.values():
            rows.close()
        joined = {key: self.reader.made_from(*key).tobytes() for key in self.reader.keyed_joins()}
        self.index = LineageIndex({key: MadeIndex.of(a.made) for key, a in self.access.items()}, outputs, totals,
                                  joined)
        self.index.counted = self.reader.sources().counted_tasks()
        what = f"indexed the lineage of the {total:,} tuples of G(θ)"
        if self.reader.status == "recording":
            return f"{what} for this query only: the run is still being recorded"
        try:
            size = self.index.save(self.reader.path, self.reader.run_id)
        except (OSError, sqlite3.Error, TTError) as e:
            return f"{what} for this query only: it could not be kept in {self.reader.path} ({e})"
        return f"{what}, kept in {self.reader.path} ({size / 1e6:.1f} MB): later queries read it"

    def label(self, node: Node) -> str:
        if isinstance(node, Output):
            return f"{node.call.label(self.graph)}/{node.index}"
        if isinstance(node, StateValue):
            return f"{self.graph.nodes[node.op].name}:{node.instance} {path_text(node.path)}"
        return node.label(self.graph)

    def state_value(self, instance: str, dotted: str, at: int | None = None) -> StateValue:
        """The value of `dotted` ("blacklist.Bob", "groups.8242", "seen") in the state of
        `instance` ("FD:0") at the end of the run (a failed run: where it failed), or when it had
        consumed `at` tuples, as a root for `back`: its links are the calls that wrote it. The
        tracked replay only goes forward: `at` must not lie behind where it stands."""
        key = self.session.parse_instance(instance)
        target = _end(self.engine.instances[key]) if at is None else at
        if self.engine.instances[key].count > target:
            raise ValueError(f"the tracked replay is past {instance}:{target}")
        self._replay({key: target})
        access = self.access[key]
        field_name, *rest = dotted.split(".")
        fields = access.fields()
        if field_name == partition_store.FIELD:
            raise UsageError(f"{partition_store.FIELD} of {instance} is put together from its partition's "
                             f"micro-batches for reading: ask why of a state variable of the micro-batch's task "
                             f"that wrote it")
        if field_name not in fields:
            raise UsageError(f"{instance} has no field {field_name!r} "
                             f"(its fields: {', '.join(sorted(fields)) or 'none'})")
        value, path = fields[field_name], (field_name,)
        if not rest and isinstance(value, dict):
            if not value:
                raise UsageError(f"{instance}.{dotted} is an empty dict at the end of the run: no key to trace")
            some = ", ".join(f"{instance}.{dotted}.{k}" for k in list(value)[:3])
            raise UsageError(f"{instance}.{dotted} is a dict: its keys are written one by one; name one, e.g. {some}")
        for part in rest:
            found = _MISSING
            if isinstance(value, dict):
                found = next((k for k in value if k == part or str(k) == part), _MISSING)
                if found is not _MISSING:
                    value, path = dict.__getitem__(value, found), path + (found,)
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value) and len(path) == 2:
                value, path = value[int(part)], path + (int(part),)
                found = part
            if found is _MISSING:
                raise UsageError(f"{instance}.{dotted}: {path_text(path)} has no {part!r} at the end of the run")
            if len(path) == 3:
                break
        root = StateValue(key[0], key[1], path, self.engine.instances[key].count)
        self._rows[root] = values.encode(value)
        return root

    def parse_ref(self, text: str) -> TupleRef | Output:
        """'OP:I:N' as a root: a tuple of G(θ) (one still waiting on a channel at an interaction
        too: `tt replay RUN --to K` names them), or of an operator outside it that kept its logs
        for lineage (`tt record --lineage`). 'OP:I:N/J': the J-th row that call emitted, the
        name lineage gives a row no consumer took (a sink's, one pending when the run ended)."""
        call, j = self.check_ref(text)
        if j is None:
            return call
        n = len(self.provenance.index(call.op, call.instance).outputs_of(call.position))
        if j >= n:
            ref = text.strip().partition("/")[0]
            rows = "no rows" if not n else f"one row, {ref}/0" if n == 1 else f"{n} rows, {ref}/0 … {ref}/{n - 1}"
            raise UsageError(f"{ref}'s call emitted {rows}, not {ref}/{j}")
        return Output(call, j)

    def check_ref(self, text: str) -> tuple[TupleRef, int | None]:
        """`parse_ref`'s checks that need no index, told before one is built: (the tuple, and
        the row's number after '/', or None)."""
        ref, slash, j = text.strip().partition("/")
        call = self.session.parse_ref(ref, lineage=True)
        if slash and not j.isdigit():
            raise UsageError(f"bad row {text!r}; write OP:INSTANCE:INPUT#/OUTPUT#, e.g. {ref}/0 (the first row "
                             f"{ref}'s call emitted)")
        return call, (int(j) if slash else None)

    # --- choosing rows ------------------------------------------------------------------

    def rows_of(self, name: str, where: str) -> list[Node]:
        """The rows operator `name` emitted for which `where` holds: its outputs, for an
        operator of G(θ); the tuples it sent into G(θ), for one outside it (a source)."""
        node = self.graph.node(name)
        inst = self.engine.instances.get((node.id, 0))
        test = Where(where, getattr(inst.runner.op if inst is not None else node.op, "output_columns", None))
        if node.id in self.graph.in_g:
            found, checked = self._outputs_where(node, test)
        else:
            found, checked = self._entries_where(node, test)
        if found:
            return found
        if not checked:
            theta = self.graph.nodes[self.graph.theta].name
            if self.graph.lineage:
                raise UsageError(f"{name}'s rows are not recorded (it is outside G(θ), θ = {theta}, and not a "
                                 f"source read by reference): name one of its tuples as {name}:INSTANCE:INPUT#, "
                                 f"or choose among the rows a source read by reference sent")
            raise UsageError(f"{name} sent no rows into G(θ) (θ = {theta}); lineage reaches G(θ) and the tuples "
                             f"entering it: record with --lineage to reach further")
        if test.error is not None and not test.held:
            raise UsageError(f"--where {where!r} raised {test.error} on {name}'s rows "
                             f"(their fields: {', '.join(test.fields) or 'none; the row is `row`'})")
        raise UsageError(f"none of the {checked} rows {name} emitted matches --where {where!r}")

    def _outputs_where(self, node, test: "Where") -> tuple[list[Node], int]:
        found: list[Output] = []
        checked = 0

        def take(key: Key, position: int, j: int, row: Any) -> None:
            out = Output(TupleRef(key[0], key[1], position), j)
            found.append(out)
            self._rows[out] = values.encode_readable(row)

        def outputs(key: Key, position: int, outs: list) -> None:
            nonlocal checked
            if key[0] != node.id:
                return
            for j, row in enumerate(outs):
                checked += 1
                if test(row):
                    take(key, position, j, row)
        targets = {(node.id, i): _end(self.engine.instances[(node.id, i)]) for i in range(node.instances)}
        for key in list(targets):
            rows = self.index.rows(key) if self.index is not None else None
            if rows is not None:   # kept in the index: no replay, and one test per chunk of rows
                del targets[key]
                for calls, ends, flat in rows.batches():
                    checked += len(flat)
                    for i in test.matching(flat):
                        c = bisect.bisect_right(ends, i)
                        take(key, calls[c], i - (ends[c - 1] if c else 0), flat[i])
        if targets and (self.index is not None or any(self.engine.instances[key].count for key in targets)):
            self._shadow(targets, on_outputs=outputs)   # the tracked replay is past some of them, or not needed
        elif targets:   # read them on the way: the tracked replay goes there anyway
            self._on_outputs = outputs
            try:
                self._replay(targets)
            finally:
                self._on_outputs = None
        return sorted(found, key=lambda o: (o.call, o.index)), checked

    def _entries_where(self, node, test: "Where") -> tuple[list[Node], int]:
        found, checked = [], 0

        def check(op: int, instance: int, position: int | None, row: Any) -> None:
            nonlocal checked
            checked += 1
            if position is not None and test(row):
                ref = TupleRef(op, instance, position)
                found.append(ref)
                self._rows[ref] = values.encode_readable(row)
        def scan(op: int, instance: int, port: int, position: Callable[[tuple, int], int | None]) -> None:
            """The rows sent on `port` that were read by reference (or packed), prefiltered on
            their columns where `--where` is a conjunction of `field == constant` (`Where.equal`)."""
            nonlocal checked
            for rowid, p, src, start, n, codec in self.reader.entry_index(op, instance):
                if p == port and codec in (blobs.REF, blobs.ARROW):
                    n, offsets, rows = self.reader.entry_tuples_where(codec, rowid, test.equal)
                    checked += n - len(rows)   # (rows the prefilter left out were checked there)
                    for k, row in zip(offsets, rows):
                        check(op, instance, position((p, src), start + k), row)
        if node.id in self.graph.lineage:   # a source that logged where its rows went (read by reference)
            for d in range(node.instances):
                scan(node.id, d, 0, lambda ch, seq: seq)
            return found, checked
        for e in self.graph.out_edges(node):
            for d in range(self.graph.nodes[e.dst].instances):
                index = self.provenance.index(e.dst, d) if e.dst in self.graph.logged else None
                if e.dst in self.graph.lineage:   # --lineage: a source's rows, read from their files
                    scan(e.dst, d, e.port, index.position_of)
                elif e.dst in self.graph.in_g:
                    for ch, entry in self.engine.instances[(e.dst, d)].entry.items():
                        if ch[0] == e.port:
                            for seq in range(len(entry)):
                                check(e.dst, d, index.position_of(ch, seq), entry.get(seq))
        return sorted(found), checked

    # --- the two directions -------------------------------------------------------------

    def back(self, root: Node, depth: int | None = None, *, rows: bool = True) -> Tree:
        """What `root` was made from, down to the tuples that entered G(θ); `rows=False`
        leaves `tree.rows` empty (`trees` reads them for many trees in one replay)."""
        if isinstance(root, StateValue):
            if self.engine.instances[(root.op, root.instance)].count != root.position:
                raise ValueError(f"{self.label(root)} was read at another position of the tracked replay")
        elif self.index is None:
            call = root.call if isinstance(root, Output) else root
            if (call.op, call.instance) in self.engine.instances:   # (outside G(θ): its own logs)
                self._replay({(call.op, call.instance): call.position + 1})
        return self._walk(Tree("back", root, [root]), depth, self._made_of, rows)

    def forward(self, root: Node, depth: int | None = None, *, rows: bool = True) -> Tree:
        """What `root` contributed to, up to where each path ended."""
        if isinstance(root, StateValue):
            raise UsageError(f"{self.label(root)} is a state value: its lineage runs --back, to the calls that wrote it")
        visited: dict[Key, set] = collections.defaultdict(set)
        return self._walk(Tree("forward", root, [root]), depth, lambda node, tree: self._uses(node, tree, visited),
                          rows)

    def trees(self, roots: list[Node], back: bool, depth: int | None = None) -> list[Tree]:
        """One tree per root, their rows read by one replay for all of them (not one per tree)."""
        walk = self.back if back else self.forward
        order = sorted(range(len(roots)), key=lambda i: _order(roots[i]))
        built = {i: walk(roots[i], depth, rows=False) for i in order}
        trees = [built[i] for i in range(len(roots))]   # walked in the replay's order, listed in the roots'
        known = self._values([n for t in trees for n in t.nodes])
        for t in trees:
            t.rows = {n: known[n] for n in t.nodes}
        return trees

    def _walk(self, tree: Tree, depth: int | None, step: Callable[[Node, Tree], list[Link]], rows: bool) -> Tree:
        level = {tree.root: 0}
        queue = collections.deque([tree.root])
        while queue:
            node = queue.popleft()
            links = step(node, tree)
            if links and depth is not None and level[node] >= depth:
                tree.cut.add(node)
                continue
            for link in links:
                tree.links.append(link)
                if link.to not in level:
                    level[link.to] = level[node] + 1
                    tree.nodes.append(link.to)
                    queue.append(link.to)
        if tree.direction == "back":
            for node in tree.nodes:
                if node not in tree.cut and isinstance(node, TupleRef) and \
                        self.provenance.emitted_by(node, whole=True) is None:
                    tree.entered[node] = self._entered(node)
        if rows:
            tree.rows = self._values(tree.nodes)
        return tree

    def _made_of(self, node: Node, tree: Tree) -> list[Link]:
        """Backward links of a row: the call that emitted it, and the writers of the state it was made from."""
        if isinstance(node, StateValue):
            access = self.access[(node.op, node.instance)]
            whole = access.traced_whole(node.path)   # (a hooked function's field: its writers, not the key's)
            state = self.label(node) if whole is None else self.label(StateValue(node.op, node.instance, whole, 0))
            writers = access.writers_of(node.path)
            return [Link(node, TupleRef(node.op, node.instance, w), STATE, state) for w in positions(writers)]
        if isinstance(node, Output):
            call, j = node.call, node.index
        else:
            emitted = self.provenance.emitted_by(node, whole=True)
            if emitted is None:
                return self._from_spark(node)
            call, j = emitted
        links = [Link(node, call, EMITTED)]
        key = (call.op, call.instance)
        if key not in self.access:   # outside G(θ), --lineage: what its own log says the output was made from
            kept = self._kept_of(call)
            g = self.provenance.index(call.op, call.instance).cum[call.position] + j
            return links + [Link(node, TupleRef(call.op, call.instance, w), STATE, kept.state) for w in kept.of(g)]
        if self.index is not None:
            made = self.index.made(key).made(call.position, j)
        else:
            per_output = self.access[key].made.get(call.position)
            made = [(path, positions(writers)) for path, writers in per_output[j]] if per_output else []
        where = f"{self.graph.nodes[call.op].name}:{call.instance}"
        for path, writers in made:
            state = f"{where} {path_text(path)}"
            links += [Link(node, TupleRef(call.op, call.instance, w), STATE, state) for w in writers]
        return links

    def _uses(self, node: Node, tree: Tree, visited: dict[Key, set]) -> list[Link]:
        """Forward links of a tuple: where its call's outputs went, and the later outputs made
        from state its call wrote (each reached once per walk: `visited`)."""
        if isinstance(node, Output):
            if node.call.op in self._spark_from:
                return self._into_spark(node, tree)
            went = self._went(node.call, tree, node.index)[node.index]
            return [Link(node, to, CONSUMED) for to in went if to != node]
        links = [Link(node, to, EMITTED) for tos in self._went(node, tree).values() for to in tos]
        key = (node.op, node.instance)
        if key not in self.access:   # outside G(θ), --lineage: the outputs its own log says it made
            kept = self._kept_of(node)
            idx = self.provenance.index(node.op, node.instance)
            for g in kept.readers(node.position):
                c = idx.input_of_output(g)
                if c != node.position:
                    reader, j = TupleRef(node.op, node.instance, c), g - idx.cum[c]
                    links += [Link(node, to, STATE, kept.state, reader) for to in self._went(reader, tree, j)[j]]
            if not links:
                tree.ends[node] = {"end": "absorbed", "at": self.graph.nodes[node.op].name}
            return links
        readers = self._readers.get(key)
        if readers is None and self.index is not None:
            readers = self._readers[key] = self.index.made(key)
        elif readers is None:   # the tracked replay, of the instances the walk reaches alone, to their end
            self._replay({key: _end(self.engine.instances[key])})
            readers = self._readers[key] = MadeIndex.of(self.access[key].made)
        where = f"{self.graph.nodes[node.op].name}:{node.instance}"
        for c, j, path in readers.read_from(node.position, visited[key]):
            if c == node.position:
                continue   # its own outputs: linked as emitted already
            reader = TupleRef(node.op, node.instance, c)
            links += [Link(node, to, STATE, f"{where} {path_text(path)}", reader)
                      for to in self._went(reader, tree, j)[j]]
        if not links:   # its writes reach only rows this walk reached before, or nothing
            merged = any(c != node.position for c, _, _ in readers.read_from(node.position, set()))
            tree.ends[node] = {"end": "merged" if merged else "absorbed", "at": self.graph.nodes[node.op].name}
        return links

    # --- through Spark, between two hooked operators ------------------------------------------

    def _from_spark(self, t: TupleRef) -> list[Link]:
        """Backward links of a unit a hooked operator got from Spark: the outputs of the hooked
        operators upstream of its source that hold rows equal to its rows (spark_links.py)."""
        port, src, seq = self.provenance.index(t.op, t.instance).channel_at(t.position)
        if (port, src) == END or t.op not in self.graph.in_g:
            return []
        edges = self._spark_into.get(self.graph.edges[self.graph.nodes[t.op].inputs[port]].src, [])
        links = [Link(t, out, SPARK, spark=PIPELINED, rows=1) for e in edges if e["label"] == PIPELINED
                 for out in [self._pipelined_from(e["src"], t.instance, seq)] if out is not None]
        matched = [e for e in edges if e["label"] != PIPELINED]
        frame = frame_of(self.engine.instances[(t.op, t.instance)].entry[(port, src)].get(seq)) if matched else None
        if frame is None:
            return links
        rows = Rows(frame, columns_of(frame))
        for e in matched:
            keys = e.get("keys")
            held_by = rows.held_by if keys is None else KeyRows(frame, keys).held_by
            for out, value in self._emitted(e["src"]):
                held = frame_of(value)
                n = held_by(held) if held is not None else 0
                if n:
                    links.append(Link(t, out, SPARK, spark=_spark_label(e), rows=n,
                                      keys=None if keys is None else tuple(keys)))
        return links

    def _into_spark(self, out: Output, tree: Tree) -> list[Link]:
        """Forward links of an output of a hooked operator that Spark takes on: the units of the
        hooked operators downstream that hold rows equal to its rows."""
        tree.ends.pop(out, None)
        edges = self._spark_from[out.call.op]
        frame = frame_of(self._emitted_row(out)) if any(e["label"] != PIPELINED for e in edges) else None
        links, into = [], []
        for e in edges:
            for eid in self.graph.nodes[e["dst"]].outputs:
                into.append(self.graph.nodes[self.graph.edges[eid].dst].name)
                if e["label"] == PIPELINED:
                    unit = self._pipelined_into(out, self.graph.edges[eid].dst, eid)
                    links += [Link(out, unit, SPARK, spark=PIPELINED, rows=1)] if unit is not None else []
                    continue
                keys = e.get("keys")
                held = self._unit_rows(self.graph.edges[eid].dst, eid, keys).holding(frame) if frame is not None else ()
                for (unit, readable), n in held:
                    links.append(Link(out, unit, SPARK, spark=_spark_label(e), rows=n,
                                      keys=None if keys is None else tuple(keys)))
                    self._rows.setdefault(unit, readable)
        if not links:
            tree.ends[out] = {"end": "spark", "at": ", ".join(sorted(set(into))),
                              "spark": ", ".join(_spark_label(e) for e in edges)}
        return links

    def _pipelined_from(self, op: int, instance: int, seq: int) -> Output | None:
        """The output of hooked operator `op` that PySpark passed straight on as the seq-th
        unit of the function pipelined after it, in the same partition: its seq-th output."""
        if (op, instance) not in self.engine.instances:
            return None
        idx = self.provenance.index(op, instance)
        if not 0 <= seq < idx.cum[-1]:
            return None
        call = idx.input_of_output(seq)
        return Output(TupleRef(op, instance, call), seq - idx.cum[call])

    def _pipelined_into(self, out: Output, op: int, eid: int) -> TupleRef | None:
        """The unit of `op` (over edge `eid`) that PySpark made of `out`, pipelined: the unit
        whose number in its channel is the output's number among its operator's outputs."""
        if (op, out.call.instance) not in self.engine.instances:
            return None
        g = self.provenance.index(out.call.op, out.call.instance).cum[out.call.position] + out.index
        idx = self.provenance.index(op, out.call.instance)
        port = self.graph.nodes[op].inputs.index(eid)
        channels = [ch for ch in idx.channel_runs if ch[0] == port and ch != END]
        position = idx.position_of(channels[0], g) if len(channels) == 1 else None
        return None if position is None else TupleRef(op, out.call.instance, position)

    def _unit_rows(self, op: int, eid: int, keys: list[str] | None = None) -> UnitRows:
        """The units `op` got over edge `eid`, by their rows (or by their groups' `keys`), read
        once a query (each with how the tree shows it)."""
        found = self._spark_units.get((op, eid, None if keys is None else tuple(keys)))
        if found is None:
            found = self._spark_units[(op, eid, None if keys is None else tuple(keys))] = UnitRows(keys)
            for unit, value, frame in self._units_into(op, eid):
                found.add(frame, (unit, values.encode_readable(value)))
        return found

    def _units_into(self, op: int, eid: int) -> Iterator[tuple[TupleRef, Any, Any]]:
        """Every unit `op` got over edge `eid` (from a hooked job's source): the unit, and its rows."""
        port = self.graph.nodes[op].inputs.index(eid)
        for (o, i), inst in sorted(self.engine.instances.items()):
            if o != op:
                continue
            idx = self.provenance.index(o, i)
            for position in range(_end(inst)):
                p, src, seq = idx.channel_at(position)
                if p != port or (p, src) == END:
                    continue
                value = inst.entry[(p, src)].get(seq)
                frame = frame_of(value)
                if frame is not None:
                    yield TupleRef(o, i, position), value, frame

    def _emitted(self, op: int) -> Iterator[tuple[Output, Any]]:
        """Every row operator `op` of G(θ) emitted, as it emitted it: from the index a chunk at a
        time, or by one replay of its instances to their end (state untracked), kept."""
        keys = sorted(key for key in self.engine.instances if key[0] == op)
        rest = {}
        for key in keys:
            rows = self.index.rows(key) if self.index is not None else None
            if rows is None:
                rest[key] = _end(self.engine.instances[key])
                continue
            for calls, ends, emitted in rows.batches():
                start = 0
                for c, end in zip(calls, ends):
                    for j, row in enumerate(emitted[start:end]):
                        yield Output(TupleRef(op, key[1], c), j), row
                    start = end
        if rest:
            replayed = self._replayed_outputs.get(op)
            if replayed is None:
                replayed = self._replayed_outputs[op] = []

                def keep(key: Key, position: int, outs: list) -> None:
                    replayed.extend((Output(TupleRef(key[0], key[1], position), j), row) for j, row in enumerate(outs))
                self._shadow(rest, on_outputs=keep)
            yield from replayed

    def _emitted_row(self, out: Output) -> Any:
        """What `out` is, as its call emitted it."""
        rows = self.index.rows((out.call.op, out.call.instance)) if self.index is not None else None
        if rows is not None:
            return rows.of(out.call.position)[out.index]
        return next((row for o, row in self._emitted(out.call.op) if o == out), None)

    def _went(self, call: TupleRef, tree: Tree, only: int | None = None) -> dict[int, list[Node]]:
        """Per output of `call` (or output `only` alone: an END step emits thousands), where it
        went: its consumers, or the output itself where it ended (an operator without consumers:
        a sink; not consumed by the end of the run: pending)."""
        node = self.graph.nodes[call.op]
        n = len(self.provenance.index(call.op, call.instance).outputs_of(call.position))
        went: dict[int, list[Node]] = {j: [] for j in (range(n) if only is None else (only,))}
        if not node.outputs:
            for j in went:
                went[j].append(Output(call, j))
                tree.ends[Output(call, j)] = {"end": "sink", "at": node.name}
            return went
        for e, j, consumer in self.provenance.consumers(call, only):
            if consumer is None:
                consumer = Output(call, j)
                tree.ends[consumer] = {"end": "pending", "at": self.graph.nodes[self.graph.edges[e].dst].name}
            if consumer not in went[j]:
                went[j].append(consumer)
        return went

    def as_dict(self, tree: Tree) -> dict:
        """A tree as JSON: its tuples (each once, with its row and where it entered or ended)
        and its links."""
        tuples = []
        for node in tree.nodes:
            t = {"tuple": self.label(node), "row": tree.rows.get(node)}
            if node in tree.entered:
                t["entered"] = tree.entered[node]
            if node in tree.ends:
                t["end"] = tree.ends[node]
            if node in tree.cut:
                t["more"] = True
            tuples.append(t)
        links = []
        for link in tree.links:
            d = {"from": self.label(link.src), "to": self.label(link.to), "kind": link.kind}
            if link.state is not None:
                d["state"] = link.state
            if link.by is not None:
                d["read_by"] = self.label(link.by)
            if link.kind == SPARK:
                d["spark"], d["rows"] = link.spark, link.rows
                if link.keys is not None:
                    d["keys"] = list(link.keys)
            links.append(d)
        doc = {"direction": tree.direction, "root": self.label(tree.root), "tuples": tuples, "links": links}
        stops = self.stops(tree)
        if stops is not None:
            doc["stops"] = stops
        return doc

    # --- where tuples entered G(θ) ----------------------------------------------------------

    def _entered(self, t: TupleRef) -> dict:
        """How a tuple without an origin came into G(θ): as θ's input, as a free tuple, or it is
        an END step; from which operator, and for a source read by reference, which file row."""
        port, src, seq = self.provenance.index(t.op, t.instance).channel_at(t.position)
        node = self.graph.nodes[t.op]
        if node.kind == SOURCE:   # --lineage: a source that logged where its rows went; its n-th row
            return self._source_row(t, 0, t.position, {"as": "source row", "at": node.name, "from": node.name,
                                                        "source": True, "partition": t.instance,
                                                        "index": t.position})
        if (port, src) == END:
            return {"as": "end of input", "at": node.name, **({"outside": True} if t.op in self.graph.untracked else {})}
        sender = self.graph.nodes[self.graph.edges[node.inputs[port]].src]
        if t.op not in self.graph.in_g:   # --lineage: a source row, upstream of G(θ)
            return self._source_row(t, port, seq, {"as": "source row", "at": node.name, "from": sender.name,
                                                    "source": sender.kind == SOURCE, "partition": src,
                                                    "index": seq}, src=src)
        info = {"as": "theta input" if t.op == self.graph.theta else "free tuple", "at": node.name,
                "from": sender.name, "source": sender.kind == SOURCE}
        if sender.kind == SOURCE:
            info.update(self._file_row(self.engine.instances[(t.op, t.instance)], (port, src), seq))
        return info

    def _source_row(self, t: TupleRef, port: int, seq: int, info: dict, src: int | None = None) -> dict:
        """`info` with the file and row number of `t`, the seq-th row its instance got on `port`
        (from instance `src` of the sender, where given: rows are numbered per channel), when its
        source was read by reference (--lineage keeps their file positions; after `tt pack`, the
        rows themselves, without them); its values are kept for the tree."""
        chunks = self._entry_indexes.get((t.op, t.instance))
        if chunks is None:   # (a tree's leaves come by the dozen from a few instances)
            chunks = self._entry_indexes[(t.op, t.instance)] = self.reader.entry_index(t.op, t.instance)
        for rowid, p, s, start, n, codec in chunks:
            if (p != port or (src is not None and s != src) or codec not in (blobs.REF, blobs.ARROW)
                    or not start <= seq < start + n):
                continue
            k = seq - start
            if codec == blobs.REF:   # read with the tree's other leaves (`_read_leaves`)
                self._leaves[t] = (rowid, k)
                uri, number = self.reader.entry_place(rowid, k)
                info.update({"file": uri, "row": number})
            else:   # leaves often share chunks: each decoded once
                rows = self._read_chunks.get(rowid)
                if rows is None:
                    rows = self._read_chunks[rowid] = self.reader.entry_tuples(codec, rowid)
                self._rows[t] = values.encode_readable(rows[k])
        return info

    def _read_leaves(self) -> None:
        """The values of the source rows by reference that `_source_row` found, read at once:
        their row groups side by side (`SourceReader.rows_at`)."""
        if self._leaves:
            leaves, self._leaves = self._leaves, {}
            for t, row in zip(leaves, self.reader.entry_rows(list(leaves.values()))):
                self._rows[t] = values.encode_readable(row)

    def _file_row(self, inst: Instance, channel: tuple[int, int], seq: int) -> dict:
        entry = inst.entry.get(channel)
        place = entry.place(seq) if entry is not None else None
        if place is not None:
            return {"file": place[0], "row": place[1]}
        spans = entry.spans(seq) if entry is not None else None   # a hooked unit read by reference: its rows
        if spans:
            return {"file": spans[0][0], "spans": [{"file": f, "first": a, "last": b, "rows": n}
                                                   for f, a, b, n in spans]}
        return {}

    def stops(self, tree: Tree) -> str | None:
        """Where backward lineage stopped short of the sources: tuples from operators outside G(θ)
        without logs, and (with --lineage) rows an operator outside G(θ) emitted from its state."""
        lines = []
        senders = sorted({e["from"] for e in tree.entered.values() if "from" in e and not e["source"]})
        if senders:
            theta = self.graph.nodes[self.graph.theta].name
            lines.append(f"lineage stops where tuples entered G(θ) (θ = {theta}) from {', '.join(senders)}; "
                         f"record with --lineage to reach the sources")
        untracked = sorted({self.graph.nodes[n.op].name for n in tree.nodes
                            if isinstance(n, TupleRef) and n.op in self.graph.untracked})
        if untracked:
            lines.append(f"lineage does not see into the state of {', '.join(untracked)}: outside G(θ) it is not "
                         f"replayed, so a row links only to the input whose call emitted it (--watch it to trace "
                         f"its state)")
        return "\n".join(lines) or None

    def _kept_of(self, call: TupleRef) -> "_Kept":
        key = (call.op, call.instance)
        kept = self._kept.get(key)
        if kept is None:
            made = self.index.joined(key) if self.index is not None else None
            kept = self._kept[key] = _Kept(made if made is not None else self.reader.made_from(*key),
                                           f"{self.label(call).rsplit(':', 1)[0]} kept rows")
        return kept

    # --- replays ------------------------------------------------------------------------------

    def _replay(self, targets: dict[Key, int]) -> None:
        """Advance the tracked replay until each instance in `targets` has consumed that many
        tuples, producers as far as they need to go."""
        with self.engine.hooks(self._before, self._after), values.gc_resumed():
            _advance(self.engine, targets)

    def _before(self, inst: Instance, position: int, channel: tuple) -> None:
        self.access[inst.key].begin(position)
        self._channel[inst.key] = channel
        self._calls.before(inst, position, channel)

    def _after(self, inst: Instance, position: int, row: Any) -> None:
        self._calls.after(inst, position, row)
        access = self.access[inst.key]
        if self._building is not None:
            self._building[inst.key].add(access.outputs)
        if self._on_outputs is not None and access.outputs:
            self._on_outputs(inst.key, position, list(access.outputs))
        access.end(row, self._channel[inst.key][0])

    def _values(self, nodes: list[Node]) -> dict[Node, Any]:
        """The rows at `nodes`, JSON-encoded: those already known, the rest by one replay."""
        for n in nodes:
            if isinstance(n, TupleRef) and n.op not in self.graph.in_g and n not in self._rows:
                if n not in self._leaves:
                    self._entered(n)   # outside G(θ) (--lineage): a source row read by reference has values
                self._rows.setdefault(n, None)   # any other row there was not recorded
            elif isinstance(n, Output) and n.call.op not in self.graph.in_g:
                self._rows.setdefault(n, None)
        self._read_leaves()
        if self.index is not None:
            self._indexed_values(nodes)
        wanted_in = {n for n in nodes if isinstance(n, TupleRef) and n not in self._rows}
        wanted_out = {n for n in nodes if isinstance(n, Output) and n not in self._rows}
        targets: dict[Key, int] = {}
        for n in (*wanted_in, *(o.call for o in wanted_out)):
            targets[(n.op, n.instance)] = max(targets.get((n.op, n.instance), 0), n.position + 1)

        def consumed(key: Key, position: int, row: Any) -> None:
            ref = TupleRef(key[0], key[1], position)
            if ref in wanted_in:
                self._rows[ref] = None if row is None else values.encode_readable(row)

        def emitted(key: Key, position: int, outs: list) -> None:
            for j, row in enumerate(outs):
                out = Output(TupleRef(key[0], key[1], position), j)
                if out in wanted_out:
                    self._rows[out] = values.encode_readable(row)
        if targets:
            self._shadow(targets, on_input=consumed, on_outputs=emitted)
        return {n: self._rows.get(n) for n in nodes}

    def _indexed_values(self, nodes: list[Node]) -> None:
        """The rows at `nodes` that need no replay with an index: outputs it kept, tuples emitted
        by calls whose outputs it kept, and tuples that entered G(θ) (read from their log)."""
        for n in nodes:
            if n in self._rows or not isinstance(n, (TupleRef, Output)):
                continue
            if isinstance(n, Output):
                call, j = n.call, n.index
            else:
                emitted = self.provenance.emitted_by(n)
                if emitted is None:
                    self._rows[n] = self._entry_row(n)
                    continue
                call, j = emitted
            rows = self.index.rows((call.op, call.instance))
            if rows is not None:
                self._rows[n] = values.encode_readable(rows.of(call.position)[j])

    def _entry_row(self, t: TupleRef) -> Any:
        """The row of a tuple that entered G(θ), from the log it was recorded into (None for an END step)."""
        port, src, seq = self.provenance.index(t.op, t.instance).channel_at(t.position)
        if (port, src) == END:
            return None
        return values.encode_readable(self.engine.instances[(t.op, t.instance)].entry[(port, src)].get(seq))

    def _shadow(self, targets: dict[Key, int], on_input: Callable[[Key, int, Any], None] | None = None,
                on_outputs: Callable[[Key, int, list], None] | None = None) -> None:
        """Replay on an engine of its own, state untracked, until each instance in `targets` has
        consumed that many tuples: `on_input` sees each tuple consumed, `on_outputs` what each
        call emitted."""
        engine = Engine(self.reader, trust=True)
        emitted: dict[Key, list] = {}

        def capture(key: Key, fn: Callable) -> Callable:
            def call(*args):
                outs = fn(*args)
                if outs is not None and type(outs) not in (list, tuple, dict):
                    outs = list(outs)
                emitted[key] = outs
                return outs
            return call
        calls = _Calls(engine, capture)

        def after(inst: Instance, position: int, row: Any) -> None:
            calls.after(inst, position, row)
            if on_input is not None:
                on_input(inst.key, position, row)
            outs = emitted.pop(inst.key, None)
            if outs and on_outputs is not None:
                on_outputs(inst.key, position, outs)
        with engine.hooks(calls.before, after), values.gc_resumed():
            _advance(engine, targets)


class Where:
    """A --where expression over a row's fields (`customer == 'Bob'`; the whole row is `row`):
    a dict's keys, or a named row's fields (a PySpark `Row`, a namedtuple: `values.field_names`), with
    a few builtins. A DataFrame or Arrow batch an operator emitted holds where one of its rows
    does (each a dict of its columns, `row` that dict). A row it raises on does not match; the
    first error is kept."""

    def __init__(self, source: str, columns: list[str] | None = None):
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as e:
            raise UsageError(f"bad --where expression {source!r}: {e.msg}") from None
        self.columns = columns   # the names of a plain tuple row's values, where its operator declares them
        self.code = compile(tree, "<--where>", "eval")
        self.globals = {"__builtins__": {k: getattr(builtins, k) for k in BUILTINS}, "row": None}
        # a row that is not a dict has no fields to name: the expression as a function of `row`
        # alone, a third cheaper per row than eval
        fn = ast.Expression(ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg("row")], kwonlyargs=[],
                                                     kw_defaults=[], defaults=[]), tree.body))
        try:
            self._of_row = eval(compile(ast.fix_missing_locations(fn), "<--where>", "eval"), dict(self.globals))
        except SyntaxError:   # (`row := …` is no lambda's body)
            self._of_row = lambda row: eval(self.code, dict(self.globals, row=row), {})
        # many rows at once: the expression inside one comprehension, no call per row (its own
        # names cannot be the expression's)
        scan = ast.Expression(ast.Lambda(
            ast.arguments(posonlyargs=[], args=[ast.arg("_tt_rows")], kwonlyargs=[], kw_defaults=[], defaults=[]),
            ast.ListComp(ast.Name("_tt_i", ast.Load()), [ast.comprehension(
                ast.Tuple([ast.Name("_tt_i", ast.Store()), ast.Name("row", ast.Store())], ast.Store()),
                ast.Call(ast.Name("_tt_enumerate", ast.Load()), [ast.Name("_tt_rows", ast.Load())], []),
                [tree.body], 0)])))
        try:
            self._scan = eval(compile(ast.fix_missing_locations(scan), "<--where>", "eval"),
                              dict(self.globals, _tt_enumerate=enumerate))
        except SyntaxError:
            self._scan = None
        # a dict row is the expression's locals as it is (no copy per row: a scan tests every row
        # an operator emitted), unless the expression could write into it (`:=`)
        self._assigns = any(isinstance(n, ast.NamedExpr) for n in ast.walk(tree))
        self.equal = _equalities(tree.body)
        self.error: str | None = None
        self.fields: list[str] = []
        self.held = False

    def matching(self, rows: list) -> list[int]:
        """The indices of the rows for which the expression holds: as `self(row)` for each row,
        in one comprehension where no row is a dict and none raises."""
        found = None
        types = set(map(type, rows))
        if self._scan is not None and not any(issubclass(t, dict) or (issubclass(t, tuple) and (
                t is not tuple or self.columns)) or values.is_table(t) for t in types):   # (those bind their fields)
            try:
                found = self._scan(rows)
            except Exception:  # noqa: BLE001  (row by row, to keep the first error as __call__ does)
                pass
        if found is None:
            return [i for i, row in enumerate(rows) if self(row)]
        self.held |= bool(found)
        return found

    def __call__(self, row: Any) -> bool:
        records = None if isinstance(row, dict) else values.table_rows(row)
        if records is not None:   # a DataFrame or Arrow batch: it holds where one of its rows does
            return any(self(r) for r in records)
        names: dict = {}
        try:
            fields = None if isinstance(row, dict) else values.field_names(row)
            if fields is None and type(row) is tuple and self.columns and len(row) == len(self.columns):
                fields = self.columns   # (a UDTF's row: its returnType's names)
            if fields is None and not isinstance(row, dict):
                held = bool(self._of_row(row))
            else:   # a dict's keys, or a named row's fields, are names
                if type(row) is dict and "row" not in row and not self._assigns:
                    names = row
                else:   # (a key that is no name is never looked up)
                    names = dict(row) if fields is None else dict(zip(fields, row))
                    names["row"] = row
                self.globals["row"] = row
                held = bool(eval(self.code, self.globals, names))
        except Exception as e:  # noqa: BLE001  (the user's expression: false for this row, reported once)
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"
                self.fields = sorted(k for k in names if type(k) is str and k != "row")
            return False
        self.held |= held
        return held


def _equalities(body: ast.expr) -> dict[str, Any]:
    """`field == constant` (or `constant == field`) parts of a conjunction, as {field: constant}
    for ints and strings: a row of a table must hold each of them to hold the whole, so a scan may
    skip, by its columns, the rows that do not (store/sources.py `rows_where`)."""
    parts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else [body]
    out: dict[str, Any] = {}
    for part in parts:
        if not (isinstance(part, ast.Compare) and len(part.ops) == 1 and isinstance(part.ops[0], ast.Eq)):
            continue
        pair = (part.left, part.comparators[0])
        name = next((x.id for x in pair if isinstance(x, ast.Name)), None)
        const = next((x.value for x in pair if isinstance(x, ast.Constant)), None)
        if name is not None and name != "row" and type(const) in (int, str) and name not in out:
            out[name] = const
    return out


class _Calls:
    """Every call of an engine's operators passed through `wrap(key, fn)`: `process` for good,
    `finish` during each END step only (an attribute of the operator, removed afterwards)."""

    def __init__(self, engine: Engine, wrap: Callable[[Key, Callable], Callable]):
        self.wrap = wrap
        self._ending: set[Key] = set()
        for key, inst in engine.instances.items():
            inst.runner.call = wrap(key, inst.runner.call)

    def before(self, inst: Instance, position: int, channel: tuple) -> None:
        if channel == END:
            op = inst.runner.op
            op.finish = self.wrap(inst.key, op.finish)
            self._ending.add(inst.key)

    def after(self, inst: Instance, position: int, row: Any) -> None:
        if inst.key in self._ending:
            self._ending.discard(inst.key)
            del inst.runner.op.finish


class _Kept:
    """What the outputs of an operator outside G(θ) were made from, as it logged it itself
    (`tt record --lineage`, core/runtime.py `LineageRunner`): per output, the input positions
    of the rows it kept (a join's stored row, an aggregate's group); and the other way round."""

    def __init__(self, data: array, state: str):
        self.data = np.frombuffer(data, np.uint32) if len(data) else np.zeros(0, np.uint32)
        self.state = state            # how a link through it is labelled: "J1:0 kept rows"
        self.at = _offsets(self.data)   # output -> its count's offset

    def of(self, g: int) -> list[int]:
        if g >= len(self.at):
            return []
        i = int(self.at[g])
        return self.data[i + 1:i + 1 + int(self.data[i])].tolist()

    def readers(self, position: int) -> list[int]:
        """The outputs made from input `position`: a scan of the data for it (a query asks for a
        few positions; an inverted map of the whole log took longer than the scans)."""
        found = np.flatnonzero(self.data == position)
        g = np.searchsorted(self.at, found, side="right") - 1
        return g[self.at[g] != found].tolist()   # (not where a count equals the position)


def _offsets(data: np.ndarray) -> np.ndarray:
    """Where each output's count is in `data` (n, then n positions, per output). Each offset
    depends on the count before it: a Python loop, unless every output has the same count
    (a join whose every output was made from one stored row), checked in one pass."""
    n = len(data)
    if n and n % (int(data[0]) + 1) == 0 and bool((data[::int(data[0]) + 1] == data[0]).all()):
        return np.arange(0, n, int(data[0]) + 1, dtype=np.int64)
    at, i, counts = array("q"), 0, data.tolist()
    while i < n:
        at.append(i)
        i += 1 + counts[i]
    return np.frombuffer(at, np.int64) if len(at) else np.zeros(0, np.int64)


def _advance(engine: Engine, targets: dict[Key, int]) -> None:
    """Each instance in `targets` to at least that position, producers pulled as far as needed:
    consumers first, since a producer's own target may lie before what a consumer needs."""
    for key in sorted(targets, reverse=True):
        if engine.instances[key].count < targets[key]:
            engine.advance_to({key: targets[key]}, pull=True)


def _order(node: Node) -> tuple:
    """Roots in the order of the replay (a backward walk replays up to its root)."""
    if isinstance(node, StateValue):
        return (node.position, node.op, node.instance, -1)
    call = node.call if isinstance(node, Output) else node
    return (call.position, call.op, call.instance, node.index if isinstance(node, Output) else -1)


def _end(inst: Instance) -> int:
    """How far an instance's log goes (a failed run: up to the input it raised on)."""
    return inst.failed_at if inst.failed_at is not None else inst.total
