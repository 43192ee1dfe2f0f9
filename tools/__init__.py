"""Maintainer tooling for fi-compat: recording real FlashInfer releases, comparing readers.

Nothing here ships in the wheel. Engines need only the recorded data
(``fi_compat/_records/*.json.gz``) and its loader; the code that writes that data
lives here and is run by ``make record``, ``make record-all`` and ``make compare-griffe``
from the repository root. It reads FlashInfer's names from :mod:`fi_compat._surface`,
like the rest of fi-compat, and no ``fi_compat`` module may import it (a test checks).
"""
