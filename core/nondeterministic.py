"""The standard library's non-deterministic calls, logged where a hooked function makes them.

A job written for tt wraps a clock read or a random draw in `tt.log_result`; a job recorded
unchanged cannot. So a hooked function's calls of the clock, of `random`, of `uuid` and of
the other calls below are answered through `log_result` whenever the function's own code
makes them during one of its steps: the recording logs each answer, a replay hands it back,
and the function's state comes out as it did (a `time.time()` stamp, a `uuid4()` id, a
`random.random()` sum). `tt verify` compares them as any state.

How a call is known to be the function's: the patched call looks up the stack for the first
frame of tt's or PySpark's code. If that frame is one that calls the user's code during a
hooked operator's step (`STEP_FRAMES`), the call is the function's; any other (tt's state
handle, PySpark's own code, a call nested in a logged one, the debugger's threads) gets the
real answer, unlogged. Nothing is paid per step: only a patched call looks.

What is covered:
- module functions, patched once per process (`install`) and passing through elsewhere:
  `time.time`, `monotonic`, `perf_counter`, `process_time`, `thread_time` (and their `_ns`),
  `clock_gettime(_ns)`, `os.times`, the calls that read the clock where no time is given
  (`time.strftime(fmt)`, `localtime()`, `gmtime()`, `ctime()`, `asctime()`: handed the logged
  `time.time()`), `random.SystemRandom`'s draws (its `_urandom`), `random`'s module
  functions (`choice`, `sample`, `choices` and `shuffle` log positions, so the objects handed
  back are the caller's own), `uuid.uuid1`/`uuid4`, `os.urandom`, `secrets`' functions, and
  numpy's legacy `numpy.random` functions (`default_rng()` without a seed logs the seed it drew);
- a `random.Random()` the job's own code makes without a seed (or reseeds with none), and a
  numpy generator it makes so (`RandomState()`, `Generator(PCG64())`): the seed is logged, so
  its draws come out again (`Random.seed`, patched on the class; numpy's `SeedSequence` source,
  `bit_generator.randbits`). One a library makes, `tempfile`'s say, once per process, keeps the
  system's seed, since a replay in another process would not make it at the same step;
- pandas' `Timestamp.now()`, `today()`, `utcnow()` and `Timestamp("now")` (or `"today"`), patched
  on the class once pandas is loaded (`pd.to_datetime("now")` calls `Timestamp.now()`);
- environment variables (`os.environ[...]`, `.get`, `in`, `os.getenv`: `_Environ.__getitem__`,
  patched on the class): logged once per name and instance, and again where a read finds
  another value, apart from the numbered calls, and served in replay by position
  (`ResultSource.environ`), so a library that reads a name once per process replays too. Names
  that look like secrets (`SECRET`) are not logged: a replay reads its own;
- what a process is and runs on: `os.getpid()`, `os.getppid()`, `os.cpu_count()`,
  `socket.gethostname()`, `platform.node()` (an id made of host and process, a batch sized by the
  cores). Each is the same all the process's life, and libraries ask once and keep the answer, so
  they are logged as environment variables are, under the call's name (`os.getpid()`), once per
  instance, and served by name, not counted among the numbered calls (`_PROCESS`);
- the files a step reads through `open()` (core/files_read.py): their bytes, or a large one's
  size and digest, logged once per file and instance as a variable's value is, and what it asks
  of a path without reading it (core/file_info.py: `os.stat`, `os.path.exists`, `getsize`, a
  folder's `os.listdir`, `os.scandir`, `glob.glob`, `os.walk`);
- `datetime.datetime.now`/`utcnow`/`today` and `datetime.date.today`, which a C type keeps
  out of reach: in the globals of the job file's code as Spark ships it (pickled by value), the
  names bound to `datetime.datetime`, `datetime.date` or the `datetime` module are pointed at
  stand-ins (`prepare`) whose other methods and constructors give plain datetimes, and for
  which `isinstance` answers as for the real classes. Code in a module the job imports by name
  keeps the real ones.

A network connection a step makes (`socket.socket.connect`: an HTTP lookup, a database) is not
logged, but the recording says which operator made one, as it says which wrote a file
(core/outside_effects.py).

Not covered (`tt verify` still finds what they change, and names the input):
`numpy.datetime64("now")`, which reads the clock in C, the calls of a module the job
imports by name (its globals are a loaded module's), the names listed by iterating
`os.environ`, and files read otherwise than through `open()` (core/files_read.py).
Runs recorded before this module are replayed without it, and runs recorded before a call was
covered replay that call unlogged, as it ran: a hooked operator carries the `VERSION` of this
module it was recorded with (`HookedOperator.logs_nondeterministic`), and a call covered since a
later one is logged only for operators of that version on (`users_step(since=...)`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import inspect
import os
import platform
import random
import re
import secrets
import socket
import sys
import threading
import time
import types
import uuid
from typing import Any, Callable, Iterator

from . import file_info, files_read, libraries, outside_effects
from .operator import CONTEXT, log_result

#: The frames that call the user's code while a hooked operator takes a step, as
#: (module, function): the first frame of tt's code above a patched call must be one of them.
STEP_FRAMES = frozenset({
    ("tt.core.hooked", "process"), ("tt.core.hooked", "outputs"),
    ("tt.core.hooked", "_for_effects"),              # a foreachPartition function (in a pulling greenlet)
    ("tt.core.hooked", "_write_rows"),               # a streaming ForeachWriter (in a pulling greenlet)
    ("tt.core.pulled", "run"),                       # a pulling function's greenlet
    ("tt.core.processor", "process"), ("tt.core.processor", "<lambda>"),
    ("tt.core.group_state", "process"), ("tt.core.group_state", "<lambda>"),
})
_NOT_USERS = ("tt.", "pyspark", "py4j")

#: What a new recording logs: 1, the module functions and `datetime` (2026-11-29); 2, also a
#: generator seeded by the system (`random.Random()`, numpy's bit generators) and pandas'
#: `Timestamp` clock reads (2026-12-01); 3, also the environment variables read (2026-12-03);
#: 4, also the process's id, host and cores (`_PROCESS`, 2026-12-04); 5, also the files a step
#: reads (core/files_read.py, 2026-12-04); 6, also what a step asks of a path (`os.stat`,
#: `os.path.exists`, `os.listdir`: core/file_info.py, 2026-12-04).
#: A run replays the calls of its own version logged.
#: 7, also the clock read in other ways (`_LOGGED_SINCE_7`, `_NOW_WHERE_OMITTED`: `time.strftime`
#: without a time, `clock_gettime`, `thread_time`, `os.times`) and `random.SystemRandom` (2026-12-07).
VERSION = 7
_SEEDS = 2   # the version that began logging system-seeded generators and pandas' clock reads
_ENVIRON = 3   # ... and environment variables
_PROCESS_FACTS = 4   # ... and the process's own facts
_FILES = 5   # ... and the files a step reads
_STATS = 6   # ... and what it asks of a path (stat results, listings)
_MORE_CLOCKS = 7   # ... and the clock read in other ways, and `random.SystemRandom`'s draws


def users_step(depth: int = 2, since: int = 1) -> bool:
    """Whether the call `depth` frames up was made by a hooked function's own code during one of
    its steps, in a run recorded with this module's version `since` or later (so its replay
    expects the logged answers)."""
    runner = CONTEXT.runner
    if runner is None or getattr(runner.op, "logs_nondeterministic", 0) < since:
        return False
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(_NOT_USERS) or name == "tt":
            where = (name, frame.f_code.co_name)
            if where not in STAND_INS:
                return where in STEP_FRAMES
        frame = frame.f_back
    return False


#: tt's stand-ins for calls a step's library makes that may call back into it: looked past
#: (`tempfile.NamedTemporaryFile` opens through `open` with an opener that calls `os.open`)
STAND_INS = frozenset({("tt.core.files_read", "open")})


# --- module functions -------------------------------------------------------------------------

_TIME = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
         "process_time", "process_time_ns")
_RANDOM = ("random", "uniform", "randint", "randrange", "getrandbits", "randbytes", "triangular", "gauss",
           "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate",
           "betavariate", "paretovariate", "weibullvariate", "binomialvariate")
_SECRETS = ("token_bytes", "token_hex", "token_urlsafe", "randbelow", "randbits", "choice")
#: (module, names): each name's call answered through `log_result` as it is
LOGGED = ((time, _TIME), (random, _RANDOM), (uuid, ("uuid1", "uuid4")), (os, ("urandom",)), (secrets, _SECRETS))
#: (module, names): logged as `LOGGED`'s are, in runs of `_MORE_CLOCKS` on. `random._urandom` is
#: the `os.urandom` that `random.SystemRandom` draws from (bound when `random` was imported)
_LOGGED_SINCE_7 = ((time, ("clock_gettime", "clock_gettime_ns", "thread_time", "thread_time_ns")),
                   (os, ("times",)), (random, ("_urandom",)))
#: (module, name, the place of its time argument): calls that read the clock where that argument
#: is left out or None (`time.strftime("%H:%M")`, `time.localtime()`); there they are handed the
#: logged `time.time()`, as a struct of local time where they take one (`strftime`, `asctime`)
_NOW_WHERE_OMITTED = (("localtime", 0, False), ("gmtime", 0, False), ("ctime", 0, False),
                      ("asctime", 0, True), ("strftime", 1, True))
#: (module, names): calls without arguments whose answer is the process's own, logged by name as
#: an environment variable is (`_process_fact`)
_PROCESS = ((os, ("getpid", "getppid", "cpu_count")), (socket, ("gethostname",)), (platform, ("node",)))

_ORIGINAL: dict[tuple[str, str], Callable] = {}   # (module, name) -> the function before `install`
_WRAPPERS: dict[int, Callable] = {}               # id(original) -> its stand-in (for `prepare`)
_installed = threading.Lock()


def install() -> None:
    """Patch the module functions, once per process (in an executor's worker, in a replay)."""
    with _installed:
        if _ORIGINAL:
            return
        for calls, wrap in ((LOGGED, _logged), (_PROCESS, _process_fact),
                            (_LOGGED_SINCE_7, functools.partial(_logged, since=_MORE_CLOCKS))):
            for module, names in calls:
                for name in names:
                    original = getattr(module, name, None)
                    if original is not None:
                        _patch(module, name, original, wrap(original, module.__name__, name))
        for name, at, as_struct in _NOW_WHERE_OMITTED:
            _patch(time, name, getattr(time, name), _now_where_omitted(getattr(time, name), name, at, as_struct))
        for name, wrapper in (("choice", _choice), ("choices", _choices), ("sample", _sample), ("shuffle", _shuffle)):
            _patch(random, name, getattr(random, name), wrapper)
        _ORIGINAL[("random", "Random.seed")] = random.Random.seed
        random.Random.seed = _seed
        for name, patched in (("__getitem__", _environ_getitem), ("__delitem__", _environ_delitem)):
            _ORIGINAL[("os", f"_Environ.{name}")] = getattr(os._Environ, name)
            setattr(os._Environ, name, patched)
        original, stand_in = files_read.install(users_step, _FILES)
        _WRAPPERS[id(original)] = stand_in   # (`from io import open` in the job's code: `prepare`)
        for original, stand_in in file_info.install(users_step, _STATS):
            _WRAPPERS[id(original)] = stand_in   # (`from os import stat`)
        outside_effects.install(users_step)   # (said, not logged: core/outside_effects.py)


#: numpy's legacy functions, methods of its hidden global RandomState, logged as they answer
#: (`shuffle` logs its permutation, `default_rng()` without a seed its seed: `_install_numpy`)
_NUMPY = ("beta", "binomial", "bytes", "chisquare", "choice", "dirichlet", "exponential", "f", "gamma",
          "geometric", "gumbel", "hypergeometric", "laplace", "logistic", "lognormal", "logseries", "multinomial",
          "multivariate_normal", "negative_binomial", "noncentral_chisquare", "noncentral_f", "normal", "pareto",
          "permutation", "poisson", "power", "rand", "randint", "randn", "random", "random_integers",
          "random_sample", "ranf", "sample", "rayleigh", "standard_cauchy", "standard_exponential",
          "standard_gamma", "standard_normal", "standard_t", "triangular", "uniform", "vonmises", "wald",
          "weibull", "zipf")


def _install_numpy() -> None:
    """Patch `numpy.random` once numpy is imported: a job whose code never imports numpy does not
    pay for importing it. (A function that imports it in its own body has it patched from the
    next task on.) numpy imports `numpy.random` at its first use; pandas imports it."""
    if "numpy" not in sys.modules or ("numpy.random", "default_rng") in _ORIGINAL:
        return
    np_random = sys.modules["numpy"].random   # the job's numpy (22 ms where pandas has not loaded it)
    with _installed:
        if ("numpy.random", "default_rng") in _ORIGINAL:
            return
        for name in _NUMPY:
            original = getattr(np_random, name, None)
            if original is not None:
                _patch(np_random, name, original, _logged(original, "numpy.random", name))
        _patch(np_random, "shuffle", np_random.shuffle, _np_shuffle)
        _patch(np_random, "default_rng", np_random.default_rng, _default_rng)
        seeding = sys.modules.get("numpy.random.bit_generator")   # its `SeedSequence` looks `randbits` up per call
        if callable(getattr(seeding, "randbits", None)):
            _patch(seeding, "randbits", seeding.randbits, _randbits)


def _patch(module: types.ModuleType, name: str, original: Callable, wrapper: Callable) -> None:
    _ORIGINAL[(module.__name__, name)] = original
    _WRAPPERS[id(original)] = wrapper
    wrapper.__wrapped__ = original   # so `tt.log_result(random.shuffle, x)` is logged by the name it had (logs.callable_name)
    setattr(module, name, wrapper)


def _logged(original: Callable, module: str, name: str, since: int = 1) -> Callable:
    """`original`, its answer logged when a hooked function's step calls it (in a run of version
    `since` on). It goes by the module's name for it, so pickled by reference it is found again
    as that module's function (`os.urandom` is `posix.urandom`, `random.random` is
    `Random.random` of a hidden instance)."""

    @functools.wraps(original)
    def call(*args, **kwargs):
        if users_step(since=since):
            return log_result(original, *args, **kwargs)
        return original(*args, **kwargs)
    call.__module__, call.__name__, call.__qualname__ = module, name, name
    return call


def _now_where_omitted(original: Callable, name: str, at: int, as_struct: bool) -> Callable:
    """`time.<name>`, which reads the clock where its argument `at` is left out or None: there, in
    a hooked function's step, it gets the logged `time.time()` instead (as a struct of local time
    where `as_struct`), so `time.strftime("%H:%M:%S")` in a state or an output replays as it ran.
    Local time is the workers' in replay too (core/local_time.py)."""

    @functools.wraps(original)
    def call(*args):
        if (len(args) <= at or args[at] is None) and users_step(since=_MORE_CLOCKS):
            now = log_result(_ORIGINAL[("time", "time")])
            args = (*args[:at], _ORIGINAL[("time", "localtime")](now) if as_struct else now)
        return original(*args)
    call.__module__, call.__name__, call.__qualname__ = "time", name, name
    return call


def _process_fact(original: Callable, module: str, name: str) -> Callable:
    """`original`, a call whose answer is the process's own: where a hooked function's step makes
    it, the runner logs its answer once per instance under `module.name()` (recording) or serves
    the logged one (replay), as it does an environment variable's value (`Runner.read_environ`)."""
    fact = f"{module}.{name}()"

    @functools.wraps(original)
    def call(*args, **kwargs):
        runner = CONTEXT.runner
        if args or kwargs or runner is None or not users_step(since=_PROCESS_FACTS):
            return original(*args, **kwargs)
        return runner.read_environ(fact, lambda _: original())
    call.__module__, call.__name__, call.__qualname__ = module, name, name
    return call


def _random(name: str) -> Callable:
    return _ORIGINAL[("random", name)]


def _choice(seq):
    if not users_step() or not len(seq):
        return _random("choice")(seq)
    return seq[log_result(random._inst.randrange, len(seq))]   # the same draw as `choice`'s


def _choices(population, weights=None, *, cum_weights=None, k=1):
    if not users_step():
        return _random("choices")(population, weights, cum_weights=cum_weights, k=k)
    at = log_result(_random("choices"), range(len(population)), weights, cum_weights=cum_weights, k=k)
    return [population[i] for i in at]


def _sample(population, k, *, counts=None):
    if not users_step():
        return _random("sample")(population, k, counts=counts)
    if counts is not None:
        return log_result(_random("sample"), population, k, counts=counts)
    return [population[i] for i in log_result(_random("sample"), range(len(population)), k)]


def _shuffle(x):
    if not users_step():
        return _random("shuffle")(x)
    _reorder(x, log_result(_permutation, len(x)))


def _permutation(n: int) -> list[int]:
    """How `random.shuffle` reorders a sequence of `n` (it draws the same numbers)."""
    order = list(range(n))
    _random("shuffle")(order)
    return order


def _np_shuffle(x):
    original = _ORIGINAL[("numpy.random", "shuffle")]
    if not users_step():
        return original(x)
    order = log_result(_np_permutation, len(x))
    if hasattr(x, "shape"):   # an array: along its first axis
        x[...] = x[order]
    else:
        _reorder(x, order)


def _reorder(x, order) -> None:
    """Put `x` (a mutable sequence) in `order`, in place, as a shuffle that drew it would."""
    items = [x[i] for i in order]
    for i, item in enumerate(items):
        x[i] = item


def _np_permutation(n: int) -> Any:
    """How `numpy.random.shuffle` reorders a sequence of `n` (it draws the same numbers)."""
    order = sys.modules["numpy"].arange(n)
    _ORIGINAL[("numpy.random", "shuffle")](order)
    return order


def _default_rng(seed=None):
    """`numpy.random.default_rng`: without a seed, the one it would have drawn is logged, so the
    generator it makes draws the same numbers in replay."""
    if seed is None and users_step():
        seed = log_result(_entropy)
    return _ORIGINAL[("numpy.random", "default_rng")](seed)


def _entropy() -> int:
    return sys.modules["numpy.random"].SeedSequence().entropy


def _seed(self, a=None, version=2):
    """`random.Random.seed`: a generator the job's code seeds with nothing (`Random()` does)
    gets a seed drawn from the system and logged, so that in replay it draws the same numbers."""
    if a is None and users_step(since=_SEEDS) and _called_by_users_code(vars(random)):
        a = log_result(_system_seed)
    return _ORIGINAL[("random", "Random.seed")](self, a, version)


def _system_seed() -> int:
    """A seed for `random.Random`, from the system's randomness (as `Random()` seeds itself)."""
    return int.from_bytes(_ORIGINAL.get(("os", "urandom"), os.urandom)(32), "big")


def _called_by_users_code(own: dict) -> bool:
    """Whether the code that made the generator is shipped by value (the job file's) rather than
    a loaded module's: the first frame above the patched call's caller that is not the generator
    library's own (whose globals are `own`: `Random.__init__` calls `seed`). A library that makes a
    generator once per process (`tempfile`'s names) would make it at another step, or not at all,
    in a replay that runs in another process."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals is own:
        frame = frame.f_back
    return frame is not None and id(frame.f_globals) not in _loaded_namespaces()


def _randbits(k: int) -> int:
    """numpy's source of a `SeedSequence()` made without entropy (`RandomState()`,
    `Generator(PCG64())`, `default_rng()`): logged where the job file's code asks for one."""
    original = _ORIGINAL[("numpy.random.bit_generator", "randbits")]
    if users_step(since=_SEEDS) and _called_by_users_code({}):
        return log_result(original, k)
    return original(k)


_TIMESTAMP = ("now", "today", "utcnow")   # pandas' clock reads: classmethods of `pandas.Timestamp`
_NOW_STRINGS = frozenset({"now", "today"})   # ... and the strings `Timestamp(...)` reads the clock for


def _install_pandas() -> None:
    """Patch `pandas.Timestamp`'s clock reads once pandas is imported (as `_install_numpy`)."""
    pandas = sys.modules.get("pandas")
    timestamp = getattr(pandas, "Timestamp", None)
    if timestamp is None or ("pandas.Timestamp", "now") in _ORIGINAL:
        return
    with _installed:
        if ("pandas.Timestamp", "now") in _ORIGINAL:
            return
        for name in _TIMESTAMP:
            if isinstance(vars(timestamp).get(name), classmethod):
                original = getattr(timestamp, name)   # bound to the class
                _ORIGINAL[("pandas.Timestamp", name)] = original
                setattr(timestamp, name, classmethod(_logged_classmethod(timestamp, original)))
        new = vars(timestamp).get("__new__")
        if isinstance(new, staticmethod):   # `Timestamp("now")`, `Timestamp("today")`
            _ORIGINAL[("pandas.Timestamp", "__new__")] = new.__func__
            timestamp.__new__ = staticmethod(_timestamp_new)


def _timestamp_new(cls, *args, **kwargs):
    """`pandas.Timestamp(...)`: the strings that read the clock, `"now"` and `"today"` (parsed
    in C, out of a patch's reach), answered through `log_result` in a hooked function's step."""
    original = _ORIGINAL[("pandas.Timestamp", "__new__")]
    if args and type(args[0]) is str and args[0] in _NOW_STRINGS and cls is sys.modules["pandas"].Timestamp \
            and users_step(since=_SEEDS):
        return log_result(_timestamp_of, *args, **kwargs)
    return original(cls, *args, **kwargs)


def _timestamp_of(*args, **kwargs):
    """`pandas.Timestamp(*args, **kwargs)` as pandas makes it (what `_timestamp_new` logs)."""
    timestamp = sys.modules["pandas"].Timestamp
    return _ORIGINAL[("pandas.Timestamp", "__new__")](timestamp, *args, **kwargs)


def _logged_classmethod(cls: type, original: Callable) -> Callable:
    """A classmethod's function, its answer logged when a hooked function's step calls it on
    `cls` (on a subclass it answers unlogged, as `original` would not make the subclass)."""

    @functools.wraps(original)
    def call(klass, *args, **kwargs):
        if klass is not cls:
            return original.__func__(klass, *args, **kwargs)
        if users_step(since=_SEEDS):
            return log_result(original, *args, **kwargs)
        return original(*args, **kwargs)
    return call   # (`functools.wraps` names what it wraps: `__wrapped__`, for `logs.callable_name`)


for _f, _module in ((_choice, "random"), (_choices, "random"), (_sample, "random"), (_shuffle, "random"),
                    (_np_shuffle, "numpy.random"), (_default_rng, "numpy.random")):
    _f.__name__ = _f.__qualname__ = _f.__name__.removeprefix("_np").lstrip("_")
    _f.__module__ = _module
del _f, _module


# --- the environment ----------------------------------------------------------------------------

#: Names whose values are kept out of the run file, which travels (`tt pack`, a laptop): a replay
#: reads them from its own environment, and `tt verify` finds a state they change
SECRET = re.compile(r"SECRET|TOKEN|PASSW|PASSPHRASE|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|AUTH|SESSION_?KEY",
                    re.IGNORECASE)


@functools.cache
def _secret(name: str) -> bool:
    """Whether `SECRET` finds `name`, decided once a name: the search takes microseconds, and
    libraries read the same few variables per batch while a step runs (pyarrow's IPC writer,
    PySpark's Arrow conversion, seen in a py-spy profile of a StatefulProcessor's recording)."""
    return SECRET.search(name) is not None


def _environ_getitem(self, key):
    """`os.environ[key]`, and so `os.environ.get`, `os.getenv`, `key in os.environ`: where a
    hooked function's step reads a variable, its value goes through the runner, which logs it
    once per name (recording) or serves the recorded one (replay). A job's settings read from the
    environment (a rate, a threshold, a feature switch) then replay as they ran on a machine set
    up otherwise. Listing the names (`for name in os.environ`) is not logged."""
    read = _ORIGINAL[("os", "_Environ.__getitem__")]
    runner = CONTEXT.runner
    if runner is None or self is not os.environ or type(key) is not str:
        return read(self, key)
    if _secret(key) or not users_step(since=_ENVIRON):
        return read(self, key)
    value = runner.read_environ(key, _variable)
    if value is None:
        raise KeyError(key)
    return value


def _environ_delitem(self, key):
    """`del os.environ[key]`, and so `os.environ.pop(key)`: in a replay, a variable the recording
    had set (as a read in the step was served) and this process lacks is deleted all the same,
    where the recording deleted it without an error (a `pop` of what a worker's earlier task set)."""
    try:
        _ORIGINAL[("os", "_Environ.__delitem__")](self, key)
    except KeyError:
        runner = CONTEXT.runner
        if (runner is None or self is not os.environ or type(key) is not str
                or not runner.set_in_recording(key) or not users_step(since=_ENVIRON)):
            raise


def _variable(name: str) -> str | None:
    """This process's value of environment variable `name`, None where it is unset."""
    try:
        return _ORIGINAL[("os", "_Environ.__getitem__")](os.environ, name)
    except KeyError:
        return None


# --- datetime ---------------------------------------------------------------------------------

class _RealClass(type):
    """`isinstance` and `issubclass` answer for a stand-in as for the class it stands in for."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.real)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.real)


class LoggedDatetime(_dt.datetime, metaclass=_RealClass):
    """`datetime.datetime` in the user's code: `now`, `utcnow` and `today` logged; whatever it
    makes is a plain `datetime.datetime`."""

    real = _dt.datetime

    def __new__(cls, *args, **kwargs):
        return _dt.datetime(*args, **kwargs)

    @classmethod
    def now(cls, tz=None):
        return log_result(_dt.datetime.now, tz) if users_step() else _dt.datetime.now(tz)

    @classmethod
    def utcnow(cls):
        return log_result(_dt.datetime.utcnow) if users_step() else _dt.datetime.utcnow()

    @classmethod
    def today(cls):
        return log_result(_dt.datetime.today) if users_step() else _dt.datetime.today()


class LoggedDate(_dt.date, metaclass=_RealClass):
    """`datetime.date` in the user's code: `today` logged."""

    real = _dt.date

    def __new__(cls, *args, **kwargs):
        return _dt.date(*args, **kwargs)

    @classmethod
    def today(cls):
        return log_result(_dt.date.today) if users_step() else _dt.date.today()


def _datetime_module() -> types.ModuleType:
    """The `datetime` module as the user's code sees it: the stand-ins in place of its two classes."""
    module = types.ModuleType("datetime", _dt.__doc__)
    module.__dict__.update({k: v for k, v in vars(_dt).items() if not k.startswith("__")})
    module.datetime, module.date = LoggedDatetime, LoggedDate
    return module


_DATETIME = _datetime_module()


# --- the user's code --------------------------------------------------------------------------

def prepare(user_code: Any) -> None:
    """Make the calls of `user_code` (a hooked operator's function, class or object) logged:
    the module functions patched, and its globals' `datetime` names pointed at the stand-ins."""
    install()
    _install_numpy()
    _install_pandas()
    files_read.install_spark_files(users_step, _FILES)
    outside_effects.install_pyarrow(users_step)
    files_read.install_pyarrow_reads()
    swaps = {id(_dt.datetime): LoggedDatetime, id(_dt.date): LoggedDate, id(_dt): _DATETIME, **_WRAPPERS}
    loaded, done = _loaded_namespaces(), set()   # (and the globals already seen)
    for fn in _functions(user_code, set()):
        g = fn.__globals__
        if id(g) in loaded or id(g) in done:
            continue
        done.add(id(g))
        for name, value in list(g.items()):
            swap = swaps.get(id(value))
            if swap is not None:
                g[name] = swap   # (`from time import time`, `from datetime import datetime`)


_namespaces: tuple[tuple[int, int], frozenset[int]] = ((-1, 0), frozenset())   # (`libraries.modules_stamp()`, namespaces)


def _loaded_namespaces() -> frozenset[int]:
    """The ids of every loaded module's namespace, which `prepare` leaves alone: it changes only
    globals cloudpickle made for the job file's code, shipped by value. So neither a library's
    (its `type(v) is datetime` stays true) nor the job's live one in its driver or a notebook,
    which a task run on the driver (an empty partition's) would otherwise change; and the same
    code in the executor and in replay. Listed again only where a module came, went or was
    replaced since the last list (`libraries.modules_stamp`): a worker's tasks asked each time,
    104 µs over a worker's modules, 0.4 ms a task on a busy machine."""
    global _namespaces
    stamp = libraries.modules_stamp()
    if stamp != _namespaces[0]:
        _namespaces = (stamp, frozenset(id(getattr(m, "__dict__", None)) for m in list(sys.modules.values())))
    return _namespaces[1]


def _functions(obj: Any, seen: set[int]) -> Iterator[types.FunctionType]:
    """The Python functions of the user's code reachable from `obj`: itself, its closure's,
    its class's methods."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, functools.partial):
        yield from _functions(obj.func, seen)
    elif inspect.ismethod(obj):
        yield from _functions(obj.__func__, seen)
        yield from _functions(obj.__self__, seen)   # its instance's class, or its class
    elif isinstance(obj, types.FunctionType):
        yield obj
        for cell in obj.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:   # not yet bound
                continue
            if callable(value):
                yield from _functions(value, seen)
    elif isinstance(obj, type):
        for klass in obj.__mro__:
            if klass.__module__ == "builtins" or klass.__module__.startswith(_NOT_USERS):
                continue
            for value in vars(klass).values():
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if isinstance(value, types.FunctionType):
                    yield from _functions(value, seen)
    elif callable(obj) or hasattr(obj, "__dict__"):
        yield from _functions(type(obj), seen)


__all__ = ["install", "prepare", "users_step", "LoggedDatetime", "LoggedDate", "STEP_FRAMES", "LOGGED"]
