"""pytest plugin: the ``fake_flashinfer`` fixture.

Registered through the ``pytest11`` entry point ``fi_compat =
fi_compat.testing.pytest_plugin``. The fixture returns a factory::

    def test_old_release(fake_flashinfer):
        fi = fake_flashinfer("0.6.5")
        import flashinfer.comm
        ...

Each fake made by the factory is removed at the end of the test (the newest one first).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import pytest

from fi_compat._deprecation import renamed_keyword
from fi_compat.testing._fake import FakeFlashInfer
from fi_compat.testing._fake import fake_flashinfer as _fake_flashinfer

__all__ = ["FakeFlashInferFactory", "fake_flashinfer"]


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
    with contextlib.ExitStack() as stack:

        @renamed_keyword("version", "release", until="0.4.0")
        def make(release: str, **options: Any) -> FakeFlashInfer:
            return stack.enter_context(_fake_flashinfer(release, **options))

        yield make
