#!/bin/sh
# One stage of `make test`, timed: `sh scripts/stage.sh NAME COMMAND [ARG...]` runs COMMAND,
# prints how long it took (wall and CPU seconds: user plus system time of COMMAND and every
# process it waited for) and appends "NAME SECONDS STATUS CPU START END" to $STAGES (default
# .stages); `sh scripts/stage.sh --summary` prints the table of every stage so far and removes
# the file. Stages may run side by side (`make test` runs the Python 3.10 run beside the
# suite): the table's total is the wall time from the first stage's start to the last one's
# end, not the sum of the stages'. A failing stage prints the table too, then exits with the
# command's status.
STAGES=${STAGES:-.stages}

summary() {
    test -f "$STAGES" || return 0
    echo
    echo "stage        wall (s)   CPU (s)  status"
    awk '{ printf "%-12s %8.1f  %8.1f  %s\n", $1, $2, $4, ($3 == 0 ? "ok" : "failed (" $3 ")")
           cpu += $4
           if (NR == 1 || $5 < first) first = $5
           if (NR == 1 || $6 > last) last = $6 }
         END { printf "%-12s %8.1f  %8.1f\n", "total", last - first, cpu }' "$STAGES"
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
# CPU seconds of COMMAND and every process it waited for: the second line of `times` ("XmY.Zs
# XmY.Zs", user then system, of this shell's finished children), written to a file of the
# stage's own because `times` in a command substitution would run in a subshell, which has no
# children.
times >"$STAGES.$name.times"
used=$(awk 'NR == 2 {
    n = split($0, t, " ")
    for (i = 1; i <= n; i++) { split(t[i], ms, "m"); s += ms[1] * 60 + ms[2] }
    printf "%.1f", s }' "$STAGES.$name.times")
rm -f "$STAGES.$name.times"
echo "$name $seconds $status $used $start $end" >>"$STAGES"
echo "== stage $name: $seconds s, $used CPU s"
# A stage run beside another (STAGE_SUMMARY=end) leaves the table to the caller.
if [ "$status" -ne 0 ] && [ "${STAGE_SUMMARY:-}" != end ]; then
    summary
fi
exit "$status"
