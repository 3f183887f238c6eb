#!/usr/bin/env bash
# Smoke test of `tt debug` in a real terminal (tmux), driven by keys alone.
#
#   tests/tui_tmux_smoke.sh RUN.db [TT_COMMAND]
#
# RUN.db is a recording of sample_runs/fraud (watch FE; `tt demo` records one).
# The script opens the debugger in a detached 120x40 tmux session, waits for
# the replay engine and types the README's sequence key by key: `c`
# 'Bob' in FD.blacklist Enter, `/` Bob Enter, `w` `w`, `C` Enter. It reads FD's state
# and then the tuple about to blacklist Bob (his ¥5000 payment, read as $5000)
# off the screen, quits, and checks that tt debug exited 0 (a crash exits 1).
# Every check is on `tmux capture-pane` output. Exit 0 on success.
set -euo pipefail

RUN=${1:?usage: $0 RUN.db [TT_COMMAND]}
TT=${2:-tt}
SOCKET="tt-smoke-$$"
SESSION=debug
TMUX_CMD=(tmux -u -L "$SOCKET")
export LANG=C.UTF-8 LC_ALL=C.UTF-8

cleanup() { "${TMUX_CMD[@]}" kill-server 2>/dev/null || true; }
trap cleanup EXIT

screen() { "${TMUX_CMD[@]}" capture-pane -p -t "$SESSION"; }

wait_for() {  # wait_for TEXT SECONDS
    local text=$1 seconds=$2 i
    for ((i = 0; i < seconds * 5; i++)); do
        if screen | grep -qF -- "$text"; then return 0; fi
        sleep 0.2
    done
    echo "--- timed out after ${seconds}s waiting for: $text" >&2
    screen >&2
    return 1
}

wait_for_re() {  # wait_for_re REGEX SECONDS WHAT: the screen settles after a message appears
    local re=$1 seconds=$2 what=$3 i
    for ((i = 0; i < seconds * 5; i++)); do
        if screen | grep -qE -- "$re"; then return 0; fi
        sleep 0.2
    done
    echo "--- $what (timed out after ${seconds}s waiting for /$re/)" >&2
    screen >&2
    return 1
}

keys() { "${TMUX_CMD[@]}" send-keys -t "$SESSION" "$@"; }
type_text() { "${TMUX_CMD[@]}" send-keys -t "$SESSION" -l -- "$1"; }

"${TMUX_CMD[@]}" new-session -d -s "$SESSION" -x 120 -y 40 \
    "env LANG=C.UTF-8 TT_KEY_FILE='${TT_KEY_FILE:-}' $TT debug '$RUN'; echo 'tt debug exited with' \$?; sleep 30"

wait_for "replay engine ready" 90
screen | grep -qF "[FE θ" || { echo "the DAG does not show θ = FE" >&2; screen >&2; exit 1; }

# c: run until Bob is blacklisted
keys c
wait_for "Run until" 10
sleep 0.5
type_text "'Bob' in FD.blacklist"
wait_for "'Bob' in FD.blacklist" 10
keys Enter
wait_for "stopped after FD:" 120
instance=$(screen | grep -oE "stopped after FD:[0-9]+" | head -1 | grep -oE "[0-9]+$")
wait_for "state of FD" 10
wait_for_re "Bob: [0-9]+ +\(new\)" 10 "FD's blacklist does not show Bob as new"
echo "found: FD:$instance blacklisted Bob"

# The README's keys, exactly: `/` `Bob` Enter puts the state tree's cursor on him; `w` shows why
# he is there and `w` closes it; `C` Enter (the
# field comes from the cursor) goes back to just before the change.
keys /
wait_for "Search the state tree" 10
type_text "Bob"
wait_for "Bob" 10
keys Enter
wait_for "found 'Bob' in the state of FD" 10
# `w`: why is he there -- the tree above the state names the call that wrote blacklist['Bob']; `w` closes it
keys w
wait_for "why FD:$instance blacklist['Bob']: " 120
screen | grep -qF "through FD:$instance blacklist['Bob'], by FD:$instance:" \
    || { echo "w did not show the call that wrote blacklist['Bob']" >&2; screen >&2; exit 1; }
echo "found: why FD:$instance blacklist['Bob'] names the call that wrote it"
keys w
for ((i = 0; i < 50; i++)); do   # the tree closes
    if ! screen | grep -qF "through FD:$instance blacklist"; then break; fi
    sleep 0.2
done
! screen | grep -qF "through FD:$instance blacklist" || { echo "w again did not close the tree" >&2; screen >&2; exit 1; }
keys C
wait_for "Back to the last change of" 10
for ((i = 0; i < 50; i++)); do   # the prompt's field is filled in from the cursor
    if screen | grep -A3 -F "Back to the last change of" | grep -qF "FD:$instance.blacklist.Bob"; then break; fi
    sleep 0.2
done
screen | grep -A3 -F "Back to the last change of" | grep -qF "FD:$instance.blacklist.Bob" \
    || { echo "C did not fill in FD:$instance.blacklist.Bob from the state tree's cursor" >&2; screen >&2; exit 1; }
keys Enter
wait_for "you are just before it" 120
if screen | grep -qE "Traceback|AttributeError"; then echo "tt debug crashed" >&2; screen >&2; exit 1; fi
wait_for_re "Bob: [0-9]+ +removed" 10 "Bob is still in the blacklist before the change"
wait_for_re "FD:$instance:[0-9]+ .*customer: 'Bob', amount: '¥5000'" 10 \
    "the tuple about to blacklist Bob is not his ¥5000 payment"
echo "found: the next tuple of FD:$instance is Bob's ¥5000 payment, read as \$5000"

keys q
wait_for "tt debug exited with 0" 20
echo "OK"
