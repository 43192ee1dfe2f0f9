#!/bin/sh
# `make test` as CI runs it, on a busy machine with nothing cached: `sh scripts/under_load.sh`
# clones the committed HEAD into a fresh directory, empties every cache a run could reuse
# (HOME, pip's cache, fi-compat's release and model caches), starts HOGS busy processes at
# nice 0 (default: one per core) and runs `.ci/run` there; the hogs stop when it ends.
# HOGS=0 gives the idle cold run, HOGS=0 WARM=1 the idle warm one (the caches of this
# machine's user kept). The run's output goes to $LOG (default build/under-load.log), then
# the stage table and the coverage total are printed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
hogs=${HOGS:-$(getconf _NPROCESSORS_ONLN)}
log=${LOG:-$root/build/under-load.log}
mkdir -p "$(dirname "$log")"
work=$(mktemp -d)
git clone --quiet "$root" "$work/clone" || exit 2
mkdir -p "$work/home"

pids=""
i=0
while [ "$i" -lt "$hogs" ]; do
    nice -n 0 sh -c 'while :; do :; done' &
    pids="$pids $!"
    i=$((i + 1))
done
trap 'kill $pids 2>/dev/null' EXIT INT TERM

echo "$hogs busy processes beside .ci/run in $work/clone, warm caches: ${WARM:-0} (log: $log)"
if [ "${WARM:-0}" = 1 ]; then
    (cd "$work/clone" && .ci/run) >"$log" 2>&1
else
    (
        cd "$work/clone" &&
            env HOME="$work/home" XDG_CACHE_HOME="$work/home/.cache" \
                PIP_CACHE_DIR="$work/home/.cache/pip" \
                FI_COMPAT_RELEASE_CACHE="$work/home/.cache/fi-compat-releases" \
                .ci/run
    ) >"$log" 2>&1
fi
status=$?
uptime
sed -n '/^stage  /,$p' "$log"
grep '^TOTAL' "$log"
echo "exit status $status"
exit "$status"
