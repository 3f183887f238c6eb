"""Errors a user can act on.

Every error that reaches the command line is a `TTError`: its message is the one
line printed on stderr, so it names the thing that is wrong and, where there is
one, the way out. Anything else is a bug in tt and gets a traceback behind
`--debug`.
"""

import os
import re


class TTError(Exception):
    """A problem with the user's input, job or run file, described in one line."""

    exit_code = 1


class UsageError(TTError):
    """Bad command-line arguments, operator names or expressions."""

    exit_code = 2


class Cancelled(TTError):
    """The user cancelled a long action (a jump, a run until); the position is what it was before."""


class JobError(TTError):
    """The job itself failed (missing file, exception in the job or an operator)."""


class RunFileError(TTError):
    """A run.db that is missing, corrupt, foreign, or from a newer tt."""


class SourceFileError(RunFileError):
    """A file a run reads by reference is missing, unreadable here, or changed since the recording."""


class UntrustedRunError(RunFileError):
    """Replaying would unpickle code from a run.db that this user did not record."""


class CodeImportError(TTError):
    """A run's code needs a module of the job's that this Python cannot import."""


class ReplayDivergence(TTError):
    """Replay produced something other than what the recording logged."""

    def __init__(self, message, *, op=None, instance=None, position=None, field=None):
        super().__init__(message)
        self.op = op
        self.instance = instance
        self.position = position
        self.field = field


class OperatorError(TTError):
    """An operator raised while processing a tuple."""

    def __init__(self, message, *, op=None, instance=None, position=None, error=None, tb=None):
        super().__init__(message)
        self.op = op
        self.instance = instance
        self.position = position
        self.error = error
        self.tb = tb


class RunFileWriteError(RunFileError, RuntimeError):
    """Recording could not write the run file (a full disk, an I/O error); the message names
    the file and the cause. What was committed before stays readable. (A RuntimeError too,
    as the writer's failures were before it had a type of its own.)"""


_TRACEBACK = "Traceback (most recent call last):"


def first_line(error: BaseException) -> str:
    """What an error says, in one line: its text's first line, or where the text carries a
    Python traceback (a Spark `PythonException` says only "An exception was thrown from the
    Python worker:" above the worker's traceback), the line that ends it: "ValueError: …"."""
    text = str(error).split("\nJVM stacktrace:", 1)[0].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if any(line.startswith(_TRACEBACK) for line in lines):
        raised = [line for line in lines[1:] if not line.startswith((" ", "\t", _TRACEBACK, "During handling",
                                                                     "The above exception"))]
        if raised:
            return raised[-1].strip()
    return lines[0].strip() if lines else ""


_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>.+)$', re.M)


def _library_folders() -> tuple[str, ...]:
    """Where code that is not the user's lives: tt's own packages, the standard library, installed
    packages (PySpark and py4j among them)."""
    import sysconfig

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the tt package: the repository's root
    own = [os.path.join(root, d) + os.sep for d in ("core", "recorder", "replay", "store", "tui", "cli")]
    paths = sysconfig.get_paths()
    return tuple(own + [os.path.join(paths[k], "") for k in ("stdlib", "platstdlib", "purelib", "platlib")])


def users_traceback(error: BaseException) -> str:
    """`error`'s traceback as Python prints it, from the first frame of the user's code on: an
    operator's failure shows where the job's function raised, not tt's and PySpark's calls
    above it (frames below it, in a library the function called, stay)."""
    import traceback

    te = traceback.TracebackException.from_exception(error)
    folders = _library_folders()
    first = next((i for i, fs in enumerate(te.stack) if not os.path.abspath(fs.filename).startswith(folders)), 0)
    del te.stack[:first]
    return "".join(te.format())


def where_raised(tb: str | None) -> str | None:
    """"job.py line 39, in summarize": the last frame of the user's code in a traceback's text
    (`users_traceback`, or one a run file stored), or None where it has none."""
    folders = _library_folders()
    frames = [m for m in _FRAME.finditer(tb or "") if not os.path.abspath(m["file"]).startswith(folders)]
    if not frames:
        return None
    last = frames[-1]
    return f"{os.path.basename(last['file'])} line {last['line']}, in {last['name']}"
