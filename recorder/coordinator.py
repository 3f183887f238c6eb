"""The coordinator: runs beside the Spark driver while a dataflow is recorded.

Every operator task opens one authenticated TCP channel to it. Over that channel
the coordinator

* tells the task how to run: `record`, or `shadow` when the task was already
  committed (Spark recomputes a lost partition, or runs it again for a second
  action on data not persisted; the re-run repeats the first run's barriers and
  logs nothing, but hashes its states there and digests what it emits: where
  it ended elsewhere the run says so, and `tt verify` compares what it emitted
  with the replay's: `_compare_rerun`, replay/reruns.py);
* broadcasts interactions to the tasks of θ's stage; a task that starts later
  learns how many interactions happened (it takes them at position 0);
* remembers where each θ task took each barrier, so that a retry after a failure
  takes them at the same positions (*sticky* barriers);
* receives log frames and turns each into one atomic writer batch;
* commits exactly one attempt per task: the first to end. Everything another
  attempt wrote stays invisible (see `visible_attempts` in the schema);
* records operator failures. A failing task flushes its logs up to and including
  the failing input, then the failure (waiting for `failure_stored`), so a task
  that never commits has a *post-mortem* log: readers show the attempt that got
  furthest, the last one on a tie, which for an exception that recurs on every
  retry is the last failed attempt, stopped just before its failing tuple.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import selectors
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from ..core.graph import Graph
from ..core.output_digest import why_again
from ..store.schema import SAME_AS
from ..store.trust import sealer_for
from ..store.writer import Writer
from . import wire

_UNSEEN = object()   # (no Spark task has said its hash seed yet)

log = logging.getLogger("tt.coordinator")


@dataclass
class TaskBook:
    """What the coordinator knows about one (stage, partition)."""

    committed: int | None = None
    attempts: list[int] = field(default_factory=list)
    sticky: dict[int, int] = field(default_factory=dict)  # θ's barrier positions: k -> position
    theta_flushed: int = 0                                # furthest θ position any attempt logged
    spark_attempts: set = field(default_factory=set)      # Spark's task attempt ids that ran it
    calls: dict = field(default_factory=dict)             # Spark task attempt id -> the hooked calls it made here
    spark_stages: set = field(default_factory=set)        # Spark's stages whose tasks ran it
    finals: dict = field(default_factory=dict)            # op -> (inputs consumed, end state hash) of the committed run
    committed_stage: int | None = None                    # the Spark stage whose task was committed
    cut: bool = False   # the committed run stopped where Spark stopped pulling (`take`): a later one may replace it


@dataclass
class Conn:
    sock: socket.socket
    attempt: int
    stage: int
    partition: int
    mode: str
    spark_stage: int | None = None
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, header: dict) -> None:
        with self.send_lock:
            wire.send(self.sock, header)


def _further(finals: dict, book: TaskBook) -> bool:
    """Whether a run that ended with `finals` consumed more than the committed run of `book`."""
    return sum(pos for pos, _ in finals.values()) > sum(pos for pos, _ in book.finals.values())


class Coordinator:
    def __init__(self, writer: Writer, graph: Graph, run_id: str, *, host: str = "127.0.0.1",
                 bind: str = "127.0.0.1", on_event: Callable[[str, dict], None] | None = None,
                 online_tau: float | None = None, plan_id: int | None = None):
        self.writer = writer
        self.graph = graph
        self.run_id = run_id
        self.secret = secrets.token_hex(32)
        # a hooked run may start before its θ is hooked (docs/HOOKS.md)
        self.theta_stage = graph.nodes[graph.theta].stage if graph.theta is not None else None
        self.on_event = on_event or (lambda kind, info: None)
        self.lock = threading.Lock()
        self.k = 0                               # last interaction index (0 = the initial state)
        self.interaction_times: list[float] = [time.time()]
        self.tasks: dict[tuple[int, int], TaskBook] = {}
        self.listeners: dict[int, Conn] = {}     # attempt -> θ-stage connection taking broadcasts
        self.next_attempt = 1
        self.closed = False
        self.failures: list[dict] = []
        self.warnings: set[str] = set()
        self.when_counts = [0, 0]   # of θ's inputs in committed tasks: [tested by --when, on which it raised]
        self.tuples = 0
        self.partitions_seen: dict[int, int] = {}
        # a hooked function Spark called more than once in a task (a coalesce after it runs several
        # input partitions in one task): (stage, partition, call) -> the later call's own instance
        self.later_calls: dict[tuple[int, int, int], int] = {}
        self.next_later: dict[int, int] = {}   # stage -> the next instance a later call gets
        self.spark_stage_tasks: Callable[[int], int | None] = lambda spark_stage: None   # the session's
        # a streaming query's tasks: (stage, [micro-batch, partition]) -> the instance it runs,
        # numbered densely in the order they first report (a retry gets its first run's)
        self.slots: dict[int, dict[tuple[int, ...], int]] = {}
        self.stage_queries: dict[int, str] = {}   # a hooked stage -> the streaming query its tasks ran in
        # hooked stages whose function PySpark runs for every query that names it (a UDF or UDTF
        # registered for SQL): a partition run by another query's Spark stage is said, not recorded
        self.shared_stages: set[int] = set()
        self.diverged: set[str] = set()   # operators a rerun of whose tasks ended elsewhere (`_compare_rerun`)
        self.micro_batch: dict[str, int] = {}      # query -> the latest micro-batch a task began
        self.ended_batches: set[tuple[str, int]] = set()   # micro-batch ends made interactions
        self._batch_lock = threading.Lock()
        self.hash_seed: Any = _UNSEEN          # the PYTHONHASHSEED of the first Spark task's worker
        self.timezone: str | None = None       # ... and its local time zone (core/local_time.py)
        self.libraries: dict[str, str] = {}    # the packages the workers had loaded: name -> version
        self.files_read: dict[str, dict] = {}  # the large files the steps read: path -> {"size", "xxh3"}
        self.files_kept: dict[str, dict] = {}  # the small ones, whose bytes the run keeps: path -> {"size", "xxh3"}
        self.properties: dict[bytes, int] = {}  # a task's local properties (sorted JSON) -> the attempt that stored them
        # online checkpointing (IcedTea 6.2): checkpoint I_k when replaying to it from the
        # latest checkpoint would take longer than τ, predicted from the executors' processing time
        self.online_tau = online_tau
        self.plan_id = plan_id
        self.checkpoint_ks: list[int] = []
        self.predicted: dict[int, float] = {}
        self.consumes: dict[int, int] = {}     # stage -> inputs consumed by G(θ) instances (all time)
        self.busy: dict[int, float] = {}       # stage -> seconds the tasks spent processing them
        self.since: dict[int, int] = {}        # stage -> inputs consumed since the latest checkpoint
        self.state_bytes: dict[tuple[int, int], int] = {}  # instance -> size of its latest state
        self.ckpt_bytes = 0                    # size of the latest checkpoint's states
        self.last_report: dict[int, float] = {}  # attempt -> when its latest figures arrived

        coordinator = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                coordinator._serve(self.request)

        class Server(_WakeableServer):
            address_family = socket.getaddrinfo(bind, 0, 0, socket.SOCK_STREAM)[0][0]  # IPv4 or IPv6

            def process_request(self, request, client_address):
                coordinator._accepted(request)   # on the serving loop: known before `stop` returns
                super().process_request(request, client_address)

        self.server = Server((bind, 0), Handler)
        self.address = (host, self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve, name="tt-coordinator", daemon=True)
        self._thread.start()
        self._timer: threading.Thread | None = None
        self._stop = threading.Event()
        self._open: dict[socket.socket, threading.Event] = {}   # connection -> its handler has ended

    # --- interactions ---------------------------------------------------------

    def start_timer(self, every: float) -> None:
        def tick():
            while not self._stop.wait(every):
                self.interaction("periodic", {"every": every})
        self._timer = threading.Thread(target=tick, name="tt-interactions", daemon=True)
        self._timer.start()

    def interaction(self, trigger: str, detail: dict, exclude: int | None = None) -> int:
        """Create interaction k and tell every running θ task to take it."""
        with self.lock:
            if self.closed:
                return self.k
            self.k += 1
            k = self.k
            now = time.time()
            self.interaction_times.append(now)
            ckpt = self._decide_checkpoint(k)
            self.writer.submit([("INSERT INTO interactions VALUES (?,?,?,?)",
                                 [(k, now, trigger, orjson.dumps(detail).decode())])])
            targets = [c for a, c in self.listeners.items() if a != exclude]
        for c in targets:
            try:
                c.send({"t": "interaction", "k": k, "ckpt": ckpt})
            except OSError:
                pass  # the task ended meanwhile; it takes k at its end
        self.on_event("interaction", {"k": k, "trigger": trigger, "checkpoint": ckpt})
        return k

    def _per_input(self, stage: int) -> float:
        n = self.consumes.get(stage, 0)
        return self.busy[stage] / n if n and self.busy.get(stage) else DEFAULT_SECONDS_PER_INPUT

    def predicted_jump(self) -> float:
        """Replay time from the latest checkpoint to now, as a local replay would take it.

        Executors report their progress when they flush; θ tasks that have not
        reported lately are assumed to have kept going at their stage's pace, and
        each θ input is assumed to cost as much again in every later stage of G(θ).
        Executor time is scaled by REPLAY_FACTOR: replay is one thread, and slower
        per tuple than a pipelined Spark task.
        """
        now = time.monotonic()
        seconds = sum(n * self._per_input(stage) for stage, n in self.since.items())
        later_stages = len({self.graph.nodes[n].stage for n in self.graph.in_g} - {self.theta_stage})
        for c in self.listeners.values():
            unreported = now - self.last_report.get(c.attempt, now)
            seconds += unreported * (1 + later_stages)
        return seconds * REPLAY_FACTOR + self.ckpt_bytes / LOAD_BYTES_PER_SECOND

    def _decide_checkpoint(self, k: int) -> bool:
        """The online policy (called with the lock held)."""
        if self.online_tau is None:
            return False
        predicted = self.predicted_jump()
        self.predicted[k] = round(predicted, 6)
        if predicted <= ONLINE_MARGIN * self.online_tau:
            return False
        self.checkpoint_ks.append(k)
        self.since = {}
        self.ckpt_bytes = sum(self.state_bytes.values())
        return True

    # --- channels ---------------------------------------------------------------

    @staticmethod
    def bind_address(master: str, conf) -> str:
        """Where to listen: loopback for a local master, else the address Spark's driver binds."""
        if master.startswith("local"):
            return "127.0.0.1"
        return conf.get("spark.driver.bindAddress", None) or conf.get("spark.driver.host", None) or "127.0.0.1"

    def _accepted(self, sock: socket.socket) -> None:
        with self.lock:
            self._open[sock] = threading.Event()

    def _serve(self, sock: socket.socket) -> None:
        """One task's channel. Nothing is allocated for a peer before it proves the secret,
        and whatever it sends, a bad frame closes its connection with one log line."""
        try:
            self._serve_channel(sock)
        finally:
            with self.lock:
                ended = self._open.pop(sock, None)
            if ended is not None:
                ended.set()

    def _serve_channel(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = _peer(sock)
        conn = None
        authenticated = False
        try:
            sock.settimeout(wire.HANDSHAKE_SECONDS)
            nonce = wire.challenge(sock)
            if not wire.authenticate(sock, self.secret, nonce):
                log.warning("tt: coordinator: refused a connection from %s: it did not prove the run's secret", peer)
                return
            authenticated = True
            hello, _ = wire.recv(sock)
            if hello.get("t") != "hello":
                raise wire.FrameError(f"expected a hello frame, got {str(hello.get('t'))[:40]!r}")
            if hello.get("run") != self.run_id:
                wire.send(sock, {"t": "refused", "error": "this task belongs to another run"})
                return
            stage, part = hello.get("stage"), hello.get("partition")
            if not (type(stage) is int and 0 <= stage < len(self.graph.stages) and type(part) is int and part >= 0):
                raise wire.FrameError(f"a hello names no stage and partition of this run ({stage!r}, {part!r})")
            sock.settimeout(None)
            conn = self._register(sock, hello)
            while True:
                header, blobs = wire.recv(sock)
                kind = header.get("t")
                if kind == "log":
                    self._store(conn, header, blobs)
                elif kind == "trigger":
                    self._trigger(conn, header)
                elif kind == "end":
                    self._end(conn, header, blobs)
                    return
        except wire.FrameError as e:
            log.warning("tt: coordinator: dropped the connection from %s: %s", peer, e)
        except socket.timeout:
            if not authenticated:
                log.warning("tt: coordinator: refused a connection from %s: no proof of the run's secret "
                            "within %g s", peer, wire.HANDSHAKE_SECONDS)
        except (wire.ChannelClosed, OSError):
            pass
        except Exception as e:  # a frame with the wrong shape inside: never a traceback, never the server
            log.warning("tt: coordinator: dropped the connection from %s: a malformed frame (%s: %s)",
                        peer, type(e).__name__, str(e)[:200])
            log.debug("the frame's error", exc_info=True)
        finally:
            if conn is not None:
                self._disconnected(conn)
            try:
                sock.close()
            except OSError:
                pass

    def micro_batch_ended(self, query: str, batch: int) -> None:
        """Micro-batch `batch` of a streaming query has ended: an interaction, once."""
        with self._batch_lock:
            self._end_micro_batch(query, batch)

    def _micro_batch_began(self, query: str, batch: int) -> None:
        """A task of a later micro-batch than any before: Spark has ended every task of the
        previous one, so its end is the interaction, taken before this task is welcomed."""
        with self._batch_lock:
            last = self.micro_batch.get(query)
            if last is None or batch > last:
                self.micro_batch[query] = batch
                if last is not None:
                    self._end_micro_batch(query, last)

    def _end_micro_batch(self, query: str, batch: int) -> None:
        """Under `_batch_lock`: a task of a later micro-batch waits until the interaction exists."""
        if (query, batch) not in self.ended_batches:
            self.ended_batches.add((query, batch))
            self.interaction("micro-batch", {"batch": batch, "query": query})

    def _register(self, sock: socket.socket, hello: dict) -> Conn:
        stage, part = hello["stage"], hello["partition"]
        if hello.get("spark_attempt") is not None:   # (not a partition without rows, run on the driver)
            self._note_workers(hello)
        if hello.get("slot") is not None:
            self._micro_batch_began(str(hello.get("query")), int(hello["slot"][0]))
        conn = Conn(sock, 0, stage, part, "record")
        with conn.send_lock:
            with self.lock:
                slot = hello.get("slot")
                if slot is not None:
                    self.stage_queries.setdefault(stage, str(hello.get("query")))
                    slots = self.slots.setdefault(stage, {})
                    part = conn.partition = slots.setdefault(tuple(int(x) for x in slot), len(slots))
                spark_attempt = hello.get("spark_attempt")
                later = None
                if slot is None and spark_attempt is not None and "spark_stage" in hello:
                    later = self._later_call(stage, part, spark_attempt, hello["spark_stage"])
                    if later is not None:
                        part = conn.partition = later
                book = self.tasks.setdefault((stage, part), TaskBook())
                rerun = slot is None and spark_attempt is not None and spark_attempt in book.spark_attempts
                book.spark_attempts.add(spark_attempt)
                spark_stage = conn.spark_stage = hello.get("spark_stage")
                shared_again = (stage in self.shared_stages and book.committed is not None and spark_stage is not None
                                and spark_stage not in book.spark_stages)
                book.spark_stages.add(spark_stage)
                attempt = self.next_attempt
                self.next_attempt += 1
                conn.attempt = attempt
                book.attempts.append(attempt)
                self.partitions_seen[stage] = max(self.partitions_seen.get(stage, 0), part + 1)
                welcome = {"t": "welcome", "k_now": self.k, "partition": part}
                if self.closed:
                    conn.mode = "off"
                elif book.committed is not None and not book.cut:
                    conn.mode = "shadow"
                else:
                    conn.mode = "record"
                welcome["mode"] = conn.mode
                if self.online_tau is not None:
                    welcome["checkpoints"] = list(self.checkpoint_ks)
                if self._takes_barriers(stage) and conn.mode != "off":
                    welcome["sticky"] = self._sticky(book, shadow=conn.mode == "shadow")
                    welcome["when_from"] = max([book.theta_flushed, *book.sticky.values()], default=0)
                    if conn.mode == "record":
                        self.listeners[attempt] = conn
                        self.last_report[attempt] = time.monotonic()
                if conn.mode != "off":
                    context = hello.get("context")   # (what a replayed step's TaskContext.get() gives: core/task_context.py)
                    self.writer.submit([(
                        "INSERT INTO attempts (id, stage, partition, number, spark_attempt, status, started, host)"
                        " VALUES (?,?,?,?,?,?,?,?)",
                        [(attempt, stage, part, hello.get("number", 0), hello.get("spark_attempt"),
                          "running" if conn.mode == "record" else "shadow", time.time(),
                          hello.get("host"))])] + ([(
                        "INSERT INTO task_contexts (attempt, context) VALUES (?,?)",
                        [(attempt, self._context_json(attempt, context))])] if isinstance(context, dict) else []))
            wire.send(sock, welcome)
        if later is not None:
            self._warn_once(f"{self.graph.hooked_node(stage).name} ran several of its input partitions in one Spark "
                            f"task (a coalesce after it?): tt recorded each as an instance of its own, numbered "
                            f"after the task's partitions")
        elif shared_again:
            self._warn_once(f"{self.graph.hooked_node(stage).name} (registered for SQL) ran in another query: tt "
                            f"recorded the first query's run of each partition, not this one's; register it under "
                            f"another name for each query, or call it from Python, to record each")
        elif rerun:   # not a retry: Spark ran another of its input partitions in the same task
            self._warn_once(f"{self.graph.hooked_node(stage).name} ran several of its input partitions in one Spark "
                            f"task (a coalesce after it?): tt recorded the first one's units, the others ran "
                            f"unrecorded")
        return conn

    def _later_call(self, stage: int, part: int, spark_attempt: int, spark_stage: int) -> int | None:
        """Under `lock`: the instance of a hooked task's call that is not its Spark task's first
        (Spark computes a coalesced task's input partitions one after the other, each a call of the
        function with the task's partition id), None for a first call. A later call gets an
        instance of its own, numbered after the Spark stage's tasks (so no task's own partition
        takes it), the same for the same call of a retry of the task. Without Spark's count of
        the stage's tasks it gets none: it runs unrecorded, as a retry would, and the run says so."""
        calls = self.tasks.setdefault((stage, part), TaskBook()).calls
        call = calls[spark_attempt] = calls.get(spark_attempt, 0) + 1
        if call == 1:
            return None
        if (stage, part, call) not in self.later_calls:
            tasks = self.spark_stage_tasks(spark_stage)
            if tasks is None:
                return None
            n = self.later_calls[(stage, part, call)] = max(self.next_later.get(stage, 0), tasks)
            self.next_later[stage] = n + 1
        return self.later_calls[(stage, part, call)]

    def _note_workers(self, hello: dict) -> None:
        """Store what the job's Python workers ran with that a replay runs with too, the first
        task's: the hash seed (`cli/hash_seed.py`) and the local time zone (core/local_time.py);
        and every library a task's worker had loaded (core/libraries.py, which `tt verify`
        compares with the replay's); warn where workers differ, or hash with random seeds."""
        seed, zone = hello.get("hash_seed"), hello.get("timezone")
        with self.lock:
            first = self.hash_seed is _UNSEEN
            if first:
                self.hash_seed, self.timezone = seed, zone
        self._note_libraries(hello.get("libraries"))
        if first:
            self.writer.submit([("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 [("hash_seed", orjson.dumps(seed).decode()), ("timezone", orjson.dumps(zone).decode()),
                                  ("timezone_facts", orjson.dumps(hello.get("timezone_facts")).decode())])])
            if seed is None or not seed.isdigit():
                self._warn_once("the job's Python workers hash strings with a random seed (PYTHONHASHSEED is "
                                f"{'unset' if seed is None else repr(seed)}): in a replay, hash() of a string gives other values "
                                "and a set of strings iterates in another order than they did; `tt verify` says "
                                "where that changes a state")
            return
        if seed != self.hash_seed:
            self._warn_once(f"the job's Python workers ran with different hash seeds ({self.hash_seed!r}, {seed!r}): "
                            f"a replay runs with the first")
        if zone != self.timezone:
            self._warn_once(f"the job's Python workers ran in different time zones ({self.timezone!r}, {zone!r}): "
                            f"a replay runs in the first")

    def _note_libraries(self, loaded: dict | None) -> None:
        """Keep every library a task's worker had loaded, at its hello or its end (a function may
        import one in its body), in meta `libraries`; warn where two had two versions."""
        if type(loaded) is not dict:
            return
        with self.lock:
            known = self.libraries
            other = next((f"{n} {known[n]} and {v}" for n, v in loaded.items() if known.get(n, v) != v), None)
            added = {n: v for n, v in loaded.items() if n not in known and type(v) is str}
            known.update(added)
            if added:   # (each task's worker may have loaded others: an RDD function's no pandas)
                self.writer.submit([("INSERT OR REPLACE INTO meta VALUES ('libraries', ?)",
                                     [(orjson.dumps(dict(sorted(known.items()))).decode(),)])])
        if other is not None:
            self._warn_once(f"the job's Python workers had different versions of a library ({other}): "
                            f"tt inspect and tt verify compare the first with the replay's")

    def _note_files(self, read: dict | None, kept: dict | None) -> None:
        """Keep the files the tasks' steps read (core/files_read.py) by path: those too large to
        log in meta `files_read` (a replay needs them where it runs, and `tt inspect` says whether
        they are), the small ones whose bytes the run keeps in meta `files_kept` (inspect names them)."""
        for key, told, known in (("files_read", read, self.files_read), ("files_kept", kept, self.files_kept)):
            if type(told) is not dict:
                continue
            with self.lock:
                added = {p: v for p, v in told.items() if p not in known}
                known.update(added)
                if added:
                    self.writer.submit([("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                         [(key, orjson.dumps(dict(sorted(known.items()))).decode())])])

    def _warn_once(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.add(message)
            self.on_event("warning", {"message": message})

    def _takes_barriers(self, stage: int) -> bool:
        """θ's stage, and every hooked operator's: their tasks take broadcast interactions."""
        return any(self.graph.takes_barriers(n) for n in self.graph.stages[stage].nodes)

    def _sticky(self, book: TaskBook, shadow: bool) -> list[list[int]]:
        """Barrier positions a new attempt of this θ task must repeat."""
        if shadow:
            return sorted([k, p] for k, p in book.sticky.items())
        out, last = [], 0
        taken = max(book.sticky, default=0)
        for k in range(1, self.k + 1):
            if book.cut and k > taken:   # after the run Spark cut had ended: where it ended
                last = max((pos for op, (pos, _) in book.finals.items() if self.graph.takes_barriers(op)), default=last)
            last = book.sticky.get(k, last)
            out.append([k, last])
        return out

    def _context_json(self, attempt: int, context: dict) -> str:
        """A task's TaskContext as `task_contexts` keeps it: its local properties, the same in
        every task of a query and 3 KB of them (the JVM's options), stored in full by the first
        attempt that had them and named by the others (`{"$same_as": attempt}`: a 200-task
        query's contexts were 687 KB of a 1.6 MB run file). Called under the lock."""
        properties = context.get("localProperties")
        if isinstance(properties, dict) and properties:
            key = orjson.dumps(properties, option=orjson.OPT_SORT_KEYS)
            first = self.properties.setdefault(key, attempt)
            if first != attempt:
                context = {**context, "localProperties": {SAME_AS: first}}
        return orjson.dumps(context).decode()

    def _trigger(self, conn: Conn, header: dict) -> None:
        detail = {"op": self.graph.nodes[header["op"]].name, "instance": header["instance"],
                  "position": header["position"], "row": header.get("row")}
        k = self.interaction("condition", detail, exclude=conn.attempt)
        conn.send({"t": "triggered", "k": k, "ckpt": k in self.checkpoint_ks})

    def _end(self, conn: Conn, header: dict, blobs: list[bytes]) -> None:
        with self.lock:
            book = self.tasks[(conn.stage, conn.partition)]
            finals = {f["op"]: (f["pos"], f["state"]) for f in header.get("finals", ())}
            commit = conn.mode == "record" and (book.committed is None or book.cut and _further(finals, book))
            superseded = book.committed if commit else None
            if commit:
                book.committed, book.committed_stage = conn.attempt, conn.spark_stage
                book.finals, book.cut = finals, bool(header.get("cut"))
            self.listeners.pop(conn.attempt, None)
        statements = self._statements(conn, header, blobs)
        if not commit and conn.mode in ("shadow", "record"):   # (a record one: a speculative copy, a cut one again)
            statements += self._compare_rerun(conn, book, header.get("finals", ()))
        self._note_libraries(header.get("libraries"))
        self._note_files(header.get("files_read"), header.get("files_kept"))
        now = time.time()
        if commit:
            statements.append(("INSERT OR REPLACE INTO finals VALUES (?,?,?,?,?,?)", [
                (conn.attempt, f["op"], f["i"], f["pos"], f["last_k"], bytes.fromhex(f["state"]))
                for f in header.get("finals", [])]))
            digests = [(conn.attempt, f["op"], f["outputs"]) for f in header.get("finals", []) if f.get("outputs")]
            if digests:   # (a hooked function's: what it emitted, for `tt verify`)
                statements.append(("INSERT OR REPLACE INTO outputs VALUES (?,?,?)", digests))
            if type(header.get("when")) is list:   # θ's task: how its `--when` fared (RunReader.when_counts)
                with self.lock:
                    self.when_counts = [a + int(b) for a, b in zip(self.when_counts, header["when"])]
                    counts = orjson.dumps(self.when_counts).decode()
                statements.append(("INSERT OR REPLACE INTO meta VALUES ('when_counts', ?)", [(counts,)]))
        statements.append(("UPDATE attempts SET status=?, ended=? WHERE id=?",
                           [("committed" if commit else "shadow", now, conn.attempt)]))
        if superseded is not None:   # a run that went further than the committed one, which Spark cut
            statements.append(("UPDATE attempts SET status='superseded' WHERE id=?", [(superseded,)]))
        self.writer.submit(statements, sum(map(len, blobs)))
        conn.mode = "ended"
        conn.send({"t": "ack", "committed": commit})
        self.on_event("task", {"stage": conn.stage, "partition": conn.partition, "committed": commit})

    def _compare_rerun(self, conn: Conn, book: TaskBook, finals: list[dict]) -> list:
        """A committed task that Spark ran again ended: where it ended elsewhere than the recorded
        run, what Spark took from the rerun (another action's rows, a recomputed partition) is not
        what tt replays, and the run says so, once per operator. What the rerun emitted is kept
        for `tt verify`, which compares it with what the replay emits (replay/reruns.py)."""
        another = conn.spark_stage != book.committed_stage
        if another and conn.stage in self.shared_stages:   # another query's, said as such (`_register`)
            return []
        rows = []
        for f in finals:
            rows.append((conn.attempt, f["op"], conn.partition, int(another), f["pos"], bytes.fromhex(f["state"]),
                         f.get("outputs")))
            recorded = book.finals.get(f["op"])
            if recorded is None or recorded == (f["pos"], f["state"]):
                continue
            name = self.graph.nodes[f["op"]].name
            with self.lock:
                if name in self.diverged:
                    continue
                self.diverged.add(name)
            why = why_again(another)
            inputs = (f"after {f['pos']:,} inputs where the recorded run consumed {recorded[0]:,}"
                      if f["pos"] != recorded[0] else f"after the same {f['pos']:,} inputs")
            self._warn_once(f"{name}:{conn.partition} ran again {why} and ended in another state than the run tt "
                            f"recorded ({inputs}): rows Spark took from that run may differ from what tt replays; "
                            f"where it ran for another action, persist() the RDD or DataFrame before the first so that it runs once")
        return [("INSERT OR REPLACE INTO reruns VALUES (?,?,?,?,?,?,?)", rows)] if rows else []

    def _rerun_failed(self, conn: Conn, failure: dict) -> None:
        """A run Spark made again of a recorded task raised, where the recorded run had not
        (another action over data that changed between them, or other draws): the job fails
        with an error that `tt debug` cannot show. The failure is kept under the shadow's
        attempt, which no reader replays (`tt inspect failures` lists it), and said."""
        with self.lock:
            book = self.tasks[(conn.stage, conn.partition)]
        why = why_again(conn.spark_stage != book.committed_stage)
        name = self.graph.nodes[failure["op"]].name
        self.writer.submit([("INSERT INTO failures VALUES (?,?,?,?,?,?,?,?)", [
            (conn.attempt, failure["op"], failure["i"], failure["position"], failure["error"], failure["traceback"],
             failure["row"], time.time())])])
        self._warn_once(f"{name}:{failure['i']} raised {failure['error']} on its input #{failure['position']} in a "
                        f"run Spark made again {why}, which tt did not record: the run it recorded did not raise "
                        f"there, so the input changed between the runs or the function is not deterministic "
                        f"(`tt inspect RUN failures` shows the row); to debug it post-mortem, record a job whose "
                        f"first action over the data meets it")

    def _disconnected(self, conn: Conn) -> None:
        with self.lock:
            self.listeners.pop(conn.attempt, None)
        if conn.mode == "record":
            failed = any(f["attempt"] == conn.attempt for f in self.failures)
            self.writer.submit([("UPDATE attempts SET status=?, ended=? WHERE id=?",
                                 [("failed" if failed else "lost", time.time(), conn.attempt)])])

    # --- storing ----------------------------------------------------------------

    def _store(self, conn: Conn, header: dict, blobs: list[bytes]) -> None:
        if conn.mode == "record":
            self.writer.submit(self._statements(conn, header, blobs), sum(map(len, blobs)))
        elif conn.mode == "shadow" and header.get("failure") is not None:
            self._rerun_failed(conn, header["failure"])
        if header.get("failure") is not None:
            conn.send({"t": "failure_stored"})  # the failing task waits for this before it dies

    def _statements(self, conn: Conn, header: dict, blobs: list[bytes]) -> list:
        a = conn.attempt
        barriers_at = self.graph.takes_barriers
        seal = sealer_for(self.run_id)  # blobs that replay unpickles are sealed (store/trust.py)
        chunks, entries, schemas, tuples = [], [], [], 0
        for rec in header.get("records", ()):
            if "entry_for" in rec:
                for nid, port, src, start, n, codec, bi in rec["entry_for"]:
                    entries.append((a, nid, conn.partition, port, src, start, n, codec, seal.entry(codec, blobs[bi])))
                continue
            if "source_schema" in rec:  # the Arrow schema a source read by reference had in the tasks
                source, bi = rec["source_schema"]
                schemas.append((blobs[bi], source))
                continue
            op, i, start, end = rec["op"], rec["i"], rec["start"], rec["end"]
            if op in self.graph.in_g:   # (not the --lineage logs outside G(θ): not replayed)
                tuples += end - start
            if barriers_at(op):
                # a failing θ logs its failing input too, but that one's condition never fired
                failed = header.get("failure") or {}
                fired = end - 1 if (failed.get("op"), failed.get("i")) == (op, i) and failed.get("logged") else end
                with self.lock:
                    book = self.tasks[(conn.stage, conn.partition)]
                    book.theta_flushed = max(book.theta_flushed, fired)
            for kind in ("out", "in", "res", "made", "keys"):
                if kind in rec:
                    chunks.append((a, op, i, kind, -1, start, end - start,
                                   seal("res", blobs[rec[kind]]) if kind == "res" else blobs[rec[kind]]))
            for edge, (bi, n) in rec.get("dest", {}).items():  # n counts outputs, not inputs
                chunks.append((a, op, i, "dest", int(edge), start, n, blobs[bi]))
            for port, src, est, n, codec, bi in rec.get("entry", ()):
                entries.append((a, op, i, port, src, est, n, codec, seal.entry(codec, blobs[bi])))
        states = []
        for h, ref in header.get("states", {}).items():
            bi, raw = ref if isinstance(ref, list) else (ref, len(blobs[ref]))
            states.append((bytes.fromhex(h), raw, blobs[bi]))
        with self.lock:
            stage = conn.stage
            self.last_report[a] = time.monotonic()
            self.busy[stage] = self.busy.get(stage, 0.0) + header.get("busy", 0.0)
            self.consumes[stage] = self.consumes.get(stage, 0) + sum(
                r["end"] - r["start"] for r in header.get("records", ()) if r.get("op") in self.graph.in_g)
            self.since[stage] = self.since.get(stage, 0) + sum(
                r["end"] - r["start"] for r in header.get("records", ()) if r.get("op") in self.graph.in_g)
            sizes = {h: raw for h, raw, _ in states}
            for b in header.get("barriers", ()):
                if b["state"] in sizes:
                    self.state_bytes[(b["op"], b["i"])] = sizes[b["state"]]
        checkpoints = [(self.plan_id, c["op"], c["i"], c["seq"], c["k"], a, c["pos"], c["kind"],
                        len(blobs[c["blob"]]), seal("checkpoint", blobs[c["blob"]]))
                       for c in header.get("checkpoints", ())]
        barriers = []
        for b in header.get("barriers", ()):
            for k in b["k"]:
                barriers.append((a, b["op"], b["i"], k, b["pos"], bytes.fromhex(b["state"])))
                if barriers_at(b["op"]):
                    with self.lock:
                        self.tasks[(conn.stage, conn.partition)].sticky.setdefault(k, b["pos"])
        statements = []
        if states:
            statements.append(("INSERT OR IGNORE INTO states VALUES (?,?,?)", states))
        files = [(digest, size, blobs[bi]) for digest, (bi, size) in header.get("files", {}).items()]
        if files:   # (the files a step read, by content: core/files_read.py)
            statements.append(("INSERT OR IGNORE INTO file_contents VALUES (?,?,?)", files))
        if chunks:
            statements.append(("INSERT INTO log_chunks VALUES (?,?,?,?,?,?,?,?)", chunks))
        if entries:
            statements.append(("INSERT INTO entry_chunks VALUES (?,?,?,?,?,?,?,?,?)", entries))
        if schemas:
            statements.append(("UPDATE source_scans SET arrow_schema=? WHERE source=? AND arrow_schema IS NULL",
                               schemas))
        if barriers:
            statements.append(("INSERT OR REPLACE INTO barriers VALUES (?,?,?,?,?,?)", barriers))
        if checkpoints:
            statements.append(("INSERT OR REPLACE INTO checkpoints (plan, op, instance, seq, k, attempt, position, "
                               "kind, size, data) VALUES (?,?,?,?,?,?,?,?,?,?)", checkpoints))
        if tuples:
            statements.append(("UPDATE attempts SET tuples = tuples + ? WHERE id=?", [(tuples, a)]))
            self.tuples += tuples
        for message in header.get("warnings", ()):
            self._warn_once(message)
        failure = header.get("failure")
        if failure:
            f = {**failure, "attempt": a, "time": time.time()}
            self.failures.append(f)
            statements.append(("INSERT INTO failures VALUES (?,?,?,?,?,?,?,?)", [
                (a, f["op"], f["i"], f["position"], f["error"], f["traceback"], f["row"], f["time"])]))
            self.on_event("failure", f)
        return statements

    # --- the end ----------------------------------------------------------------

    def close(self) -> None:
        """Stop taking interactions. Tasks that still connect run unrecorded."""
        self._stop.set()
        with self.lock:
            self.closed = True
            self.listeners.clear()

    def shutdown(self) -> None:
        """Close, stop accepting, and end every channel still open, waiting until each has
        stored how its attempt ended: a task whose channel closed just before the run's end
        (its Spark task failed) is marked lost or failed, never left running."""
        self.close()
        self.server.stop()   # the serving loop has returned: no connection is accepted after this
        self._thread.join()
        with self.lock:
            still_open = list(self._open.items())
        for sock, _ in still_open:
            try:
                sock.shutdown(socket.SHUT_RDWR)   # its handler's read returns at once
            except OSError:
                pass   # closed by the peer or the handler already
        for _, ended in still_open:
            ended.wait()
        self.server.server_close()


class _WakeableServer(socketserver.ThreadingTCPServer):
    """A threading TCP server whose serving loop sleeps until a task connects or `stop` wakes
    it. `serve_forever` looks for `shutdown()` every `poll_interval`: at 10 ms, as the run's
    end needed, that loop took 45 ms of the driver's CPU in a 7.8 s recording of TPC-H W2, on
    the same two cores as the job; the driver's CPU a W2 recording went from 0.31 to 0.28 s
    without it (6 runs each way, recording off: 0.16)."""

    daemon_threads = True
    allow_reuse_address = True

    def server_activate(self) -> None:
        super().server_activate()
        self._wake_r, self._wake_w = socket.socketpair()

    def serve(self) -> None:
        """Accept connections until `stop`; one still waiting in the backlog then is not taken."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in selector.select()}
                if self._wake_r in ready:
                    return
                if self in ready:
                    self._handle_request_noblock()
                self.service_actions()   # (as `serve_forever` does after each look)

    def stop(self) -> None:
        """Wake the serving loop to return (its caller joins its thread)."""
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass   # (stopped already)

    def server_close(self) -> None:
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()


def _peer(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "an unknown peer"


def state_hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


LOAD_BYTES_PER_SECOND = 100e6  # unpickling a checkpoint's states (a conservative figure)
DEFAULT_SECONDS_PER_INPUT = 5e-6  # an executor's time per input, until tasks report theirs
REPLAY_FACTOR = 3.0  # local replay time / executor time per input (measured: tt checkpoint prints it)
# The coordinator learns of the tasks' progress when they flush (every half second), so
# its prediction lags: checkpoint once the predicted jump passes this share of τ.
ONLINE_MARGIN = 0.7
