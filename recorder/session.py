"""A recording session: `tt record` opens one, the job's `Dataflow.run()` uses it.

`tt record job.py` creates the run file, makes this session *active* and runs the
job in-process. When the job calls `flow.run()`, the dataflow asks the active
session to begin: the plan, the operators' code and initial states go into the
run file and a coordinator starts beside the driver. Without an active session
(`python job.py`) a dataflow runs with recording off.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from ..core import code_pickle, values
from ..core.errors import RunFileWriteError, UsageError
from ..core.graph import Graph
from ..store import blobs, schema
from ..store.trust import module_code, sign_run
from ..store.writer import Writer
from . import job_modules
from .coordinator import Coordinator
from .task import Recording

_ACTIVE: "RecordingSession | None" = None


def active() -> "RecordingSession | None":
    return _ACTIVE


class RecordingSession:
    def __init__(self, out: str | Path, job: str | Path, argv: list[str], *, watch: str | None = None,
                 every: float | None = None, when: str | None = None, checkpoint_tau: float | None = None,
                 on_event: Callable[[str, dict], None] | None = None, copy_sources: bool = False,
                 lineage: bool = False):
        self.out = Path(out)
        self.copy_sources = copy_sources  # copy Parquet sources' rows, not their positions (store/sources.py)
        self.lineage = lineage            # log every operator's Input/Output for lineage (docs/LINEAGE.md §5)
        self.job = Path(job)
        self.watch = watch
        self.every = every
        self.when = when
        self.checkpoint_tau = checkpoint_tau  # online checkpointing under this bound, if set
        self._user_event = on_event or (lambda kind, info: None)
        self.on_event = self._event
        self.warnings: list[str] = []   # what the recording warned of (meta 'warnings')
        self.run_id = secrets.token_hex(8)
        self.db = schema.create(self.out)
        self.writer = Writer(self.db.conn)
        self.status_saved = True   # False when the run's final status could not be written
        self._spark_context = None
        self._cancelling = threading.Lock()
        self._salvaged = False
        self.interrupted = False   # Ctrl-C while the dataflow ran
        self._old_sigint = None
        self.writer.on_error(self._write_failed)
        self.coordinator: Coordinator | None = None
        self.graph: Graph | None = None
        self.hooked = False          # the run records hooked PySpark calls (docs/HOOKS.md)
        self._next_file_id = 1       # source_files ids of the hooked sources read by reference
        self._hook_lock = threading.Lock()
        self._codes: dict[int, bytes] = {}   # operator id -> pickled code, for the run's signature
        self._hook_batches: dict[int, str] = {}   # hooked operator id -> the micro-batch of its last call (foreachBatch)
        self._said_remade: set[tuple[str, str]] = set()   # (kind, site) of foreachBatch calls said to pickle otherwise
        self._scanned: set[int] = set()   # hooked sources whose reading (referenced or copied) is stored
        self._modules: dict[str, tuple] = {}  # the job's own modules, stored and signed (job_modules.py)
        self._imported_before = frozenset(sys.modules)   # modules not the job's, unless from its folder
        self._said_too_many = False
        self._modules_stamp: tuple[int, int] | None = None   # `_note_modules`: sys.modules when it last looked
        self.spark_edges: list[dict] = []        # what Spark does between two hooked operators
        self.plan_nodes: dict[str, str] = {}     # hooked operator -> its node in Spark's plans, where not its name
        self._stop_watching: Any = None          # a streaming query's micro-batch listener
        self.queries: dict[str, dict] = {}       # streaming query id -> {"checkpoint", "name"}
        self.recording: Recording | None = None
        self.finished = False
        values.use_encoding(values.ENCODING)   # (this process may have replayed an older run: states as this tt encodes them)
        self.writer.submit([(
            "INSERT INTO run (id, status, job, argv, started, options, recorder_pid, recorder_host) "
            "VALUES (1,?,?,?,?,?,?,?)",
            [("recording", str(self.job), orjson.dumps(argv).decode(), time.time(),
              orjson.dumps({"watch": watch, "every": every, "when": when,
                            "checkpoint": "online" if checkpoint_tau else None, "tau": checkpoint_tau,
                            "copy_sources": copy_sources, "lineage": lineage}).decode(),
              os.getpid(),
              socket.gethostname())]),
            ("INSERT OR REPLACE INTO meta VALUES ('python', ?)", [(orjson.dumps(code_pickle.python()).decode(),)]),
            ("INSERT OR REPLACE INTO meta VALUES ('state_encoding', ?)", [(str(values.ENCODING),)])])

    # --- activation ---------------------------------------------------------

    def __enter__(self) -> "RecordingSession":
        global _ACTIVE
        _ACTIVE = self
        return self

    def __exit__(self, *exc) -> None:
        global _ACTIVE
        _ACTIVE = None

    # --- the dataflow -------------------------------------------------------

    def begin(self, graph: Graph, spark: Any, job_dir: Path | None) -> Recording | None:
        """Called by `Dataflow.run()`: store the plan and start the coordinator."""
        if self.graph is not None:
            self.on_event("warning", {"message": "the job runs a second dataflow; tt records only the first"})
            return None
        theta = graph.choose_theta(self.watch)
        if self.lineage:
            graph.log_lineage()
        plan_id = None
        if self.checkpoint_tau is not None:
            plan_id = self.writer.call(lambda conn: conn.execute(
                "INSERT INTO checkpoint_plans (policy, tau, created, active, info) VALUES ('online',?,?,1,'{}')",
                (self.checkpoint_tau, time.time())).lastrowid)
        master = self._start(graph, spark.sparkContext, plan_id)
        self._write_plan(graph, master, spark.version, job_dir)
        if self.every:
            self.coordinator.start_timer(self.every)
        self.on_event("begin", {"theta": theta.name, "address": self.coordinator.address})
        return self.recording

    def _start(self, graph: Graph, sc: Any, plan_id: int | None = None) -> str:
        """The run's coordinator beside the driver, for a dataflow or a hooked job; returns Spark's master."""
        self.graph = graph
        self._spark_context = sc
        if self.writer.failed:
            raise self.write_failure
        self._install_sigint()
        master = sc.master or ""
        conf = None if master.startswith("local") else sc.getConf()   # (a copy of all of it: 10 ms)
        host = "127.0.0.1" if conf is None else conf.get("spark.driver.host", "127.0.0.1")
        self.coordinator = Coordinator(self.writer, graph, self.run_id, host=host,
                                       bind=Coordinator.bind_address(master, conf), on_event=self.on_event,
                                       online_tau=self.checkpoint_tau, plan_id=plan_id)
        self.coordinator.spark_stage_tasks = _stage_tasks(sc)
        self.recording = Recording(self.coordinator.address, self.coordinator.secret, self.run_id, self.when)
        return master

    def _write_plan(self, graph: Graph, master: str, spark_version: str, job_dir: Path | None) -> None:
        keys = [(e.id, code_pickle.dumps(e.key)) for e in graph.edges if e.key is not None]
        files = _job_files(self.job, job_dir)
        plan = orjson.dumps(graph.describe()).decode()
        theta = graph.nodes[graph.theta].name
        operators = self._operator_rows(graph.nodes)
        modules = self._job_modules(job_dir or self.job.parent)
        signature = sign_run(self.run_id, list(self._codes.values()) + [c for _, c in keys]
                             + module_code(modules))
        self.writer.submit([
            *operators,
            ("INSERT INTO edge_keys VALUES (?,?)", keys),
            ("INSERT OR REPLACE INTO job_files VALUES (?,?)", list(files.items())),
            *job_modules.rows(modules),
            ("UPDATE run SET plan=?, theta=?, master=?, spark_version=?, signature=? WHERE id=1",
             [(plan, theta, master, spark_version, signature)]),
            ("INSERT INTO interactions VALUES (0, ?, 'start', '{}')", [(time.time(),)]),
        ])

    def _job_modules(self, folder: Path) -> dict[str, tuple]:
        """The job's own modules (recorder/job_modules.py), those seen before kept (`_note_modules`),
        said once when there are too many to store."""
        modules, left = job_modules.job_modules(folder, self._imported_before)
        modules = {**modules, **self._modules}   # (a module stored is stored as it was first read)
        if left and not self._said_too_many:
            self._said_too_many = True
            self.on_event("warning", {"message": (
                f"the job imports {len(modules) + len(left)} modules of its own; the run stores the first "
                f"{len(modules)}, and a replay imports the others ({', '.join(left[:3])}, …) as their files "
                f"read then")})
        return modules

    def _note_modules(self) -> None:
        """Store the job's modules imported since they were last looked for: a hooked call's
        function may come from a module the job imported after its first one (from a zip Spark
        shipped with `addPyFile`, say). Only where a module came since (a streaming job's
        foreachBatch makes its hooked calls again every micro-batch)."""
        from ..core.libraries import modules_stamp

        stamp = modules_stamp()
        if stamp == self._modules_stamp:
            return
        self._modules_stamp = stamp
        modules = self._job_modules(self.job.parent)
        if modules.keys() != self._modules.keys():
            self._modules = modules
            self.writer.submit(job_modules.rows(modules))

    def write_sources(self, refs: dict[int, Any], copied: dict[int, str]) -> None:
        """Store which sources are read by reference (their files) and why the others are copied."""
        scans, files = [], []
        for source, ref in refs.items():
            scans.append((source, "parquet", orjson.dumps(ref.columns).decode(), orjson.dumps(ref.stored_info()).decode()))
            files += [(fid, source, f.uri, f.size, f.mtime_ms, f.footer) for fid, f in ref.file_ids()]
        for source, why in copied.items():
            scans.append((source, None, "[]", orjson.dumps({"copied": why}).decode()))
        self.writer.submit([
            ("INSERT INTO source_scans (source, format, columns, info) VALUES (?,?,?,?)", scans),
            ("INSERT INTO source_files VALUES (?,?,?,?,?,?)", files)])

    def update_plan(self, graph: Graph) -> None:
        """Store the plan again: choosing how sources are recorded changed it (`Graph.by_reference`)."""
        self.writer.submit([("UPDATE run SET plan=? WHERE id=1", [(orjson.dumps(graph.describe()).decode(),)])])

    def _operator_rows(self, nodes: list) -> list:
        """The statements that store `nodes`: code, kind, place in G(θ), initial state."""
        g = self.graph
        ops, initial, states = [], [], {}
        for n in nodes:
            code = self._codes[n.id] = code_pickle.dumps(n.op)
            data = values.dumps(n.op.state())
            h = hashlib.blake2b(data, digest_size=16).digest()
            states[h] = blobs.compress(data)
            initial.append((n.id, h))
            ops.append((n.id, n.name, n.kind, f"{type(n.op).__module__}.{type(n.op).__qualname__}",
                        n.stage, n.instances, int(n.id in g.in_g), int(n.id == g.theta), code))
        return [("INSERT INTO operators VALUES (?,?,?,?,?,?,?,?,?)", ops),
                ("INSERT OR IGNORE INTO states VALUES (?,?,?)", [(h, len(d), d) for h, d in states.items()]),
                ("INSERT INTO initial_states VALUES (?,?)", initial)]

    # --- hooked PySpark calls (docs/HOOKS.md) -----------------------------------

    def hook(self, fn: Any, kind: str, site: str, sc: Any, upstream: list[tuple[str, str, Any]] = (),
             shared: bool = False, tee: Any = None, columns: list[str] | None = None) -> Any:
        """A patched PySpark method was called by the job: make its call site an operator
        of the run and return what Spark runs in place of `fn`. The first call begins the run.
        `upstream`: the hooked operators whose rows reach this one through Spark, and what
        Spark did to them on the way (the DAG's opaque edges). `shared`: PySpark runs it for
        every query that names it (a UDF or UDTF registered for SQL). `tee`: for a
        transformWithStateInPandas without an initial state, the settings PySpark converts its
        batches with (`frames.conversion`): its tasks keep their input batches and log each key's
        DataFrame as its place in them (recorder/teed_batches.py). `columns`: the names of the
        columns of the rows it yields as tuples (a UDTF's `returnType`)."""
        from ..core.graph import SOURCE
        from ..core.hooked import SINK_KINDS, name_of, operator_for, shared_attributes_of
        from ..core.operator import Source

        with self._hook_lock:
            if self.graph is None:
                self._begin_hooked(sc)
            elif self.hooked:
                self._note_modules()
            else:
                self.on_event("warning", {"message": f"{kind} at {site} runs unrecorded: the job "
                                                     f"records a tt.Dataflow"})
                return fn
            g = self.graph
            op, batch = operator_for(fn, kind, site), sc.getLocalProperty("streaming.sql.batchId")
            if columns:
                op.output_columns = list(columns)
            again = self._again(op, batch)
            if again is not None:   # foreachBatch's call of the micro-batch before, made again
                self._hook_batches[again.id] = batch
                self._add_spark_edges(upstream, g.stages[again.stage].source)
                return self._call(fn, kind, g.stages[again.stage], sc, tee)
            base = name_of(fn)
            name = _unique(g, kind.rsplit(".", 1)[-1] if base == "lambda" else base)   # a lambda: `map`
            source = g.add_node(_unique(g, f"{name}.in"), SOURCE, Source())
            node = g.add_node(name, kind, op)
            stage = g.add_hooked(source, node)
            if batch is not None:
                self._hook_batches[node.id] = batch
            if shared:
                self.coordinator.shared_stages.add(stage.id)
            self._add_spark_edges(upstream, source.id)
            if g.theta is None and self.watch in (None, name):
                g.theta = node.id
                self.on_event("begin", {"theta": name, "address": self.coordinator.address})
            self.writer.submit(self._operator_rows([source, node]))
            self.on_event("hooked", {"name": name, "kind": kind, "site": site})
            shared_attributes = shared_attributes_of(fn)
            if shared_attributes:   # (state no task owns: a replay runs it otherwise, verify says where)
                one = len(shared_attributes) == 1
                self.on_event("warning", {"message": (
                    f"{name} ({kind.split('.')[-1]} at {site}) keeps state in {'an attribute' if one else 'attributes'} "
                    f"of its class ({', '.join(shared_attributes)}), which every instance shares, and with them every "
                    f"task one Python worker runs: a task starts from what the worker's earlier tasks left there, and "
                    f"a replay runs its instances in one process, so it may differ from the run (tt verify says "
                    f"where). Make {'it' if one else 'them'} the instance's, in __init__, to keep {'it' if one else 'them'} "
                    f"per {'handler' if kind == 'udtf' else 'task'}")})
            if kind in SINK_KINDS:   # (what it writes is seen by no log: core/outside_effects.py says a file)
                self.on_event("warning", {"message": f"{name} ({kind.split('.')[-1]} at {site}) is a sink: a replay "
                                                     f"(tt debug, tt verify) runs it again; a file it opens for writing is then a scratch copy, "
                                                     f"but what it sends to a database or a service is sent again"})
            return self._call(fn, kind, stage, sc, tee)

    def _call(self, fn: Any, kind: str, stage: Any, sc: Any, tee: Any = None) -> Any:
        """What Spark runs in place of `fn`, the hooked operator of `stage` (recorder/hooked_calls.py)."""
        from ..core.hooked import GROUP_ITER_KINDS, GROUP_KINDS, GROUP_STATE_KIND, PROCESSOR_KINDS
        from .hooked_calls import (GroupedCall, GroupedIterCall, HookedCall, HookedGroupStateFunction, HookedProcessor,
                                   TaskFeed, hooked_udtf_class)

        g = self.graph
        if kind in GROUP_KINDS or kind in GROUP_ITER_KINDS or kind in PROCESSOR_KINDS or \
                kind in (GROUP_STATE_KIND, "udtf"):   # many calls a task
            feed = TaskFeed(g.for_stage(stage.id), stage.id, self.recording, sc.accumulator(0))
            if kind in PROCESSOR_KINDS:
                return HookedProcessor(feed, tee)
            if kind == GROUP_STATE_KIND:
                return HookedGroupStateFunction(feed)
            if kind in GROUP_ITER_KINDS:
                return GroupedIterCall(fn, kind, feed)
            return hooked_udtf_class(fn, feed) if kind == "udtf" else GroupedCall(fn, kind, feed)
        return HookedCall(fn, g.for_stage(stage.id), stage.id, self.recording)

    def _again(self, op: Any, batch: str | None) -> Any:
        """The operator `op` is made again, or None. A streaming query's `foreachBatch` function
        runs once per micro-batch, and makes each of its hooked calls anew: each was an operator
        of its own (`Scale`, `Scale_2`, … one a micro-batch). Where the call site's operator of
        an earlier micro-batch pickles to the same bytes (the same code and the same initial
        state), its tasks are more instances of that operator, numbered by their slots
        (micro-batch, partition), as a streaming `mapInPandas`'s are. Outside a micro-batch
        (`batch` None) tasks are numbered by partition, so a call made again is a new operator.
        One that pickles otherwise (a closure holding the batch id) is a new operator too, each
        micro-batch: the run says so once per call site, as its DAG grows without end."""
        if batch is None:
            return None
        differs = None
        for n in self.graph.nodes:
            if n.kind != op._kind or getattr(n.op, "_site", None) != op._site or \
                    self._hook_batches.get(n.id) in (None, batch):   # (twice in one micro-batch: slots alike)
                continue
            op._tt_name = n.name
            if code_pickle.dumps(op) == self._codes.get(n.id):
                return n
            differs = n
        op._tt_name = ""
        if differs is not None and (op._kind, op._site) not in self._said_remade:
            self._said_remade.add((op._kind, op._site))
            self.on_event("warning", {"message": (
                f"{differs.name} ({op._kind} at {op._site}) is made again in each micro-batch of foreachBatch, "
                f"and pickles otherwise each time (its closure or state holds something of the micro-batch, as "
                f"its id?): each micro-batch's is an operator of its own, and the run's DAG grows by one a "
                f"micro-batch; take what differs from the rows, or keep it out of the function, for one operator")})
        return None

    def _add_spark_edges(self, upstream: list[tuple[str, str, list[str] | None]], source: int) -> None:
        """The DAG's opaque edges into the hooked source `source` (each once); `keys` where one
        aggregate lies between (recorder/spark_edges.py `aggregate_keys`)."""
        by_name = {n.name: n.id for n in self.graph.nodes}
        for up, label, keys in upstream:
            edge = {"src": by_name.get(up), "dst": source, "label": label}
            if keys is not None:
                edge["keys"] = keys
            if edge["src"] is not None and edge not in self.spark_edges:
                self.spark_edges.append(edge)

    def referenced_units(self, df: Any, call: Any, kind: str) -> Any:
        """`df.mapInArrow(call)` or `df.mapInPandas(call)` where `df` is a plain Parquet scan
        (recorder/sources.py): its units are stored as their rows' positions in the files, not
        copied (`blobs.REF_BATCH`, `REF_PANDAS`: a DataFrame is rebuilt by PySpark's conversion
        with the settings it ran with, recorder/frames.py). Returns the DataFrame Spark should
        map over: `df`, or `df` with position columns where they cannot be counted (the task
        strips them). Any other `df` is copied, and `source_scans` says why (`tt inspect`)."""
        from . import frames, sources
        from .hooked_calls import HookedCall

        if not isinstance(call, HookedCall) or df.isStreaming:   # (unrecorded; a stream's files change)
            return df
        source = call.graph.stages[call.stage_id].source
        if source in self._scanned:   # (foreachBatch's call made again: its first micro-batch said how)
            return df
        self._scanned.add(source)
        ref = None
        why = "tt record --copy-sources" if self.copy_sources else frames.available() if kind == "mapInPandas" else None
        if why is None and df.sparkSession.sparkContext.getLocalProperty("streaming.sql.batchId") is not None:
            why = "a micro-batch of a streaming query (foreachBatch): its files differ from one to the next"
        if why is None:
            ref, why = sources.reference(df)
        schema = None
        if ref is not None and kind == "mapInPandas":
            ref.info["pandas"] = frames.conversion(df.sparkSession)
            schema = frames.arrow_schema(df, ref.info["pandas"])
        with self._hook_lock:
            if ref is None:
                self.write_sources({}, {source: why})
                return df
            ref.first_id, self._next_file_id = self._next_file_id, self._next_file_id + len(ref.files)
            self.write_sources({source: ref}, {})
            if schema is not None:   # (an Arrow batch's comes from the task that saw it)
                self.writer.submit([("UPDATE source_scans SET arrow_schema=? WHERE source=?", [(schema, source)])])
        call.source_ref = ref.task_ref(source)
        call.source_ref.scan = ref.scan(source, schema)
        return sources.augment(df, ref)

    def watch_micro_batches(self, spark: Any) -> None:
        """A streaming query runs a hooked processor: each of its micro-batch ends is an
        interaction (recorder/micro_batches.py), from here until the run ends."""
        from .micro_batches import watch

        with self._hook_lock:
            if self._stop_watching is None and self.coordinator is not None:
                self._stop_watching = watch(spark, self.coordinator, self._query_seen)

    def _query_seen(self, query: str, info: dict) -> None:
        """A streaming query started: where its checkpoint (Spark's state store) lives."""
        self.queries[query] = info

    def hooked_names(self) -> list[str]:
        """The hooked operators of the run so far (what Spark's plans name them)."""
        from ..core.hooked import HOOKED_KINDS

        g = self.graph
        return [] if g is None or not self.hooked else [n.name for n in g.nodes if n.kind in HOOKED_KINDS]

    def _begin_hooked(self, sc: Any) -> None:
        """The job's first hooked call: the run's coordinator and its first rows."""
        if self.checkpoint_tau is not None:
            raise UsageError("--checkpoint online does not take hooked PySpark functions yet; "
                             "record without it and run `tt checkpoint` afterwards")
        self.hooked = True
        use_this_python(sc)
        master = self._start(Graph(), sc)
        if self.lineage:
            self.on_event("warning", {"message": "--lineage applies to tt.Dataflow jobs: a hooked job's "
                                                 "functions are all recorded already, and lineage crosses "
                                                 "Spark's own operators between them by matching rows' values"})
        self._modules = self._job_modules(self.job.parent)
        self.writer.submit([
            ("INSERT OR REPLACE INTO job_files VALUES (?,?)", list(_job_files(self.job, self.job.parent).items())),
            *job_modules.rows(self._modules),
            ("UPDATE run SET master=?, spark_version=? WHERE id=1", [(master, sc.version)]),
            ("INSERT INTO interactions VALUES (0, ?, 'start', '{}')", [(time.time(),)]),
        ])
        if self.every:
            self.coordinator.start_timer(self.every)

    def _run_empty_partitions(self, c: Coordinator) -> None:
        """Spark runs no Python for a partition without a group, so a grouped function's
        empty partitions never report. Each is run here, on the driver, as the empty task
        it is (no unit, then the END step), so every instance has a complete log."""
        from .task import StageTask

        for stage in self.graph.stages:
            seen = c.partitions_seen.get(stage.id, 0)
            for p in range(seen):
                if (stage.id, p) not in c.tasks:
                    task = StageTask(self.graph.for_stage(stage.id), stage.id, p, self.recording,
                                     {"spark_attempt": None, "number": 0})
                    task.open_units()
                    task.end_units()

    def _write_hooked_plan(self) -> None:
        """At the end of a hooked run: the whole DAG, θ and the signature over every operator."""
        g = self.graph
        self._learn_source_instances(self.coordinator)
        self._note_modules()
        if g.theta is None:
            first = next(n for n in g.nodes if n.id in g.in_g)
            g.theta = first.id
            names = ", ".join(n.name for n in g.nodes if n.id in g.in_g)
            self.on_event("warning", {"message": f"no hooked operator is named {self.watch!r} (the job's: {names}); "
                                                 f"watched {first.name} instead"})
        signature = sign_run(self.run_id, list(self._codes.values()) + module_code(self._modules))
        self.writer.submit([
            ("UPDATE operators SET is_theta = (id = ?), instances=? WHERE id=?",
             [(g.theta, n.instances, n.id) for n in g.nodes]),
            ("UPDATE run SET plan=?, theta=?, signature=? WHERE id=1",
             [(orjson.dumps({**g.describe(),
                             "spark_edges": self.spark_edges, "micro_batches": self._micro_batches(),
                             "queries": self._queries()}).decode(),
               g.nodes[g.theta].name, signature)])])

    def _micro_batches(self) -> dict[str, list[list[int]]]:
        """{operator: [[micro-batch, partition(, run)] of each instance]} for a streaming query's."""
        g, out = self.graph, {}
        for stage, slots in self.coordinator.slots.items():
            by_instance = sorted(slots.items(), key=lambda kv: kv[1])
            out[g.hooked_node(stage).name] = [list(slot) for slot, _ in by_instance]
        return out

    def _queries(self) -> dict[str, dict]:
        """{query id: {"checkpoint": its resolved root, "name", "operators": [hooked operators it
        ran]}} for the streaming queries seen, so `tt verify --statestore` finds Spark's store."""
        g, out = self.graph, {}
        for query, info in self.queries.items():
            out[query] = {**info, "operators": []}
        for stage, query in self.coordinator.stage_queries.items():   # the hooked stages with streaming tasks
            out.setdefault(query, {"checkpoint": None, "name": None, "operators": []})
            out[query]["operators"].append(g.hooked_node(stage).name)
        return out

    def end(self, *, ok: bool, error: str | None = None, status: str | None = None,
            input_bytes: int | None = None) -> None:
        """The dataflow finished (or failed): the end interaction, the run's status."""
        if self.finished:
            return
        self.finished = True
        if self.interrupted:
            ok, status, error = False, "interrupted", "interrupted by the user"
        c = self.coordinator
        if self._stop_watching is not None:
            self._stop_watching()
        if c is not None and ok:   # the job is done, so is every query's last micro-batch
            for query, batch in list(c.micro_batch.items()):
                c.micro_batch_ended(query, batch)
        if c is not None and ok and self.hooked:
            self._run_empty_partitions(c)
        if c is not None:
            c.close()
        if self.writer.failed:
            self._salvage()
            return
        if c is not None:
            if ok:
                with c.lock:
                    c.k += 1
                    k = c.k
                    c._decide_checkpoint(k)
                self.writer.submit([("INSERT INTO interactions VALUES (?,?,'end','{}')", [(k, time.time())])])
                if not self.hooked:
                    self._fix_source_instances(c)
        if c is not None and self.hooked:
            self._write_hooked_plan()
        if c is not None:
            self.writer.submit([("INSERT OR REPLACE INTO stage_stats VALUES (?,?,?)",
                                 [(st, n, c.busy.get(st, 0.0)) for st, n in c.consumes.items()])])
        status = status or ("complete" if ok else "failed")
        if self.warnings:
            self.writer.submit([("INSERT OR REPLACE INTO meta VALUES ('warnings', ?)",
                                 [(orjson.dumps(list(dict.fromkeys(self.warnings))).decode(),)])])
        self.writer.submit([("UPDATE run SET status=?, finished=?, error=?, input_bytes=? WHERE id=1",
                             [(status, time.time(), error, input_bytes)])])
        try:
            self.writer.flush()
        except RunFileWriteError:
            self._salvage()
            return
        if c is not None and c.plan_id is not None:
            self._finish_online_plan(c)

    def _finish_online_plan(self, c: Coordinator) -> None:
        """Keep the end states that checkpointed interactions need; record the plan's costs."""
        from ..store.reader import RunReader

        reader = RunReader(self.out)
        try:
            index = reader.checkpoint_index(c.plan_id)
            chosen = [k for k in c.checkpoint_ks if reader.instances_at(k) is not None]
            keep, drop, costs = set(), [], {}
            for k in chosen:
                snap = reader.instances_at(k)
                costs[str(k)] = sum(int(reader.conn.execute("SELECT size FROM states WHERE hash=?", (at.state,))
                                        .fetchone()[0]) for at in snap.values() if at.state is not None)
                for key, at in snap.items():
                    rows = index.get(key, [])
                    if any(pos == at.position and ck != -1 for _, ck, pos, *_ in rows):
                        continue
                    keep.update((key, seq) for seq, ck, pos, *_ in rows if ck == -1 and pos == at.position)
            for key, rows in index.items():
                drop += [(c.plan_id, key[0], key[1], seq) for seq, ck, *_ in rows if ck == -1 and (key, seq) not in keep]
            info = {"checkpoints": chosen, "predicted": {str(k): v for k, v in c.predicted.items()},
                    "costs": costs, "cost": sum(costs.values())}
        finally:
            reader.close()
        self.writer.submit([
            ("DELETE FROM checkpoints WHERE plan=? AND op=? AND instance=? AND seq=?", drop),
            ("UPDATE checkpoint_plans SET info=? WHERE id=?", [(orjson.dumps(info).decode(), c.plan_id)])])
        self.writer.flush()

    def _fix_source_instances(self, c: Coordinator) -> None:
        """Store the partition counts Spark ran source stages with, where they differ from the plan."""
        g = self.graph
        if self._learn_source_instances(c):
            self.writer.submit([
                ("UPDATE operators SET instances=? WHERE id=?", [(n.instances, n.id) for n in g.nodes]),
                ("UPDATE run SET plan=? WHERE id=1", [(orjson.dumps(g.describe()).decode(),)])])

    def _learn_source_instances(self, c: Coordinator) -> bool:
        """Spark may run a source stage with other partitions than planned (AQE), and a hooked
        stage's count is known only from its tasks: take the counts seen. Whether any changed."""
        g = self.graph
        changed = False
        for stage in g.stages:
            seen = c.partitions_seen.get(stage.id)
            if stage.source is not None and seen and seen != stage.instances:
                stage.instances = seen
                for nid in stage.nodes:
                    g.nodes[nid].instances = seen
                changed = True
        return changed

    def close(self) -> None:
        """Stop the coordinator and the writer; raise `RunFileWriteError` if writing failed."""
        self._restore_sigint()
        if self.coordinator is not None:
            self.coordinator.shutdown()
        try:
            self.writer.close()
        except RunFileWriteError:
            self._salvage()
        schema.settle(self.db.conn)
        self.db.conn.close()
        if self.writer.failed:
            raise self.write_failure

    # --- when the run file cannot be written --------------------------------

    @property
    def write_failure(self) -> RunFileWriteError | None:
        """Why writing the run file failed (one line naming the file and the cause), if it did."""
        f = self.writer.failure
        return None if f is None else RunFileWriteError(str(f))

    def _write_failed(self, failure: RunFileWriteError) -> None:
        """On the writer thread, the moment a commit fails: stop the job instead of running it on.
        (Nothing here may wait: coordinator threads blocked on the writer's queue hold its lock.)"""
        self._cancel_spark_jobs(close_coordinator=True)

    def _cancel_spark_jobs(self, close_coordinator: bool = False) -> None:
        if not self._cancelling.acquire(blocking=False):
            return

        def cancel():
            try:
                if close_coordinator and self.coordinator is not None:
                    self.coordinator.close()  # no more interactions; what tasks still send is dropped
                if self._spark_context is not None:
                    self._spark_context.cancelAllJobs()
            except Exception:  # Spark already stopped: nothing left to cancel
                pass
            finally:
                self._cancelling.release()
        threading.Thread(target=cancel, name="tt-cancel", daemon=True).start()

    # --- Ctrl-C ----------------------------------------------------------------

    def _install_sigint(self) -> None:
        """Replace PySpark's SIGINT handler while the dataflow runs.

        PySpark's handler calls into the JVM from inside the signal handler, on the
        connection the interrupted main thread is reading, and py4j then logs a
        traceback for each call it breaks. Here a Ctrl-C that lands inside a call to
        Spark cancels Spark's jobs from another thread instead, and the cancelled
        action returns to the job as an error; `end` records the run as interrupted.
        Elsewhere (the job's own Python code), or pressed twice, it raises
        KeyboardInterrupt as usual.
        """
        if self._old_sigint is not None or threading.current_thread() is not threading.main_thread():
            return
        try:
            self._old_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:  # not the main thread of the main interpreter
            self._old_sigint = None

    def _restore_sigint(self) -> None:
        if self._old_sigint is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._old_sigint)
            self._old_sigint = None

    def _on_sigint(self, signum, frame) -> None:
        again = self.interrupted
        self.interrupted = True
        if again or self._spark_context is None or not _inside_py4j(frame):
            raise KeyboardInterrupt
        self._cancel_spark_jobs(close_coordinator=True)

    def _event(self, kind: str, info: dict) -> None:
        if kind == "warning":   # kept in the run too: `tt inspect` and `tt verify` say them again
            self.warnings.append(info["message"])
        if (self.writer.failed or self.interrupted) and kind == "task":
            self._cancel_spark_jobs()  # a job the job started after the failure: stop it too
        self._user_event(kind, info)

    def _salvage(self) -> None:
        """Mark the run failed, if the disk still takes one small update; else readers say incomplete."""
        if self._salvaged or not self.writer.failed:
            return
        self._salvaged = True
        self.status_saved = self.writer.salvage([(
            "UPDATE run SET status='failed', finished=?, error=? WHERE id=1",
            [(time.time(), str(self.writer.failure))])])


def _inside_py4j(frame) -> bool:
    """Whether the main thread was interrupted inside a call to the JVM."""
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if "/py4j/" in name:
            return True
        frame = frame.f_back
    return False


def _stage_tasks(sc: Any) -> Callable[[int], int | None]:
    """How many tasks a running Spark stage has, from Spark's status tracker (None where it does
    not say): the coordinator numbers a coalesced task's later calls after them."""
    tracker = sc.statusTracker()

    def tasks(spark_stage: int) -> int | None:
        try:
            info = tracker.getStageInfo(spark_stage)
        except Exception:  # noqa: BLE001  (py4j: the driver's JVM going away)
            return None
        return None if info is None else int(info.numTasks)
    return tasks


def _job_files(job: Path, job_dir: Path | None) -> dict[str, str]:
    """The job's source, and the Python files beside it, stored with the run under their
    absolute paths (replay/job_source.py shows them in a replayed traceback)."""
    files = {}
    root = (job_dir or job.parent).absolute()   # not resolved: the code's file names are not
    mine = job.absolute()
    paths = sorted(root.glob("*.py"), key=lambda p: (p != mine, p.name))   # the job's own file first
    if mine.is_file() and mine.parent != root:
        paths.insert(0, mine)
    for p in paths[:50]:
        try:
            files[str(p)] = p.read_text(errors="replace")
        except OSError:
            pass
    return files


def _unique(graph: Graph, name: str) -> str:
    """`name`, or `name_2`, `name_3`, … when the DAG has it already (a call site run twice)."""
    taken = {n.name for n in graph.nodes}
    clean = "".join(c if not c.isspace() and c != ":" else "_" for c in name) or "fn"
    out, n = clean, 1
    while out in taken:
        n += 1
        out = f"{clean}_{n}"
    return out


def use_this_python(sc: Any) -> None:
    """Local workers run this interpreter (it has tt), unless the user chose one."""
    if sc.master.startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable


def ensure_python_for_workers() -> None:
    """Local workers must run this interpreter (it has tt and pyarrow)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
