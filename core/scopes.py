"""Tuple scopes and their overlaps, computed from the Input and Output logs alone.

A tuple is named by where it is consumed: `TupleRef(op, instance, position)` is
input #position of that instance. From the logs:

* the Input log says which channel (port, sending instance) each input came
  from, so input #n is the s-th tuple of its channel;
* the sender's Output log says how many outputs each of its inputs produced
  (and, on a shuffle edge, which instance each output went to), so the s-th
  tuple on the channel is an output of one particular input of the sender.

That links every tuple to its *origin* (the input whose processing emitted it)
and to its *children*. The scope of t (Def. 4.4) is t and, recursively, the
children of everything in it. A tuple's *root* is the first tuple of its origin
chain: an input of θ (the unit a user steps over) or a tuple that entered G(θ)
elsewhere or was emitted by an END step (a *free* tuple, consumed as logged).

Overlap (section 5.3). Roots are ordered by (epoch, θ instance, position):
exactly the order in which an epoch-sorted shuffle delivers them. Root x has no
step-over when some instance downstream consumes a tuple of a later root before
a tuple of x: stepping over x would first require processing that later root.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .graph import Graph
from .logs import END

SCOPE_SETS_KEPT = 64   # scope sets `Provenance.scope_set` keeps


@dataclass(frozen=True, order=True)
class TupleRef:
    op: int
    instance: int
    position: int

    def label(self, graph: Graph) -> str:
        return f"{graph.nodes[self.op].name}:{self.instance}:{self.position}"


def operator_of(label: str) -> str:
    """The operator of an instance or tuple label: 'FE:1' or 'FE:1:42' -> 'FE' (names hold no ':')."""
    return label.split(":", 1)[0]


def instance_of(label: str) -> str:
    """The instance of a tuple label: 'FE:1:42' -> 'FE:1' (an instance label is returned as it is)."""
    return ":".join(label.split(":", 2)[:2])


@dataclass
class ScopeNode:
    ref: TupleRef
    children: list["ScopeNode"] = field(default_factory=list)

    def walk(self) -> Iterable["ScopeNode"]:
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass(frozen=True)
class Overlap:
    root: TupleRef       # the θ input without step-over
    blocker: TupleRef    # the later root whose scope is in the way
    at: TupleRef         # where: the instance consumes the blocker's tuple before the root's


class InstanceIndex:
    """Positions ↔ channels, and inputs ↔ outputs, of one instance."""

    def __init__(self, runs: list[tuple[int, int, int]], counts: array, dests: dict[int, array],
                 n_dest: dict[int, int], arrays: "type[LogArrays] | None" = None):
        self.runs = runs
        self.run_starts = array("q")
        self.run_seq = array("q")         # channel sequence number at the start of each run
        self.channel_runs: dict[tuple[int, int], list[int]] = {}  # channel -> run indexes
        pos, seqs = 0, {}
        for idx, (port, src, n) in enumerate(runs):
            ch = (port, src)
            self.run_starts.append(pos)
            self.run_seq.append(seqs.get(ch, 0))
            self.channel_runs.setdefault(ch, []).append(idx)
            seqs[ch] = seqs.get(ch, 0) + n
            pos += n
        self.total = pos
        self.channel_totals = seqs
        self._channel_seq_starts = {ch: [self.run_seq[i] for i in idxs] for ch, idxs in self.channel_runs.items()}
        self._arrays = arrays or LogArrays
        self.cum = self._arrays.running_sums(counts)   # outputs before input #n: cum[n]
        self.dests = dests
        self._n_dest = n_dest
        self._rank: dict[int, array] = {}                      # edge -> `rank`, on first use
        self._sent: dict[tuple[int, int], array] = {}          # (edge, destination) -> `sent_to`, on first use

    def channel_at(self, position: int) -> tuple[int, int, int] | None:
        """(port, src, seq on that channel) of input #position."""
        if not 0 <= position < self.total:
            return None
        idx = bisect.bisect_right(self.run_starts, position) - 1
        port, src, _ = self.runs[idx]
        return port, src, self.run_seq[idx] + position - self.run_starts[idx]

    def position_of(self, channel: tuple[int, int], seq: int) -> int | None:
        """The input position of the seq-th tuple of a channel (None if never consumed)."""
        starts = self._channel_seq_starts.get(channel)
        if starts is None or seq >= self.channel_totals[channel]:
            return None
        j = bisect.bisect_right(starts, seq) - 1
        idx = self.channel_runs[channel][j]
        return self.run_starts[idx] + seq - self.run_seq[idx]

    def outputs_of(self, position: int) -> range:
        if position + 1 >= len(self.cum):
            return range(0)
        return range(self.cum[position], self.cum[position + 1])

    def input_of_output(self, g: int) -> int:
        return bisect.bisect_right(self.cum, g) - 1

    def rank(self, edge: int) -> array:
        """Per output sent on shuffle `edge`: its sequence number at its destination."""
        found = self._rank.get(edge)
        if found is None:
            found, by = self._arrays.by_destination(self.dests[edge], self._n_dest[edge])
            self._rank[edge] = found
            self._sent.update(((edge, d), sent) for d, sent in enumerate(by))   # (grouped already)
        return found

    def sent_to(self, edge: int, dest: int) -> array:
        """The outputs sent on shuffle `edge` to instance `dest`, in order. One destination's
        alone: a backward walk asks for the few it crosses, and a pass over the sender's
        destinations for each costs less than grouping all of them (W2's back query crosses 11
        senders, 25 to 390,112 rows each, to one of 4 destinations: 26 ms grouping them all)."""
        found = self._sent.get((edge, dest))
        if found is None:
            found = self._sent[(edge, dest)] = self._arrays.sent_to(self.dests[edge], dest)
        return found


class LogArrays:
    """Sums and groupings over the logs' arrays, in pure Python (the core runs in executors,
    without numpy); the replay layer passes `store.reader.NumpyLogArrays`: the same, faster."""

    @staticmethod
    def running_sums(counts: array) -> array:
        """0, then the running sums of `counts`."""
        return array("q", itertools.accumulate(counts, initial=0))

    @staticmethod
    def by_destination(dests: array, n: int) -> tuple[array, list[array]]:
        """Per output, its sequence number among those sent to its destination; per destination,
        its outputs in order."""
        rank, by = array("q"), [array("q") for _ in range(n)]
        for g, d in enumerate(dests):
            rank.append(len(by[d]))
            by[d].append(g)
        return rank, by

    @staticmethod
    def sent_to(dests: array, dest: int) -> array:
        """The outputs whose destination is `dest`, in order (`by_destination(...)[1][dest]`)."""
        return array("q", (g for g, d in enumerate(dests) if d == dest))


class Provenance:
    """Origins, children, scopes, roots and overlaps over the logs of G(θ)."""

    def __init__(self, graph: Graph, logs: Callable[[int, int], tuple[list, array, dict[int, array]]],
                 barrier_positions: dict[tuple[int, int], list[int]], arrays: type[LogArrays] | None = None):
        """`logs(op, instance)` gives (input runs, output counts, {shuffle edge: dests});
        `barrier_positions[(θ op, i)]` lists where θ instance i took barriers 1, 2, ...;
        `arrays` sums and groups the logs' arrays (`LogArrays`, or a faster one)."""
        self.graph = graph
        self._logs = logs
        self._arrays = arrays
        self._index: dict[tuple[int, int], InstanceIndex] = {}
        self.barriers = barrier_positions
        self._ranks: dict[tuple[int, int], list] | None = None
        self._scope_sets: dict[TupleRef, frozenset[TupleRef]] = {}

    def index(self, op: int, instance: int) -> InstanceIndex:
        key = (op, instance)
        idx = self._index.get(key)
        if idx is None:
            runs, counts, dests = self._logs(op, instance)
            n_dest = {e: self.graph.nodes[self.graph.edges[e].dst].instances for e in dests}
            idx = self._index[key] = InstanceIndex(runs, counts, dests, n_dest, self._arrays)
        return idx

    # --- one tuple --------------------------------------------------------------

    def is_internal(self, op: int, port: int) -> bool:
        return self._sender_in(op, port, self.graph.in_g)

    def is_logged(self, op: int, port: int) -> bool:
        """Whether the sender on `port` kept logs: in G(θ), or outside it with `tt record --lineage`."""
        return self._sender_in(op, port, self.graph.logged)

    def _sender_in(self, op: int, port: int, nodes: set[int]) -> bool:
        node = self.graph.nodes[op]
        return 0 <= port < len(node.inputs) and self.graph.edges[node.inputs[port]].src in nodes

    def origin(self, ref: TupleRef) -> TupleRef | None:
        """The producer input whose processing emitted `ref` (None: it entered G(θ) here, or is END)."""
        emitted = self.emitted_by(ref)
        return emitted[0] if emitted is not None else None

    def emitted_by(self, ref: TupleRef, whole: bool = False) -> tuple[TupleRef, int] | None:
        """(origin, j): `ref` is the j-th output of its origin's processing (None as for `origin`).
        `whole`: follow the logs kept outside G(θ) too (`tt record --lineage`), for lineage."""
        ch = self.index(ref.op, ref.instance).channel_at(ref.position)
        if ch is None:
            return None
        port, src, seq = ch
        if (port, src) == END or not (self.is_logged(ref.op, port) if whole else self.is_internal(ref.op, port)):
            return None
        edge = self.graph.edges[self.graph.nodes[ref.op].inputs[port]]
        prod = self.index(edge.src, src)
        g = prod.sent_to(edge.id, ref.instance)[seq] if edge.shuffle else seq
        n = prod.input_of_output(g)
        return TupleRef(edge.src, src, n), g - prod.cum[n]

    def children(self, ref: TupleRef) -> list[TupleRef]:
        """Where the outputs of input `ref` were consumed (those consumed so far in the logs)."""
        return [c for _, _, c in self.consumers(ref) if c is not None]

    def consumers(self, ref: TupleRef, only: int | None = None) -> list[tuple[int, int, TupleRef | None]]:
        """(out edge, j, where it was consumed) for the j-th output of input `ref` (every j, or
        `only`) on each of its operator's out edges, edge by edge; None where it was not consumed
        (by the end of the logs)."""
        idx = self.index(ref.op, ref.instance)
        outs = idx.outputs_of(ref.position)
        first = outs.start
        if only is not None:
            outs = outs[only:only + 1]
        found = []
        for e in self.graph.out_edges(self.graph.nodes[ref.op]):
            dests, rank = (idx.dests[e.id], idx.rank(e.id)) if e.shuffle else (None, None)
            for g in outs:
                if e.shuffle:
                    d, seq = dests[g], rank[g]
                else:
                    d, seq = ref.instance, g
                pos = self.index(e.dst, d).position_of((e.port, ref.instance), seq)
                found.append((e.id, g - first, None if pos is None else TupleRef(e.dst, d, pos)))
        return found

    def scope(self, ref: TupleRef) -> ScopeNode:
        root = ScopeNode(ref)
        stack = [root]
        while stack:
            node = stack.pop()
            node.children = [ScopeNode(c) for c in self.children(node.ref)]
            stack.extend(node.children)
        return root

    def scope_set(self, ref: TupleRef) -> frozenset[TupleRef]:
        """The tuples of `ref`'s scope. Kept for the last few tuples asked about: the planner, the
        step-into stack and the TUI ask about the same ones at every position."""
        found = self._scope_sets.get(ref)
        if found is None:
            if len(self._scope_sets) >= SCOPE_SETS_KEPT:
                self._scope_sets.pop(next(iter(self._scope_sets)))
            found = self._scope_sets[ref] = frozenset(n.ref for n in self.scope(ref).walk())
        return found

    def root(self, ref: TupleRef) -> TupleRef:
        while True:
            o = self.origin(ref)
            if o is None:
                return ref
            ref = o

    def is_theta_root(self, ref: TupleRef) -> bool:
        if ref.op != self.graph.theta:
            return False
        ch = self.index(ref.op, ref.instance).channel_at(ref.position)
        return ch is not None and (ch[0], ch[1]) != END

    def epoch(self, theta_instance: int, position: int) -> int:
        """How many barriers θ instance i had taken before consuming input #position."""
        return bisect.bisect_right(self.barriers.get((self.graph.theta, theta_instance), []), position)

    def rank(self, root: TupleRef) -> tuple[int, int, int]:
        return (self.epoch(root.instance, root.position), root.instance, root.position)

    # --- all tuples -----------------------------------------------------------------

    def roots_of_all(self) -> dict[tuple[int, int], list]:
        """Per instance, the root rank (or None for free tuples) of every input, in order."""
        if self._ranks is not None:
            return self._ranks
        g = self.graph
        ranks: dict[tuple[int, int], list] = {}
        for node in g.nodes:  # creation order is topological
            if node.id not in g.in_g:
                continue
            for i in range(node.instances):
                idx = self.index(node.id, i)
                out: list = []
                if node.id == g.theta:
                    for n in range(idx.total):
                        ch = idx.channel_at(n)
                        out.append(None if (ch[0], ch[1]) == END else self.rank(TupleRef(node.id, i, n)))
                else:
                    for n in range(idx.total):
                        o = self.origin(TupleRef(node.id, i, n))
                        out.append(None if o is None else ranks[(o.op, o.instance)][o.position])
                ranks[(node.id, i)] = out
        self._ranks = ranks
        return ranks

    def overlaps(self) -> list[Overlap]:
        """θ inputs without step-over, each with the later root in its way and where."""
        g = self.graph
        ranks = self.roots_of_all()
        found: dict[tuple, Overlap] = {}
        for (op, i), rs in ranks.items():
            if op == g.theta:
                continue
            best, best_n = None, -1
            for n, r in enumerate(rs):
                if r is None:
                    continue
                if best is not None and r < best:
                    if r not in found:
                        found[r] = Overlap(self._ref_of_rank(r), self._ref_of_rank(best), TupleRef(op, i, best_n))
                elif best is None or r > best:
                    best, best_n = r, n
        return sorted(found.values(), key=lambda o: self.rank(o.root))

    def _ref_of_rank(self, rank: tuple[int, int, int]) -> TupleRef:
        return TupleRef(self.graph.theta, rank[1], rank[2])

    def theta_roots(self) -> int:
        """How many θ inputs there are (END steps excluded)."""
        g = self.graph
        return sum(self.index(g.theta, i).total - self.index(g.theta, i).channel_totals.get(END, 0)
                   for i in range(g.nodes[g.theta].instances))
