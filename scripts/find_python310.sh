#!/bin/sh
# Print the path of a Python 3.10 interpreter that really runs, for `make test-py310`;
# exit 1 with a message saying where it looked when there is none.
#
# Looked at, in order: $PYTHON310 (when set, it must work: nothing else is tried),
# python3.10 on PATH, pyenv's 3.10.x versions (newest first), /usr/bin and /usr/local/bin.
# Each candidate must run and report 3.10: a pyenv shim for a version that is installed but
# not selected exits 127, and does not count.
set -u

works() {
    "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' >/dev/null 2>&1
}

found() {
    "$1" -c 'import sys; print(sys.executable)'
    exit 0
}

if [ -n "${PYTHON310:-}" ]; then
    works "$PYTHON310" && found "$PYTHON310"
    echo "error: PYTHON310=$PYTHON310 is not a working Python 3.10 interpreter" >&2
    exit 1
fi

tried="python3.10 on PATH"
if command -v python3.10 >/dev/null 2>&1 && works python3.10; then
    found python3.10
fi

pyenv_root=$(pyenv root 2>/dev/null) || pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
tried="$tried, $pyenv_root/versions/3.10.*/bin/python"
for candidate in $(ls -d "$pyenv_root"/versions/3.10.* 2>/dev/null | sort -r -V); do
    works "$candidate/bin/python" && found "$candidate/bin/python"
done

for candidate in /usr/bin/python3.10 /usr/local/bin/python3.10; do
    tried="$tried, $candidate"
    works "$candidate" && found "$candidate"
done

echo "error: no Python 3.10 interpreter found (looked at: $tried)." >&2
echo "fi-compat claims Python 3.10 support and make test-py310 proves it: install one" >&2
echo "(pyenv install 3.10, or your distribution's python3.10), or set PYTHON310=/path." >&2
exit 1
