"""Maintainer tooling for fi-compat: recording real FlashInfer releases, comparing readers.

Nothing here ships in the wheel. Engines need only the recorded data
(``fi_compat/_records/surface.zip``), its loader and the builder that writes it
(``fi_compat/_recorder``, which also models a release fi-compat has no data for on a user's
machine); the tools here run the builder and the probes over many releases, from the
repository root (``make add-release``, ``make record``, ``make record-all``,
``make compare-griffe``). It reads FlashInfer's names from :mod:`fi_compat._surface`,
like the rest of fi-compat, and no ``fi_compat`` module may import it (a test checks).
"""
