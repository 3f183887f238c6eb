"""Whether a run file may be replayed: it holds pickled code, and unpickling runs it.

`tt record` signs the code it stores with a key private to the user
(`~/.config/tt/key`, or `$TT_KEY_FILE`). Opening a run whose signature checks out
with the local key is safe: this user (or whoever shares the key) recorded it.
Anything else (a run from a colleague, a downloaded file, a damaged one) is not
replayed unless the user says they trust it (`--trust` or `TT_TRUST=1`).
Reading stored states, logs and interactions never unpickles anything.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from ..core.errors import UntrustedRunError


def key_file() -> Path:
    env = os.environ.get("TT_KEY_FILE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "tt" / "key"


def _key(create: bool) -> bytes | None:
    path = key_file()
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex())
    return key


def _digest(run_id: str, code: list[bytes]) -> bytes:
    h = hashlib.sha256(run_id.encode())
    for c in code:
        h.update(hashlib.sha256(c).digest())
    return h.digest()


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
    raise UntrustedRunError(
        f"{path} was not recorded by you (its code signature does not match your key in {key_file()}); "
        f"replaying it runs the code it contains. If you trust its author, pass --trust")
