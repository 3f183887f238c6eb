"""Frames on the executor ↔ coordinator channel, and its authentication.

A connection opens with a fixed-size handshake, before any frame: the
coordinator sends NONCE_BYTES random bytes, and the executor answers with
exactly PROOF_BYTES, HMAC-SHA256(run secret, nonce). The coordinator reads
that many bytes within HANDSHAKE_SECONDS and closes the connection unless they
match, so a peer without the secret costs it a few bytes and a thread for a few
seconds, never a buffer sized by what the peer claims. The secret travels to
executors inside the pickled stage function, never on this channel.

After the handshake, a frame is `length:u32 | header_length:u32 | header
(an orjson object) | blobs`, where the header lists the byte length of each
blob that follows. Headers carry control data; blobs carry compressed logs,
states and recorded tuples untouched. Frames are capped (MAX_FRAME,
MAX_HEADER), and read as their bytes arrive rather than into a buffer sized
from the length prefix. A frame that breaks these rules raises `FrameError`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct

import orjson

_HEAD = struct.Struct("<II")
NONCE_BYTES = 16
PROOF_BYTES = 32                 # an HMAC-SHA256 digest
HANDSHAKE_SECONDS = 10.0         # for the proof and the hello frame that follows it
# A task flushes its logs every 2 s, 50,000 inputs, 16 source Arrow batches (32 MB each at
# most, compressed) or 256 shuffled payloads (512 tuples each, compressed): a frame is a few
# MB, a few hundred with very wide rows or huge states. Beyond this, something is wrong.
MAX_FRAME = 1 << 30
MAX_HEADER = 64 << 20            # the JSON header: records, barriers, state references
_CHUNK = 1 << 20                 # bytes read per allocation for large frames
_PROOF_CONTEXT = b"tt-channel-v2\0"


class ChannelClosed(Exception):
    pass


class FrameError(ChannelClosed):
    """The peer sent something that is not a valid frame: the connection is dropped."""


def pack(header: dict, blobs: list[bytes] = ()) -> bytes:
    header = dict(header)
    if blobs:
        header["blobs"] = [len(b) for b in blobs]
    h = orjson.dumps(header)
    body_len = 4 + len(h) + sum(len(b) for b in blobs)
    if body_len > MAX_FRAME or len(h) > MAX_HEADER:
        raise FrameError(f"a frame of {body_len} bytes (header {len(h)}) is over the channel's limit "
                         f"of {MAX_FRAME} ({MAX_HEADER})")
    return b"".join([_HEAD.pack(body_len, len(h)), h, *blobs])


def send(sock: socket.socket, header: dict, blobs: list[bytes] = ()) -> int:
    data = pack(header, blobs)
    sock.sendall(data)
    return len(data)


def recv(sock: socket.socket) -> tuple[dict, list[bytes]]:
    head = _recv_exact(sock, _HEAD.size)
    body_len, h_len = _HEAD.unpack(head)
    if body_len < 4 or body_len > MAX_FRAME or h_len > body_len - 4 or h_len > MAX_HEADER:
        raise FrameError(f"malformed frame (length {body_len}, header length {h_len})")
    try:
        header = orjson.loads(_recv_exact(sock, h_len))
    except orjson.JSONDecodeError as e:
        raise FrameError(f"the frame's header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise FrameError(f"the frame's header is a JSON {type(header).__name__}, not an object")
    sizes = header.get("blobs", [])
    if (not isinstance(sizes, list) or not all(type(n) is int and n >= 0 for n in sizes)
            or h_len + sum(sizes) != body_len - 4):
        raise FrameError("the frame's blob lengths do not add up to its length")
    return header, [_recv_exact(sock, n) for n in sizes]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    if n <= _CHUNK:
        return bytes(_fill(sock, n))
    parts = []
    while n > 0:  # memory grows with what arrives, not with what the length prefix claims
        part = _fill(sock, min(n, _CHUNK))
        parts.append(part)
        n -= len(part)
    return b"".join(parts)


def _fill(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ChannelClosed("peer closed the channel")
        got += r
    return buf


# --- the handshake ---------------------------------------------------------------------------

def challenge(sock: socket.socket) -> bytes:
    """Coordinator: send a fresh nonce; returns it."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(nonce)
    return nonce


def authenticate(sock: socket.socket, secret: str, nonce: bytes) -> bool:
    """Coordinator: read exactly PROOF_BYTES and check them (the socket's timeout applies)."""
    return check(secret, nonce, _recv_exact(sock, PROOF_BYTES))


def answer(sock: socket.socket, secret: str) -> None:
    """Executor: read the coordinator's nonce and prove knowledge of the run's secret."""
    sock.sendall(proof(secret, _recv_exact(sock, NONCE_BYTES)))


def proof(secret: str, nonce: bytes | str) -> bytes:
    if isinstance(nonce, str):
        nonce = nonce.encode()
    return hmac.new(secret.encode(), _PROOF_CONTEXT + nonce, hashlib.sha256).digest()


def check(secret: str, nonce: bytes | str, given: bytes) -> bool:
    if not isinstance(given, (bytes, bytearray)) or len(given) != PROOF_BYTES:
        return False
    return hmac.compare_digest(proof(secret, nonce), bytes(given))
