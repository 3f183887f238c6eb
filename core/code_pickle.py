"""Pickle operators with their code's file names, so a replayed exception points at the job's source.

cloudpickle (since 3.1.3) writes every code object it pickles by value with the file name
`<dynamic-code>`, to make its output deterministic. A replayed operator's traceback then
shows no file and no source line: the one thing a user wants from a post-mortem. `dumps`
pickles as cloudpickle does but keeps each code object's `co_filename`; the pickle loads
with plain `cloudpickle.loads` (or `pickle.loads`) wherever tt is importable.
"""

from __future__ import annotations

import io
import types
from typing import Any

import cloudpickle


def _code_in_file(make: Any, args: tuple, filename: str) -> types.CodeType:
    """Unpickle a code object and give it back the file it was compiled from."""
    code = make(*args)
    return code.replace(co_filename=filename) if code.co_filename != filename else code


class _Pickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            reduce = self.dispatch_table.get(types.CodeType)
            if reduce is not None:
                make, args = reduce(obj)
                return _code_in_file, (make, args, obj.co_filename)
        return super().reducer_override(obj)


def dumps(obj: Any) -> bytes:
    """`cloudpickle.dumps(obj)`, keeping the file names of the code it pickles by value."""
    with io.BytesIO() as f:
        _Pickler(f, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
        return f.getvalue()
