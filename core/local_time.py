"""The local time zone the job's Python workers ran in, which a replay runs in too.

A job's code that turns a timestamp into a date or an hour of the day in local time
(`datetime.fromtimestamp(ts)`, `time.localtime`, `time.strftime`, `date.fromtimestamp`) gets
what the process's time zone says: a cluster's executors run in UTC, a laptop in its owner's
zone, so a replay there bucketed the same events into other hours and `tt verify` blamed the
input. The recording notes the zone each task's worker runs in (`zone`, in the task's hello;
the first goes into the run file's meta, recorder/coordinator.py) and the replay engine sets this
process's to it (`use`), as `cli/hash_seed.py` does for the hash seed. The debugger's own clock
times then read in that zone too.

A zone's name is not enough where the replaying machine lacks its data: glibc takes an unknown
`TZ` for UTC and says nothing (a slim container without tzdata, a zone file only the cluster
has). So a task also sends `facts()`: its zone file's POSIX rule (the footer of a TZif file, e.g.
`JST-9` or `EST5EDT,M3.2.0,M11.1.0`) and the offsets it tells at a few instants (`probe`). A
replay takes the first of the name where this machine has its file, Python's `tzdata` package's
file, the rule, and the workers' one offset, that tells the offsets the workers told; where none
does, the setting carries a note, which `tt inspect` prints, `tt verify` names among its suspects
and `tt debug` says when it opens.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

_ZONEINFO = "/zoneinfo/"
_SYSTEM_ZONES = "/usr/share/zoneinfo"   # glibc's, where `TZDIR` does not name another
#: the instants `probe` tells offsets at, UTC: mid-January and mid-July of 2000 and of 2024
#: (a zone's rule says its present; its file its history too)
PROBES = (947894400, 963619200, 1705276800, 1721001600)
_RULE = re.compile(r"(?:[A-Za-z]{3,}|<[^>]+>)[+-]?\d")   # a POSIX `TZ` rule, not a zone file's name


def zone() -> str | None:
    """This process's time zone as a `TZ` value another process can take: `TZ` where it is set,
    else the zone `/etc/localtime` links to (or `/etc/timezone` names), else a POSIX rule from the
    offset for a zone without daylight saving time; None where none of these tells."""
    tz = os.environ.get("TZ")
    if tz:
        return tz
    target = os.path.realpath("/etc/localtime")
    if _ZONEINFO in target:
        return target.split(_ZONEINFO, 1)[1]
    try:
        named = Path("/etc/timezone").read_text().strip()
    except OSError:
        named = ""
    if named:
        return named
    if not time.daylight:
        return _posix(time.tzname[0], time.timezone)
    return None


def _posix(name: str, seconds_west: int) -> str:
    """A POSIX `TZ` rule for a fixed offset: `<+09>-9`, `UTC0`, `<-0330>3:30`."""
    sign = "-" if seconds_west < 0 else ""
    hours, rest = divmod(abs(seconds_west), 3600)
    offset = f"{sign}{hours}" + (f":{rest // 60:02d}" if rest else "")
    return (name if name.isalpha() and len(name) >= 3 else f"<{name}>") + offset


def facts() -> dict:
    """What a replay checks its local time against: this process's zone file's POSIX rule (None
    where the zone is a rule itself, or its file has none) and the offsets it tells (`probe`)."""
    return {"rule": _rule_of(zone()), "probe": probe()}


def probe() -> list[list]:
    """This process's local offset from UTC (seconds) and zone abbreviation at each of `PROBES`."""
    return [[t.tm_gmtoff, t.tm_zone] for t in map(time.localtime, PROBES)]


def _zone_file(tz: str | None) -> Path | None:
    """The TZif file glibc reads for `tz` here (None where it reads none: a rule, or a name this
    machine has no file for)."""
    if not tz:
        tz = "/etc/localtime"
    name = tz[1:] if tz.startswith(":") else tz
    if _RULE.match(name) and "/" not in name:
        return None
    path = Path(name) if name.startswith("/") else Path(os.environ.get("TZDIR") or _SYSTEM_ZONES) / name
    return path if path.is_file() else None


def _rule_of(tz: str | None) -> str | None:
    """The POSIX rule at the end of `tz`'s zone file (TZif version 2 and later), None without one."""
    path = _zone_file(tz)
    try:
        data = path.read_bytes() if path is not None else b""
    except OSError:
        return None
    if not data.startswith(b"TZif") or data[4:5] in (b"\0", b"") or not data.endswith(b"\n"):
        return None
    footer = data[:-1].rsplit(b"\n", 1)[-1]
    return footer.decode("ascii", "replace") or None


def _packaged(name: str) -> str | None:
    """`name`'s file in Python's `tzdata` package as a `TZ` value (`:/path`), None without one."""
    folder = _tzdata()
    if folder is None or name.startswith((":", "/")) or ".." in name:
        return None
    path = folder / "zoneinfo" / name
    return f":{path}" if path.is_file() else None


def _tzdata() -> Path | None:
    """The folder of Python's `tzdata` package, found as an import would find it (not imported)."""
    try:
        spec = importlib.util.find_spec("tzdata")
    except (ImportError, ValueError):   # (ValueError: a module set to None, so that it cannot be imported)
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class Setting(NamedTuple):
    """How a replay here tells local time: `tz`, the `TZ` value it runs with (None: this process's
    own); `note`, where local time here still differs from the workers' (None where it does not,
    as far as `probe` tells)."""

    tz: str | None
    note: str | None


def setting(recorded: str | None, recorded_facts: dict | None = None) -> Setting:
    """How a replay here tells local time for a run whose workers ran in `recorded` (its
    `RunReader.timezone`) and told `recorded_facts` (`facts()`; None for a run recorded before
    tt kept them): the first of the zone's file here, Python's tzdata's, the workers' file's
    rule and their one fixed offset (where they told one all along: a worker without the zone's
    data tells UTC) whose offsets are the workers'. Tried in this process, left as it was."""
    if not recorded or not hasattr(time, "tzset"):   # (a run that names none; Windows has no tzset)
        return Setting(None, None)
    recorded_facts = recorded_facts or {}
    rule, expected = recorded_facts.get("rule"), recorded_facts.get("probe")
    candidates = [(tz, how) for tz, how in (
        (recorded if _RULE.match(recorded) or _zone_file(recorded) is not None else None, "its file here"),
        (_packaged(recorded), "Python's tzdata"),
        (rule, f"its rule {rule}"),
        (_fixed(expected), "the one offset the workers told")) if tz]
    if not expected:   # (a run recorded before the facts were kept: nothing to compare)
        if candidates:
            return Setting(candidates[0][0], None)
        return Setting(recorded, f"local time in {recorded} cannot be told here: this machine has no data for it, "
                                 f"so glibc tells UTC; {_remedy()}")
    expected = [list(p) for p in expected]
    now = os.environ.get("TZ")
    if now in {tz for tz, _ in candidates} and probe() == expected:
        # this process tells the workers' local time already (a second engine's, say): trying
        # another candidate would change its zone for a moment under a replay that may be running
        return Setting(now, None)
    if not candidates:
        candidates = [(recorded, "nothing: this machine has no data for it, so glibc tells UTC")]
    first = None   # (what the first candidate tells: the note says where it differs)
    for tz, _ in candidates:
        told = _told(tz)
        if told == expected:
            return Setting(tz, None)
        first = told if first is None else first
    tz, how = candidates[0]
    for at, there, here in zip(PROBES, expected, first):
        if list(there) != here:
            when = time.strftime("%Y-%m-%d", time.gmtime(at))
            return Setting(tz, f"local time in {recorded} differs here from the workers' (on {when}: "
                               f"{_offset(here)} here, {_offset(there)} there; read by {how}): {_remedy()}")
    return Setting(tz, None)


def _fixed(told: list | None) -> str | None:
    """A POSIX rule for the one offset and abbreviation `told` (a `probe`) has, None where it has more."""
    if not told or any(list(t) != list(told[0]) for t in told):
        return None
    seconds_east, abbreviation = told[0]
    return _posix(str(abbreviation), -int(seconds_east))


def _remedy() -> str:
    if _tzdata() is None:
        return "install tzdata (pip install tzdata) where tt replays"
    return "put the workers' zone file where this machine's are (TZDIR names the folder)"


def _told(tz: str) -> list[list]:
    """`probe()` in the zone `tz`, this process's zone put back after."""
    was = os.environ.get("TZ")
    os.environ["TZ"] = tz
    time.tzset()
    try:
        return probe()
    finally:
        if was is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = was
        time.tzset()


def _offset(told: list) -> str:
    seconds, abbreviation = told
    sign, seconds = ("-" if seconds < 0 else "+"), abs(seconds)
    return f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d} {abbreviation}"


def use(recorded: str | None, recorded_facts: dict | None = None) -> Setting:
    """Run this process in the zone `recorded` as `setting` says a replay here tells it best."""
    chosen = setting(recorded, recorded_facts)
    if chosen.tz is not None and os.environ.get("TZ") != chosen.tz:
        os.environ["TZ"] = chosen.tz
        time.tzset()
    return chosen


__all__ = ["zone", "facts", "probe", "setting", "use", "Setting"]
