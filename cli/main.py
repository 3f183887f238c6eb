"""The `tt` command: record a PySpark job, then inspect, verify and debug the run.

Every failure a user can cause prints one line on stderr and exits non-zero;
`tt --debug ...` (or `TT_DEBUG=1`) shows the traceback instead.
"""

from __future__ import annotations

import importlib
import os
import sqlite3
import sys

import typer

try:  # typer >= 0.20 vendors click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer on real click
    from click import exceptions as click_errors

from ..core.errors import TTError

app = typer.Typer(
    name="tt",
    help="Time-travel debugging for PySpark dataflows: record a job, then jump back and step through it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

_debug = {"on": os.environ.get("TT_DEBUG") == "1"}


@app.callback()
def _global(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")):
    if debug:
        _debug["on"] = True


#: The commands, each registered by its module (cli/NAME.py adds `tt NAME`), in the order of `tt --help`.
COMMANDS = ("checkpoint", "debug", "demo", "inspect", "lineage", "migrate", "pack", "record", "replay", "verify")


def _register(argv: list[str]) -> None:
    """Import the module of the command `argv` names, alone: each brings its own imports (the
    replay engine, pyarrow, the TUI...), which a command that does not need them should not
    wait for. Every command's module when `argv` names none (`tt`, `tt --help`) or a wrong one
    (the error then offers the near names)."""
    name = next((a for a in argv if not a.startswith("-")), None)
    for command in ([name] if name in COMMANDS else COMMANDS):
        importlib.import_module(f"{__package__}.{command}")
    # in the order of COMMANDS, whichever a process registered first
    app.registered_commands.sort(key=lambda c: COMMANDS.index(c.name or c.callback.__name__))


def _reflowed(text: str) -> str:
    """A docstring's prose paragraphs on one line each, for the terminal to wrap (rich keeps
    every line break of a help text, so a docstring's lines came out cut in two); a paragraph
    with an indented line or a list item keeps its lines."""
    out = []
    for para in text.split("\n\n"):
        lines = para.splitlines()
        keep = any(line[:1].isspace() or line.lstrip()[:2] in ("- ", "* ") for line in lines)
        out.append(para if keep else " ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _escape_help(command) -> None:
    """Help texts are rendered as rich markup, where "[default: 0]" is a style tag and
    vanishes: escape such brackets in every option's and argument's help (once), and
    reflow each command's docstring (`_reflowed`)."""
    from rich.markup import escape

    for cmd in [command, *getattr(command, "commands", {}).values()]:
        if cmd.help and not getattr(cmd, "_tt_reflowed", False):
            cmd.help = _reflowed(cmd.help)
            cmd._tt_reflowed = True
        for param in cmd.params:
            text = getattr(param, "help", None)
            if text and "[" in text and not getattr(param, "_tt_escaped", False):
                param.help = escape(text)
                param._tt_escaped = True


def main(argv: list[str] | None = None) -> int:
    if argv is None:   # the `tt` process itself (not a call from Python): it may start again with a hash seed
        from .hash_seed import rerun_with_hash_seed

        rerun_with_hash_seed(sys.argv[1:])
    argv = list(sys.argv[1:] if argv is None else argv)
    _register(argv)
    # per call: one `tt --debug …` in a process does not stick to the next
    _debug["on"] = "--debug" in argv[:1] or os.environ.get("TT_DEBUG") == "1"
    command = typer.main.get_command(app)
    if not argv or "-h" in argv or "--help" in argv:   # help is shown: rich is imported for it alone
        _escape_help(command)
    try:
        result = command.main(argv, prog_name="tt", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except (typer.Exit, getattr(click_errors, "Exit", typer.Exit)) as e:
        return getattr(e, "exit_code", 0)
    except (typer.Abort, getattr(click_errors, "Abort", typer.Abort)):
        _say("aborted")
        return 130
    except click_errors.NoArgsIsHelpError:  # `tt` alone: typer has printed the help
        return 2
    except click_errors.UsageError as e:
        if _debug["on"]:
            raise
        where = f"tt {e.ctx.info_name}" if e.ctx is not None and e.ctx.info_name != "tt" else "tt"
        _say(f"{e.format_message()} (see `{where} --help`)")
        return 2
    except TTError as e:
        if _debug["on"]:
            raise
        _say(str(e))
        return e.exit_code
    except sqlite3.DatabaseError as e:
        if _debug["on"]:
            raise
        _say(f"the run file is damaged or unreadable ({e})")
        return 1
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if _debug["on"]:
            raise
        if type(e).__name__ == "ZstdError":
            # only stored blobs are ever decompressed: their bytes are damaged
            _say(f"the run file is damaged: stored data cannot be decompressed ({e})")
            return 1
        # a bug in tt: one line, never a traceback unless asked for, never exit 0
        _say(f"internal error: {type(e).__name__}: {e} (a bug in tt; `tt --debug {' '.join(argv[:1])} …` "
             f"shows the traceback)")
        return 70


def _say(message: str) -> None:
    first = " ".join(str(message).split("\n")[0].split())
    print(f"tt: error: {first}", file=sys.stderr)


def debugging() -> bool:
    return _debug["on"]


if __name__ == "__main__":
    sys.exit(main())
