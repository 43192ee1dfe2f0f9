"""Every use of FlashInfer in an engine's source, read statically (nothing imported or run).

The reading knows nothing of FlashInfer's releases: what a use meets on a release is for the
upgrade preview's judge (:mod:`fi_compat.upgrade._judge`) to say. Its entry point is
:func:`read_trees` (:mod:`.walk`: the files of one or more trees, named by module and read
in rounds); :mod:`.read` reads one file into its uses (:class:`Use`, or a
:class:`Diagnostic` where it cannot), :mod:`.binding` keeps what each name holds from
FlashInfer as the reading goes, and :mod:`.fallbacks` reads where the code falls back when
FlashInfer, or a part of it, is missing. The upgrade guide (``docs/guide/upgrade.md``,
"What the reading follows, and what it does not") gives its reach.
"""

from __future__ import annotations

from fi_compat._engine_source.binding import under
from fi_compat._engine_source.fallbacks import catches
from fi_compat._engine_source.read import Diagnostic, Use, UseKind, read_module
from fi_compat._engine_source.walk import MAX_BYTES, Trees, read_trees

__all__ = [
    "MAX_BYTES",
    "Diagnostic",
    "Trees",
    "Use",
    "UseKind",
    "catches",
    "read_module",
    "read_trees",
    "under",
]
