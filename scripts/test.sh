#!/usr/bin/env bash
# The whole test suite, as CI runs it, in two passes that fit a two-core machine:
#
#   1. everything that can share the machine, on two pytest-xdist workers; the real vLLM
#      tests run one after another on one of them (tests/conftest.py groups them: a boot
#      takes both cores);
#   2. the tests marked `exclusive`, one at a time: those that stop the Postgres server
#      every other test uses, and the one that compares its own vLLM boots' timings.
#
# Arguments go to both passes (`bash scripts/test.sh -k capacity`); a pass that selects
# nothing is not a failure. Both passes run even when the first fails, so one run shows
# every failure; the exit status is the first failing pass's.
set -uo pipefail
cd "$(dirname "$0")/.."

status=0
run_pass() {
    .venv/bin/pytest "$@"
    local rc=$?
    # 5: no test selected (a -k that leaves a pass empty)
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$status" -eq 0 ]; then
        status=$rc
    fi
}

run_pass -n 2 --dist loadgroup -m "not exclusive" "$@"
run_pass -p no:xdist -m exclusive "$@"
exit "$status"
