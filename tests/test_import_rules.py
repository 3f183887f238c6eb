"""The layering of docs/ARCHITECTURE.md, enforced: who may import what.

Only `recorder/` imports pyspark; only `tui/` imports textual; the core imports
only the standard library, orjson, xxhash, cloudpickle and greenlet; replay and the store never
reach Spark. Checked statically on every import statement (including imports
inside functions) and dynamically: loading the debugger's modules must not load
pyspark.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["core", "recorder", "store", "replay", "tui", "cli"]

# layer -> tt layers it may import
TT_LAYERS = {
    "core": {"core"},
    "store": {"core", "store"},
    "recorder": {"core", "store", "recorder"},
    "replay": {"core", "store", "replay"},
    "tui": {"core", "store", "replay", "tui"},
    "cli": {"core", "store", "replay", "recorder", "tui", "cli"},
}
CORE_THIRD_PARTY = {"orjson", "xxhash", "cloudpickle", "greenlet"}


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = path.relative_to(ROOT).parent.parts
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                found.append((".".join(("tt",) + tuple(base) + ((node.module,) if node.module else ())),
                              node.lineno))
            else:
                found.append((node.module or "", node.lineno))
    return found


def _files():
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            yield pkg, f


def test_every_import_respects_the_layers():
    stdlib = set(sys.stdlib_module_names)
    problems = []
    for layer, f in _files():
        for name, line in _imports(f):
            top = name.split(".")[0]
            where = f"{f.relative_to(ROOT)}:{line} imports {name}"
            if top == "pyspark" and layer != "recorder":
                problems.append(where + " (only recorder/ may import pyspark)")
            if top == "textual" and layer != "tui":
                problems.append(where + " (only tui/ may import textual)")
            if top == "tt":
                sub = name.split(".")[1] if "." in name else None
                if sub in TT_LAYERS and sub not in TT_LAYERS[layer]:
                    problems.append(where + f" ({layer}/ may not import tt.{sub})")
            if layer == "core" and top not in stdlib and top not in CORE_THIRD_PARTY and top != "tt":
                problems.append(where + " (the core imports only stdlib, orjson, xxhash, cloudpickle, greenlet)")
    assert not problems, "\n".join(problems)


def test_the_rules_catch_a_violation(tmp_path):
    """The checker itself must see imports inside functions and relative imports."""
    probe = ROOT / "replay" / "_probe_import_rules.py"
    probe.write_text("def f():\n    import pyspark\n    from ..recorder import task\n")
    try:
        names = [n for n, _ in _imports(probe)]
        assert "pyspark" in names and "tt.recorder" in names
    finally:
        probe.unlink()


def test_debugger_modules_load_without_spark_or_textual_leaks():
    code = ("import sys, tt, tt.replay.engine, tt.replay.facts, tt.store.reader, tt.cli.main;"
            "bad = [m for m in ('pyspark', 'py4j') if m in sys.modules];"
            "assert not bad, bad;"
            "assert 'textual' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)


def test_the_benchmarks_and_samples_parse_and_explain_themselves():
    """Benchmarks run only by hand: at least they must compile and answer --help."""
    scripts = sorted((ROOT / "benches").glob("*.py")) + sorted((ROOT / "sample_runs").rglob("*.py"))
    assert len(scripts) >= 8
    for f in scripts:
        compile(f.read_text(), str(f), "exec")
    for f in sorted((ROOT / "benches").glob("*.py")):
        if '__name__ == "__main__"' not in f.read_text():   # a module the benches share (reporting.py)
            continue
        done = subprocess.run([sys.executable, str(f), "--help"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and "usage:" in done.stdout, (f.name, done.stderr[-500:])
