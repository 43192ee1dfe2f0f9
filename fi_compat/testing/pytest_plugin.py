"""pytest plugin: the ``fake_flashinfer`` fixture and the FlashInfer release matrix.

Registered through the ``pytest11`` entry point ``fi_compat =
fi_compat.testing.pytest_plugin``. The ``fake_flashinfer`` fixture returns a factory::

    def test_old_release(fake_flashinfer):
        fi = fake_flashinfer("0.6.5")
        import flashinfer.comm
        ...

Each fake made by the factory is removed at the end of the test (the newest one first).

The ``flashinfer`` marker runs a test once per matching recorded release, under its fake,
and the ``flashinfer_release`` fixture says which (from 0.3.0)::

    @pytest.mark.flashinfer(">=0.6.0,<0.7", cuda_runtime=True)
    def test_fusion(flashinfer_release):  # test_fusion[flashinfer-0.6.5], ...
        import flashinfer.comm
        ...

``--flashinfer-releases=SELECTION`` (or the ``flashinfer_releases`` ini setting) narrows
every marked test at once: ``all`` (the default), ``newest``, ``oldest-per-minor``, a
specifier, or ``installed`` (the real FlashInfer). The testing guide,
``docs/guide/testing.md``, says how the marker and the selection combine.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from fi_compat._deprecation import renamed_keyword
from fi_compat.testing._matrix import CELL, FIXTURE, FlashInferRelease

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fi_compat.testing._objects import FakeFlashInfer

__all__ = ["FakeFlashInferFactory", "fake_flashinfer", "flashinfer_release"]

# The marker, the option and the report hooks: pluggy finds hooks through dir(), which this
# module's __dir__ keeps to __all__.
pytest_plugins = ["fi_compat.testing._plugin_matrix"]


def __dir__() -> list[str]:
    return list(__all__)


class FakeFlashInferFactory(Protocol):
    """The fixture's type: same parameters as :func:`fi_compat.testing.fake_flashinfer`.

    .. versionadded:: 0.2.0
    """

    def __call__(self, release: str, **options: Any) -> FakeFlashInfer: ...


@pytest.fixture
def fake_flashinfer() -> Iterator[FakeFlashInferFactory]:
    """Factory installing a fake ``flashinfer`` of a recorded release until the test ends.

    .. versionadded:: 0.2.0
    """
    # The fake (and the records) load here, not when pytest loads this plugin in every session.
    from fi_compat.testing._fake import fake_flashinfer as _fake_flashinfer

    with contextlib.ExitStack() as stack:

        @renamed_keyword("version", "release", until="0.4.0")
        def make(release: str, **options: Any) -> FakeFlashInfer:
            return stack.enter_context(_fake_flashinfer(release, **options))

        yield make


@pytest.fixture
def flashinfer_release(request: pytest.FixtureRequest) -> FlashInferRelease:
    """The release a test marked ``@pytest.mark.flashinfer(...)`` runs on, its fake installed.

    The marker parametrizes the test over its releases (ids ``flashinfer-<release>``); the
    fake is installed, with the marker's keywords as options of
    :func:`fi_compat.testing.fake_flashinfer`, before the test and removed after it. Under
    ``--flashinfer-releases=installed`` the real FlashInfer runs instead (``.fake`` is None;
    the test is skipped where FlashInfer is not installed or is a release the marker does
    not allow).

    .. versionadded:: 0.3.0
    """
    cell = request.getfixturevalue(CELL)  # the autouse fixture the marker parametrizes
    if not isinstance(cell, FlashInferRelease):
        pytest.fail(f"the {FIXTURE} fixture needs @pytest.mark.flashinfer(...)", pytrace=False)
    return cell
