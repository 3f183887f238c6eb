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
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

import cloudpickle
import orjson

from ..core import values
from ..core.errors import UsageError
from ..core.graph import Graph
from ..store import blobs, schema
from ..store.trust import sign_run
from ..store.writer import Writer
from .coordinator import Coordinator
from .task import Recording

_ACTIVE: "RecordingSession | None" = None


def active() -> "RecordingSession | None":
    return _ACTIVE


class RecordingSession:
    def __init__(self, out: str | Path, job: str | Path, argv: list[str], *, watch: str | None = None,
                 every: float | None = None, when: str | None = None, checkpoint_tau: float | None = None,
                 on_event: Callable[[str, dict], None] | None = None):
        self.out = Path(out)
        self.job = Path(job)
        self.watch = watch
        self.every = every
        self.when = when
        self.checkpoint_tau = checkpoint_tau  # online checkpointing under this bound, if set
        self.on_event = on_event or (lambda kind, info: None)
        self.run_id = secrets.token_hex(8)
        self.db = schema.create(self.out)
        self.writer = Writer(self.db.conn)
        self.coordinator: Coordinator | None = None
        self.graph: Graph | None = None
        self.finished = False
        self.writer.submit([(
            "INSERT INTO run (id, status, job, argv, started, options, recorder_pid, recorder_host) "
            "VALUES (1,?,?,?,?,?,?,?)",
            [("recording", str(self.job), orjson.dumps(argv).decode(), time.time(),
              orjson.dumps({"watch": watch, "every": every, "when": when,
                            "checkpoint": "online" if checkpoint_tau else None, "tau": checkpoint_tau}).decode(),
              os.getpid(),
              socket.gethostname())])])

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
        self.graph = graph
        conf = spark.sparkContext.getConf()
        master = conf.get("spark.master", "")
        host = "127.0.0.1" if master.startswith("local") else conf.get("spark.driver.host", "127.0.0.1")
        plan_id = None
        if self.checkpoint_tau is not None:
            plan_id = self.writer.call(lambda conn: conn.execute(
                "INSERT INTO checkpoint_plans (policy, tau, created, active, info) VALUES ('online',?,?,1,'{}')",
                (self.checkpoint_tau, time.time())).lastrowid)
        self.coordinator = Coordinator(self.writer, graph, self.run_id, host=host, on_event=self.on_event,
                                       online_tau=self.checkpoint_tau, plan_id=plan_id)
        self._write_plan(graph, master, spark.version, job_dir)
        if self.every:
            self.coordinator.start_timer(self.every)
        self.on_event("begin", {"theta": theta.name, "address": self.coordinator.address})
        return Recording(self.coordinator.address, self.coordinator.secret, self.run_id, self.when)

    def _write_plan(self, graph: Graph, master: str, spark_version: str, job_dir: Path | None) -> None:
        ops, initial, states = [], [], {}
        for n in graph.nodes:
            code = cloudpickle.dumps(n.op)
            data = values.dumps(n.op.state())
            h = hashlib.blake2b(data, digest_size=16).digest()
            states[h] = blobs.compress(data)
            initial.append((n.id, h))
            ops.append((n.id, n.name, n.kind, f"{type(n.op).__module__}.{type(n.op).__qualname__}",
                        n.stage, n.instances, int(n.id in graph.in_g), int(n.id == graph.theta), code))
        keys = [(e.id, cloudpickle.dumps(e.key)) for e in graph.edges if e.key is not None]
        files = _job_files(self.job, job_dir)
        plan = orjson.dumps(graph.describe()).decode()
        theta = graph.nodes[graph.theta].name
        signature = sign_run(self.run_id, [c for *_, c in ops] + [c for _, c in keys])
        self.writer.submit([
            ("INSERT INTO operators VALUES (?,?,?,?,?,?,?,?,?)", ops),
            ("INSERT INTO states VALUES (?,?,?)", [(h, len(d), d) for h, d in states.items()]),
            ("INSERT INTO initial_states VALUES (?,?)", initial),
            ("INSERT INTO edge_keys VALUES (?,?)", keys),
            ("INSERT OR REPLACE INTO job_files VALUES (?,?)", list(files.items())),
            ("UPDATE run SET plan=?, theta=?, master=?, spark_version=?, signature=? WHERE id=1",
             [(plan, theta, master, spark_version, signature)]),
            ("INSERT INTO interactions VALUES (0, ?, 'start', '{}')", [(time.time(),)]),
        ])

    def end(self, *, ok: bool, error: str | None = None, status: str | None = None,
            input_bytes: int | None = None) -> None:
        """The dataflow finished (or failed): the end interaction, the run's status."""
        if self.finished:
            return
        self.finished = True
        c = self.coordinator
        if c is not None:
            c.close()
            if ok:
                with c.lock:
                    c.k += 1
                    k = c.k
                    end_ckpt = c._decide_checkpoint(k)
                self.writer.submit([("INSERT INTO interactions VALUES (?,?,'end','{}')", [(k, time.time())])])
                self._fix_source_instances(c)
        if c is not None:
            self.writer.submit([("INSERT OR REPLACE INTO stage_stats VALUES (?,?,?)",
                                 [(st, n, c.busy.get(st, 0.0)) for st, n in c.consumes.items()])])
        status = status or ("complete" if ok else "failed")
        self.writer.submit([("UPDATE run SET status=?, finished=?, error=?, input_bytes=? WHERE id=1",
                             [(status, time.time(), error, input_bytes)])])
        self.writer.flush()
        if c is not None and c.plan_id is not None:
            self._finish_online_plan(c)

    def _finish_online_plan(self, c: Coordinator) -> None:
        """Keep the end states that checkpointed interactions need; record the plan's costs."""
        from ..store.reader import RunReader

        reader = RunReader(self.out)
        try:
            index = reader.checkpoint_index(c.plan_id)
            chosen = [k for k in c.checkpoint_ks if reader.snapshot(k) is not None]
            keep, drop, costs = set(), [], {}
            for k in chosen:
                snap = reader.snapshot(k)
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
        """Spark may run a source stage with other partitions than planned (AQE)."""
        g = self.graph
        changed = False
        for stage in g.stages:
            seen = c.partitions_seen.get(stage.id)
            if stage.source is not None and seen and seen != stage.instances:
                stage.instances = seen
                for nid in stage.nodes:
                    g.nodes[nid].instances = seen
                changed = True
        if changed:
            self.writer.submit([
                ("UPDATE operators SET instances=? WHERE id=?", [(n.instances, n.id) for n in g.nodes]),
                ("UPDATE run SET plan=? WHERE id=1", [(orjson.dumps(g.describe()).decode(),)])])

    def close(self) -> None:
        if self.coordinator is not None:
            self.coordinator.shutdown()
        self.writer.close()
        schema.settle(self.db.conn)
        self.db.conn.close()


def _job_files(job: Path, job_dir: Path | None) -> dict[str, str]:
    """The job's source, and the Python files beside it, stored with the run."""
    files = {}
    root = (job_dir or job.parent).resolve()
    for p in sorted(root.glob("*.py"))[:50]:
        try:
            files[str(p.relative_to(root))] = p.read_text(errors="replace")
        except OSError:
            pass
    return files


def ensure_python_for_workers() -> None:
    """Local workers must run this interpreter (it has tt and pyarrow)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
