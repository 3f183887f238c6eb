"""The executor end of an operator task's channel to the coordinator.

One connection per Spark task attempt (it carries all operator instances of the
task). A reader thread turns `interaction` frames into barrier requests for the
task's θ instance; replies to the task's own requests (welcome, triggered
interaction, commit) go through a queue to the task thread, which is the only
thread that sends.
"""

from __future__ import annotations

import _thread
import collections
import queue
import socket
import threading
from typing import Callable

from . import wire


class ControlClient:
    def __init__(self, address: tuple[str, int], secret: str, hello: dict, timeout: float = 60.0):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            wire.answer(self.sock, secret)  # the fixed-size handshake comes before any frame
            wire.send(self.sock, {**hello, "t": "hello"})
            self.welcome, _ = wire.recv(self.sock)
        except wire.ChannelClosed as e:
            self.close()
            raise ConnectionError(f"the coordinator at {address[0]}:{address[1]} closed the channel "
                                  f"before welcoming the task (wrong secret?): {e}") from None
        if self.welcome.get("t") != "welcome":
            raise ConnectionError(f"coordinator refused the task: {self.welcome.get('error', self.welcome)}")
        self.sock.settimeout(None)
        self.pending: collections.deque[int] = collections.deque()
        self.checkpoints: set[int] = set()  # interactions the coordinator wants checkpointed
        self.on_interaction: Callable[[], None] = lambda: None
        self._replies: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="tt-control", daemon=True)
        self._reader.start()
        self.bytes_sent = 0

    def _read(self) -> None:
        try:
            while True:
                header, _ = wire.recv(self.sock)
                if header.get("ckpt"):
                    self.checkpoints.add(header["k"])
                if header.get("t") == "interaction":
                    self.pending.append(header["k"])
                    self.on_interaction()
                else:
                    self._replies.put(header)
        except (wire.ChannelClosed, OSError) as e:
            self._replies.put({"t": "closed", "error": str(e)})

    def _reply(self, kind: str) -> dict:
        header = self._replies.get()
        if header.get("t") != kind:
            raise ConnectionError(f"lost the coordinator (expected {kind}, got {header})")
        return header

    def send(self, header: dict, blobs: list[bytes] = ()) -> None:
        self.bytes_sent += wire.send(self.sock, header, blobs)

    def trigger(self, header: dict) -> int:
        """Ask for a new interaction (a `--when` condition held); returns its index."""
        self.send({**header, "t": "trigger"})
        return self._reply("triggered")["k"]

    def end(self, header: dict, blobs: list[bytes]) -> dict:
        """Send the final logs and states; returns the coordinator's commit decision."""
        self.send({**header, "t": "end"}, blobs)
        return self._reply("ack")

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Connecting:
    """A `ControlClient` connecting on a thread of its own while the task goes on: its
    handshake is two round trips to the driver, each waiting for a thread to be scheduled on
    a busy machine (8.4 ms a task on TPC-H W2, of which 1.5 ms of CPU), and the task can pull
    Spark's first batch meanwhile. Started with `_thread`, which returns at once:
    `Thread.start` waits until the thread runs (1.2 ms a task, measured the same way)."""

    def __init__(self, address: tuple[str, int], secret: str, hello: dict):
        self._done = threading.Event()
        self._client: ControlClient | None = None
        self._error: BaseException | None = None
        _thread.start_new_thread(self._connect, (address, secret, hello))

    def _connect(self, address: tuple[str, int], secret: str, hello: dict) -> None:
        try:
            self._client = ControlClient(address, secret, hello)
        except BaseException as e:  # handed to the task by `client()`
            self._error = e
        finally:
            self._done.set()

    def client(self) -> ControlClient:
        """The connected client, once the coordinator has welcomed the task; what failed, raised."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._client

    def abandon(self) -> None:
        """The task ends before it used the client (Spark's first batch failed): close it."""
        self._done.wait()
        if self._client is not None:
            self._client.close()
