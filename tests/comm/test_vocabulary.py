"""No frozen vocabulary between an engine and a newer release.

A backend, pattern or layout value that fi-compat has never seen but the installed release
takes goes to FlashInfer as given, and ``workspace.decisions`` says so; a value the
installed release does not take (its ``Literal`` annotation, its own enum) is refused with
a typed error before anything reaches FlashInfer. The "newer release" here is the fake of
0.7.2.post1 taught one more backend (``nvls``), pattern and layout, as a release after it
could add them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from typing import Any, Literal

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat._literal import literal_choices
from fi_compat.errors import CapabilityMissingError, InvalidArgumentError
from fi_compat.testing import FakeFlashInfer, fake_flashinfer

TOKENS, HIDDEN, MAX_TOKENS, DTYPE = 4, 64, 8, torch.bfloat16
NEW_BACKEND, NEW_PATTERN, NEW_LAYOUT, NEW_OPTION = "nvls", 77, 9, "lamport_stages"
FACTORY = "create_allreduce_fusion_workspace"


@pytest.fixture
def newer() -> Iterator[tuple[FakeFlashInfer, list[str]]]:
    """The fake of 0.7.2.post1 with one more backend, pattern code and layout code."""
    with fake_flashinfer("0.7.2.post1") as fake:
        module = fake.flashinfer.comm
        own = module.create_allreduce_fusion_workspace
        received: list[str] = []

        @functools.wraps(own)
        def factory(*args: Any, backend: str = "auto", **kwargs: Any) -> Any:
            received.append(backend)  # the new backend runs on TRT-LLM's buffers here
            if kwargs.pop(NEW_OPTION, None) is not None:
                received.append(NEW_OPTION)
            return own(*args, backend="trtllm" if backend == NEW_BACKEND else backend, **kwargs)

        signature = inspect.signature(own)
        annotation = Literal["trtllm", "mnnvl", "mnnvl-cutedsl", "auto", "nvls"]
        new_option = inspect.Parameter(NEW_OPTION, inspect.Parameter.KEYWORD_ONLY, default=None)
        factory.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[
                *(
                    p.replace(annotation=annotation) if p.name == "backend" else p
                    for p in signature.parameters.values()
                    if p.kind is not inspect.Parameter.VAR_KEYWORD
                ),
                new_option,
            ]
        )
        module.create_allreduce_fusion_workspace = factory
        module.AllReduceFusionPattern.kARResidualRMSNormNewQuant = NEW_PATTERN
        yield fake, received


def _dropin_workspace(backend: str) -> comm.FusionWorkspace:
    """The drop-in factory's workspace, as an engine asks for it."""
    return comm.create_allreduce_fusion_workspace(
        backend=backend,
        world_size=2,
        rank=0,
        max_token_num=MAX_TOKENS,
        hidden_dim=HIDDEN,
        dtype=DTYPE,
    )


def test_the_literal_is_read_from_the_release(newer: tuple[FakeFlashInfer, list[str]]) -> None:
    fake, _ = newer
    assert NEW_BACKEND in (
        literal_choices(fake.flashinfer.comm.create_allreduce_fusion_workspace, "backend") or ()
    )


def test_a_new_backend_goes_through_the_facade(newer: tuple[FakeFlashInfer, list[str]]) -> None:
    fake, received = newer
    workspace = comm.create_workspace(
        2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", backend=NEW_BACKEND
    )
    assert received == [NEW_BACKEND]
    assert any(f"backend={NEW_BACKEND!r}" in decision for decision in workspace.decisions)
    x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
    before = len(fake.calls)
    comm.allreduce_residual_rmsnorm(
        x, torch.randn_like(x), torch.ones(HIDDEN, dtype=DTYPE), workspace=workspace
    )
    assert [c.name for c in fake.calls[before:] if "allreduce_fusion" in c.name]
    workspace.destroy()


def test_a_new_backend_goes_through_the_dropin_factory(
    newer: tuple[FakeFlashInfer, list[str]],
) -> None:
    _, received = newer
    workspace = _dropin_workspace(NEW_BACKEND)
    assert received == [NEW_BACKEND]
    assert any(NEW_BACKEND in decision for decision in workspace.decisions)
    workspace.destroy()


def test_a_new_pattern_and_layout_go_through_the_dropin(
    newer: tuple[FakeFlashInfer, list[str]],
) -> None:
    fake, _ = newer
    workspace = _dropin_workspace("trtllm")
    x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
    before = len(fake.calls)
    comm.allreduce_fusion(
        input=x,
        workspace=workspace,
        pattern=NEW_PATTERN,
        residual_in=torch.randn_like(x),
        rms_gamma=torch.ones(HIDDEN, dtype=DTYPE),
        norm_out=torch.empty_like(x),
        layout_code=NEW_LAYOUT,
    )
    (call,) = [c for c in fake.calls[before:] if c.name == "allreduce_fusion"]
    assert call.arguments["pattern"] == NEW_PATTERN
    assert call.arguments["layout_code"] == NEW_LAYOUT
    said = [d for d in workspace.decisions if f"pattern {NEW_PATTERN}" in d]
    assert len(said) == 1
    comm.allreduce_fusion(
        input=x, workspace=workspace, pattern=NEW_PATTERN, output=torch.empty_like(x)
    )
    assert [d for d in workspace.decisions if f"pattern {NEW_PATTERN}" in d] == said  # once
    workspace.destroy()


@pytest.mark.parametrize("backend", ["nccl", "TRTLLM", "mnnvl-cutedsl2"])
def test_a_backend_the_release_does_not_list_is_refused(backend: str) -> None:
    with fake_flashinfer("0.7.2.post1") as fake:
        before = len(fake.calls)
        with pytest.raises(InvalidArgumentError, match=r"what flashinfer 0\.7\.2\.post1"):
            comm.create_workspace(2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", backend=backend)
        assert fake.calls[before:] == []


def test_a_backend_an_older_release_lacks_names_what_it_takes() -> None:
    with fake_flashinfer("0.6.5") as fake:
        before = len(fake.calls)
        with pytest.raises(InvalidArgumentError, match="'trtllm', 'mnnvl', 'auto'"):
            comm.create_workspace(
                2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", backend="mnnvl-cutedsl"
            )
        assert fake.calls[before:] == []


@pytest.mark.parametrize("pattern", [NEW_PATTERN, -1, 10**6])
def test_a_pattern_neither_knows_is_refused(pattern: int) -> None:
    with fake_flashinfer("0.7.2.post1") as fake:
        workspace = _dropin_workspace("trtllm")
        x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
        before = len(fake.calls)
        with pytest.raises(InvalidArgumentError, match="installed AllReduceFusionPattern"):
            comm.allreduce_fusion(
                input=x, workspace=workspace, pattern=pattern, output=torch.empty_like(x)
            )
        assert fake.calls[before:] == []
        assert not [d for d in workspace.decisions if "pattern" in d]


def test_the_unfused_path_refuses_a_pattern_it_cannot_compute(
    newer: tuple[FakeFlashInfer, list[str]],
) -> None:
    _fake, _ = newer
    workspace = comm.create_workspace(
        1, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", api="reference"
    )
    x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
    with pytest.raises(CapabilityMissingError):
        comm.allreduce_fusion(
            input=x, workspace=workspace, pattern=NEW_PATTERN, output=torch.empty_like(x)
        )


@pytest.mark.parametrize(
    ("value", "error"),
    [("x", InvalidArgumentError), ("", InvalidArgumentError), (3, InvalidArgumentError)],
)
def test_moe_finalize_backend_is_judged_by_the_release(value: Any, error: type[Exception]) -> None:
    with fake_flashinfer("0.7.2.post1") as fake:
        workspace = _dropin_workspace("trtllm")
        x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
        before = len(fake.calls)
        with pytest.raises(error, match="what the installed allreduce_fusion takes"):
            comm.allreduce_fusion(
                input=x,
                workspace=workspace,
                pattern=comm.AllReduceFusionPattern.kAllReduce,
                output=torch.empty_like(x),
                moe_finalize_backend=value,
            )
        assert fake.calls[before:] == []


def test_a_new_factory_option_goes_through(newer: tuple[FakeFlashInfer, list[str]]) -> None:
    from fi_compat import get_capabilities

    get_capabilities(refresh=True)  # probe the factory with the new option
    _, received = newer
    workspace = comm.create_workspace(
        2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", factory_options={NEW_OPTION: 3}
    )
    assert NEW_OPTION in received
    workspace.destroy()


def test_an_option_no_release_takes_is_refused() -> None:
    with fake_flashinfer("0.7.2.post1") as fake:
        before = len(fake.calls)
        with pytest.raises(InvalidArgumentError, match="no recorded release"):
            comm.create_workspace(
                2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", factory_options={"topk": 8}
            )
        assert fake.calls[before:] == []


def test_the_report_says_what_goes_through_unadapted(
    newer: tuple[FakeFlashInfer, list[str]],
) -> None:
    from fi_compat import get_capabilities
    from fi_compat.report import build_report, render_text

    caps = get_capabilities(refresh=True)
    passed = build_report(caps)["passed_through"]
    assert passed["backend"] == [NEW_BACKEND]
    assert passed["pattern"] == [f"kARResidualRMSNormNewQuant={NEW_PATTERN}"]
    assert passed["moe_finalize_backend"] == []
    text = render_text(caps)
    assert "passed to FlashInfer as given:" in text
    assert NEW_BACKEND in text.split("passed to FlashInfer as given:")[1].split("\n\n")[0]


def test_the_report_says_none_for_a_release_fi_compat_knows_whole() -> None:
    from fi_compat import get_capabilities
    from fi_compat.report import build_report, render_text

    with fake_flashinfer("0.7.2.post1"):
        caps = get_capabilities()
        assert build_report(caps)["passed_through"] == {
            "backend": [],
            "moe_finalize_backend": [],
            "pattern": [],
        }
        assert "passed to FlashInfer as given: none" in render_text(caps)


class _Hostile:
    """A callable whose signature, or whose parameter's annotation, raises."""

    def __init__(self, error: BaseException, where: str) -> None:
        self.error, self.where = error, where

    def __call__(self, backend: str = "auto") -> None:
        return None

    @property
    def __signature__(self) -> inspect.Signature:
        if self.where == "signature":
            raise self.error
        error = self.error

        class Annotation:
            def __getattribute__(self, name: str) -> Any:
                raise error

        parameter = inspect.Parameter(
            "backend", inspect.Parameter.KEYWORD_ONLY, annotation=Annotation()
        )
        return inspect.Signature([parameter])


@pytest.mark.parametrize("where", ["signature", "annotation"])
@pytest.mark.parametrize(
    "error", [ValueError("x"), SystemExit("x"), GeneratorExit(), RecursionError()], ids=repr
)
def test_a_hostile_annotation_says_nothing(error: BaseException, where: str) -> None:
    assert literal_choices(_Hostile(error, where), "backend") is None


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("Literal['a', 'b']", ("a", "b")),
        ("typing.Literal['a']", ("a",)),
        ("Optional[Literal['a']]", ("a", None)),
        ("Literal['a'] | None", ("a", None)),
        ("Union[Literal['a'], Literal['b']]", ("a", "b")),
        ("str", None),
        ("Literal[a_name]", None),
        ("Literal['a'", None),
        ("Literal[__import__('os').system('true')]", None),
    ],
)
def test_a_literal_is_read_from_its_text_without_evaluating_it(
    text: str, values: tuple[object, ...] | None
) -> None:
    def function(backend: Any = None) -> None:
        return None

    function.__annotations__["backend"] = text
    literal_choices.cache_clear()
    assert literal_choices(function, "backend") == values
