"""The builder of a release's model: its signatures and hazards, read without importing it.

A release (a wheel, an sdist or a source tree) is read as text (:mod:`.archive`) and
parsed with :mod:`ast`; names are resolved the way ``import`` would bind them
(:mod:`.resolve`), so that a recorded "present" matches ``hasattr(flashinfer.comm,
name)``; the functions and classes named by :mod:`fi_compat._surface` are recorded from
their ``def`` and ``class`` statements (:mod:`.signatures`) and the import hazards from
what the import runs (:mod:`.hazards`); :mod:`.record` puts one release's record
together, :mod:`.surface` every module's names, and :mod:`.store` packs both for every
release into the one store of ``fi_compat/_records``. The same builder made the shipped
store and models, on a user's machine, a release fi-compat has no data for
(``python -m fi_compat._recorder``, run by :mod:`fi_compat._records._catalogue`).
"""

from __future__ import annotations

from fi_compat._recorder.archive import read_release, version_from_filename
from fi_compat._recorder.record import SCHEMA_VERSION, dump_record, record_release

__all__ = [
    "SCHEMA_VERSION",
    "dump_record",
    "read_release",
    "record_release",
    "version_from_filename",
]
