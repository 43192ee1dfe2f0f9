"""The parses the fake's generator keeps (``fi_compat/testing/_generator.py``: decorators,
enum members and defaults, each parsed once per text) answer as parsing does, kept or not."""

from __future__ import annotations

from fi_compat.testing import _generator


def test_the_generator_s_kept_parses_answer_as_parsing_does() -> None:
    for _ in range(2):  # parsed, then answered from what was kept
        _check_parses()


def _check_parses() -> None:
    assert _generator._deprecation_message(("staticmethod", 'deprecated("gone")')) == "gone"
    assert _generator._deprecation_message(("typing_extensions.deprecated(3)",)) == "deprecated"
    assert _generator._deprecation_message(("deprecated(x)", "(")) == "deprecated"
    assert _generator._deprecation_message(("functools.cache", "(")) is None
    assert _generator._member_value("1 << 4") == 16
    assert _generator._member_value("-(2)") == -2
    assert _generator._member_value("'a'") == "'a'"
    assert _generator._member_value("(") == "("
    assert _generator._member_value([1]) == [1]
    assert _generator._attribute_default("Mode.FAST") == ("Mode", "FAST")
    assert _generator._attribute_default("a.b.c") is None
    assert _generator._attribute_default("(") is None
