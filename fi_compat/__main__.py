"""``python -m fi_compat``: the same as the ``fi-compat`` command."""

from fi_compat.cli import console

console()
