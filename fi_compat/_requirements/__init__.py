"""The ``--require`` language: every name, and what each answers on the installed release.

:mod:`~fi_compat._requirements.names` spells every name (errors carry them as
``feature``); :mod:`~fi_compat._requirements.comm` and
:mod:`~fi_compat._requirements.attention` answer them from the probe and the measurements;
:mod:`~fi_compat._requirements.table` lists them all for :mod:`fi_compat.report`. comm and
attention call the names only, never the answers, so importing this package imports
nothing.
"""
