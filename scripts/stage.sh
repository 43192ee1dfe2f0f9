#!/bin/sh
# One stage of `make test`, timed: `sh scripts/stage.sh NAME COMMAND [ARG...]` runs COMMAND,
# prints how long it took and appends "NAME SECONDS STATUS" to $STAGES (default .stages);
# `sh scripts/stage.sh --summary` prints the table of every stage so far and removes the file.
# A failing stage prints the table too, then exits with the command's status.
STAGES=${STAGES:-.stages}

summary() {
    test -f "$STAGES" || return 0
    echo
    echo "stage        wall (s)  status"
    awk '{ printf "%-12s %8.1f  %s\n", $1, $2, ($3 == 0 ? "ok" : "failed (" $3 ")"); total += $2 }
         END { printf "%-12s %8.1f\n", "total", total }' "$STAGES"
    rm -f "$STAGES"
}

if [ "$1" = "--summary" ]; then
    summary
    exit 0
fi

name=$1
shift
echo "== stage $name: $*"
start=$(date +%s.%N)
"$@"
status=$?
end=$(date +%s.%N)
seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "$name $seconds $status" >>"$STAGES"
echo "== stage $name: $seconds s"
if [ "$status" -ne 0 ]; then
    summary
fi
exit "$status"
