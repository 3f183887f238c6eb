"""The state tree's "… N more" line, in the real widget inside a real (minimal) Textual app.

A field with more entries than the tree shows at once (`CHILD_LIMIT`) ends in a line that says
how many are left and what Enter shows: "Enter shows 200 more" over one entry left promised
what was not there. Pressing Enter on the line must show what it said.
"""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from tt.tui.widgets.state_inspector import CHILD_LIMIT, StateInspector


class _Host(App):
    def compose(self) -> ComposeResult:
        yield StateInspector()


async def _showing(pilot, state: dict, op: str) -> StateInspector:
    """The app's inspector, showing `state` as instance 0 of `op`."""
    inspector = pilot.app.query_one(StateInspector)
    inspector.show(op, {f"{op}:0": state}, {})
    await pilot.pause()
    return inspector


def _more_lines(inspector: StateInspector) -> list[str]:
    return [line.strip() for line in inspector.visible_text().splitlines() if "more (Enter" in line]


def _entries(inspector: StateInspector, field: str) -> int:
    node = next(n for n in inspector.tree.root.children[0].children if n.data.path == (field,))
    return sum(1 for c in node.children if not c.data.more)


def test_the_more_line_says_what_enter_shows_and_enter_shows_it():
    state = {"one_left": {f"k{i:04}": i for i in range(CHILD_LIMIT + 1)},
             "many_left": {f"k{i:04}": i for i in range(2 * CHILD_LIMIT + 50)}}

    async def run():
        app = _Host()
        async with app.run_test(size=(100, 40)) as pilot:
            inspector = await _showing(pilot, state, "Op")
            top = inspector.tree.root.children[0]
            for field in top.children:
                field.expand()
            await pilot.pause()
            assert sorted(_more_lines(inspector)) == [
                "… 1 more (Enter shows it)", f"… {CHILD_LIMIT + 50:,} more (Enter shows {CHILD_LIMIT} more)"]
            for field, shown in (("one_left", CHILD_LIMIT + 1), ("many_left", 2 * CHILD_LIMIT)):
                node = next(n for n in top.children if n.data.path == (field,))
                more = next(c for c in node.children if c.data.more)
                inspector.tree.focus()
                inspector.tree.move_cursor(more)
                await pilot.pause()
                await pilot.press("enter")
                await pilot.pause()
                assert _entries(inspector, field) == shown, field
            assert _more_lines(inspector) == ["… 50 more (Enter shows them)"]

    asyncio.run(run())


def test_a_set_members_node_names_its_set_as_a_field():
    """`C` and `w` take the field under the state tree's cursor. `/` finds a member of a set
    through tt's encoding (`seen.$set.1326`: its place among the sorted members), so `C` went
    back to where some other member was at that place. The field a member names is its set;
    an item of a tuple, the tuple."""
    from tt.core import values
    from tt.replay.state_paths import field_path

    state = values.encode({"seen": {f"tx-{i:04}" for i in range(500)}, "dropped": 3, "by": {"u1": (1, "tx-zz")}})

    async def run():
        app = _Host()
        async with app.run_test(size=(100, 40)) as pilot:
            inspector = await _showing(pilot, state, "Dedup")
            found = []
            for text in ("tx-0123", "tx-zz"):
                assert inspector.search(text)
                await pilot.pause()
                found.append(inspector.tree.cursor_node.data.path)
            member, item = found
            assert member[:2] == ("seen", "$set") and field_path(member) == ("seen",), member
            assert item[:3] == ("by", "u1", "$tuple") and field_path(item) == ("by", "u1"), item
            assert field_path(("dropped",)) == ("dropped",)

    asyncio.run(run())
