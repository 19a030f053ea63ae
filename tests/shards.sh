#!/usr/bin/env bash
# Runs pytest over several groups of test folders at once, one process each
# (`make test`, `make test-oldest`): the suite's tests mostly wait on agents,
# tracker servers and training children, so one pytest leaves a core idle.
# Each group has its own test session (its own agent directory and temp
# folders); their outputs are printed whole, one after the other, as each
# group ends, and the exit status is the first failing group's.
#
#   tests/shards.sh PYTHON "GROUP" "GROUP" ... [-- PYTEST ARGS]
#   e.g. tests/shards.sh .venv/bin/python "tests/agent" "tests/backends tests/core" -- -q
set -u
python=$1; shift
groups=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do groups+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
logs=$(mktemp -d)
pids=()
for i in "${!groups[@]}"; do
	# shellcheck disable=SC2086  # a group is several folders
	"$python" -m pytest "$@" ${groups[$i]} > "$logs/$i.log" 2>&1 &
	pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
status=0
for i in "${!groups[@]}"; do
	wait "${pids[$i]}"
	code=$?
	echo "=== tests: ${groups[$i]} (exit $code)"
	cat "$logs/$i.log"
	if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then status=$code; fi
done
rm -rf "$logs"
exit $status
