"""Frames on the executor ↔ coordinator channel, and its authentication.

A frame is `length:u32 | header_length:u32 | header (orjson) | blobs`, where the
header lists the byte length of each blob that follows. Headers carry control
data; blobs carry compressed logs, states and recorded tuples untouched.

The coordinator opens with a random nonce; the executor must answer with
HMAC-SHA256(run secret, nonce). The secret travels to executors inside the
pickled stage function, never on this channel.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct

import orjson

_HEAD = struct.Struct("<II")
MAX_FRAME = 1 << 31


class ChannelClosed(Exception):
    pass


def pack(header: dict, blobs: list[bytes] = ()) -> bytes:
    header = dict(header)
    if blobs:
        header["blobs"] = [len(b) for b in blobs]
    h = orjson.dumps(header)
    body_len = 4 + len(h) + sum(len(b) for b in blobs)
    return b"".join([_HEAD.pack(body_len, len(h)), h, *blobs])


def send(sock: socket.socket, header: dict, blobs: list[bytes] = ()) -> int:
    data = pack(header, blobs)
    sock.sendall(data)
    return len(data)


def recv(sock: socket.socket) -> tuple[dict, list[bytes]]:
    head = _recv_exact(sock, _HEAD.size)
    body_len, h_len = _HEAD.unpack(head)
    if body_len > MAX_FRAME or h_len > body_len:
        raise ChannelClosed("malformed frame")
    body = _recv_exact(sock, body_len - 4)
    header = orjson.loads(body[:h_len])
    blobs = []
    pos = h_len
    for n in header.get("blobs", ()):
        blobs.append(body[pos:pos + n])
        pos += n
    return header, blobs


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:], n - got)
        if r == 0:
            raise ChannelClosed("peer closed the channel")
        got += r
    return bytes(buf)


def proof(secret: str, nonce: str) -> str:
    return hmac.new(secret.encode(), nonce.encode(), hashlib.sha256).hexdigest()


def check(secret: str, nonce: str, answer: str) -> bool:
    return hmac.compare_digest(proof(secret, nonce), str(answer))
