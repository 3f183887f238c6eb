"""Whether a run file may be replayed: it holds pickled code, and unpickling runs it.

`tt record` signs the code it stores with a key private to the user
(`~/.config/tt/key`, or `$TT_KEY_FILE`). Opening a run whose signature checks out
with the local key is safe: this user (or whoever shares the key) recorded it.
Anything else (a run from a colleague, a downloaded file, a damaged one) is not
replayed unless the user says they trust it (`--trust` or `TT_TRUST=1`).
Reading stored states, logs and interactions never unpickles anything; the blobs
that replay does unpickle (recorded tuples, log_result values, checkpoints) are
sealed one by one with the same key (see "sealed blobs" below).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from pathlib import Path

import orjson

from ..core.errors import UntrustedRunError
from . import blobs


def key_file() -> Path:
    env = os.environ.get("TT_KEY_FILE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "tt" / "key"


_create_lock = threading.Lock()  # the recorder's threads may want the key at once


def _key(create: bool) -> bytes | None:
    path = key_file()
    key = _read_key(path)
    if key is not None or not create:
        return key
    with _create_lock:
        return _read_key(path) or _new_key(path)  # another thread may have made it meanwhile


def _read_key(path: Path) -> bytes | None:
    try:
        key = bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return key if len(key) == 32 else None


def _new_key(path: Path) -> bytes:
    """A new key, written whole before it appears under its name: a reader (another thread or
    process) never sees a half-written key, and of two processes making one, both keep the first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.hex())
        try:
            os.link(tmp, path)      # fails if the key exists: then the existing one is the key
        except FileExistsError:
            existing = _read_key(path)
            if existing is None:
                os.replace(tmp, path)   # a broken key file: replace it
                return key
            return existing
        return key
    finally:
        tmp.unlink(missing_ok=True)


def _digest(run_id: str, code: list[bytes]) -> bytes:
    h = hashlib.sha256(run_id.encode())
    for c in code:
        h.update(hashlib.sha256(c).digest())
    return h.digest()


def module_code(modules: dict[str, tuple[str, bool, str]]) -> list[bytes]:
    """What a signature covers of the job's modules a run stores ({name: (path, package, text)}):
    replay imports them from the run file (replay/recorded_modules.py), so they are code too."""
    return [orjson.dumps([name, *modules[name]]) for name in sorted(modules)]


def sign_run(run_id: str, code: list[bytes]) -> str:
    key = _key(create=True)
    return run_id + ":" + hmac.new(key, _digest(run_id, code), hashlib.sha256).hexdigest()


def is_trusted(signature: str | None, code: list[bytes]) -> bool:
    if not signature or ":" not in signature:
        return False
    key = _key(create=False)
    if key is None:
        return False
    run_id, mac = signature.split(":", 1)
    expected = hmac.new(key, _digest(run_id, code), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, mac)


def require_trust(path, signature: str | None, code: list[bytes], trust: bool) -> None:
    if trust or os.environ.get("TT_TRUST") == "1" or is_trusted(signature, code):
        return
    why = (f"its code signature does not match your key in {key_file()}" if _key(create=False) is not None else
           f"you have no key here to check its code signature against: {key_file()} does not exist, so it was "
           f"recorded on another machine or by another user")
    raise UntrustedRunError(
        f"{path} was not recorded by you ({why}); replaying it runs the code it contains. If you trust its "
        f"author, pass --trust")


# --- sealed blobs ------------------------------------------------------------------
#
# The code signature covers the operators' code and key functions; replay also
# unpickles recorded tuples (the `pickle` codec), `log_result` values and
# checkpoints. Each of those blobs is *sealed* where it is inserted, in the process
# that holds the key (the recorder's driver, or `tt checkpoint`; executors never
# see the key): `SEAL + HMAC(run, kind, bytes) + bytes`. Sealing blob by blob needs
# no final signing step, so a run killed at any moment is still checkable. Readers
# open a sealed blob with `open_blob`, the one check made before anything stored
# is unpickled.

SEAL = b"TTs1"
_MAC_LEN = 32
_HEADER = len(SEAL) + _MAC_LEN

_KIND_NAMES = {"entry": "recorded tuple chunk", "res": "chunk of log_result values",
               "checkpoint": "checkpoint"}


def _blob_key(key: bytes) -> bytes:
    return hmac.new(key, b"tt sealed blobs v1", hashlib.sha256).digest()


_reading_keys: dict[str, bytes] = {}  # key file -> blob key, for readers (a jump opens many blobs)


def _reading_key() -> bytes | None:
    path = str(key_file())
    k = _reading_keys.get(path)
    if k is None:
        key = _key(create=False)
        if key is None:
            return None
        k = _reading_keys[path] = _blob_key(key)
    return k


def _blob_mac(blob_key: bytes, run_id: str, kind: str, data: bytes) -> bytes:
    h = hmac.new(blob_key, run_id.encode() + b"\0" + kind.encode() + b"\0", hashlib.sha256)
    h.update(data)
    return h.digest()


class Sealer:
    """Seals the blobs of one run with the local key (made on first use)."""

    def __init__(self, run_id: str | None):
        self.run_id = run_id or ""
        self._key = _blob_key(_key(create=True))

    def __call__(self, kind: str, data: bytes) -> bytes:
        return SEAL + _blob_mac(self._key, self.run_id, kind, data) + data

    def entry(self, codec: str, data: bytes) -> bytes:
        """A chunk of recorded tuples: Arrow data cannot run code and stays as it is."""
        return data if codec in blobs.INERT else self("entry", data)


def run_id_of(signature: str | None) -> str:
    """The run id a signature names ("" for an unsigned run)."""
    return signature.split(":", 1)[0] if signature and ":" in signature else ""


def user_trusts(trust: bool | None) -> bool:
    return bool(trust) or os.environ.get("TT_TRUST") == "1"


def open_blob(path, run_id: str, kind: str, data: bytes, trusted: bool) -> bytes:
    """The bytes of a stored blob that is about to be unpickled, once its seal checks
    out with the local key; raises `UntrustedRunError` otherwise, unless `trusted`
    (the user passed --trust or TT_TRUST=1)."""
    what = _KIND_NAMES.get(kind, kind)
    sealed = data[:len(SEAL)] == SEAL and len(data) >= _HEADER
    body = data[_HEADER:] if sealed else data
    if trusted:
        return body
    if sealed:
        key = _reading_key()
        if key is not None and hmac.compare_digest(data[len(SEAL):_HEADER],
                                                   _blob_mac(key, run_id, kind, body)):
            return body
        raise UntrustedRunError(
            f"{path} was altered after it was recorded, or not by you: a {what} does not match its "
            f"signature (your key is {key_file()}); replaying it would run the code it contains. "
            f"If you trust the file, pass --trust")
    raise UntrustedRunError(
        f"{path} holds a {what} that is not signed (written by an older tt, or altered); replaying it "
        f"would run the code it contains. If you trust the file, pass --trust")


_sealers: dict[str, Sealer] = {}


def sealer_for(run_id: str) -> Sealer:
    """The recorder's sealer for a run (the key file is read once)."""
    s = _sealers.get(run_id)
    if s is None:
        s = _sealers.setdefault(run_id, Sealer(run_id))
    return s
