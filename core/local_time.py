"""The local time zone the job's Python workers ran in, which a replay runs in too.

A job's code that turns a timestamp into a date or an hour of the day in local time
(`datetime.fromtimestamp(ts)`, `time.localtime`, `time.strftime`, `date.fromtimestamp`) gets
what the process's time zone says: a cluster's executors run in UTC, a laptop in its owner's
zone, so a replay there bucketed the same events into other hours and `tt verify` blamed the
input. The recording notes the zone each task's worker runs in (`zone`, in the task's hello;
the first goes into the run file's meta, recorder/coordinator.py) and the replay engine sets this
process's to it (`use`), as `cli/hash_seed.py` does for the hash seed. The debugger's own clock
times then read in that zone too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_ZONEINFO = "/zoneinfo/"


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


def use(recorded: str | None) -> bool:
    """Run this process in the zone `recorded` (a run's `RunReader.timezone`); True where that
    changed it. Nothing where the run names none (recorded before 2026-12-03, or its workers'
    zone could not be told)."""
    if not recorded or not hasattr(time, "tzset") or zone() == recorded:   # (Windows has no tzset)
        return False
    os.environ["TZ"] = recorded
    time.tzset()
    return True


__all__ = ["zone", "use"]
