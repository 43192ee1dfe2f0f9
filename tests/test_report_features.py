"""Every ``feature`` a typed refusal carries is a name ``fi-compat report --require`` accepts.

Each refusal that depends on the installed release is made to happen under the fake, on a
release that lacks the thing: its ``feature`` is in ``REQUIREMENT_NAMES`` and
``missing()`` names it there; on a release that has the thing the same name is met. A
static test reads every ``feature=`` the package passes, so a new refusal without a name
fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat
import fi_compat.comm as comm
from fi_compat._requirements.comm import FACTORY_OPTIONS, PATTERN_MEMBERS, factory_support
from fi_compat.attention import AttentionPlanner
from fi_compat.capabilities import get_capabilities
from fi_compat.errors import CapabilityMissingError
from fi_compat.report import REQUIREMENT_NAMES, REQUIREMENTS, build_report, missing
from fi_compat.testing import FakeFlashInfer, fake_flashinfer, load_release
from tests.support.spellings import docstrings

TOKENS, HIDDEN, DTYPE = 4, 64, torch.bfloat16
LEGACY = "0.5.3"  # the legacy API only, six patterns
OLD_UNIFIED = "0.6.5"  # the unified API, six patterns, a factory without group=
NEWEST = "0.7.4"  # every pattern and option of the drop-in (0.7.4 brought the MXFP8 ones)
NO_FAST_PLAN = "0.3.1"  # before flashinfer.decode.fast_decode_plan (0.4.0)
PATTERN = comm.AllReduceFusionPattern
FACTORY = "dropin:create_allreduce_fusion_workspace"


def workspace(**options: Any) -> comm.FusionWorkspace:
    return comm.create_allreduce_fusion_workspace(
        world_size=2, rank=0, max_token_num=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE, **options
    )


def rmsnorm_tensors() -> dict[str, Any]:
    return {
        "residual_in": torch.zeros(TOKENS, HIDDEN, dtype=DTYPE),
        "rms_gamma": torch.ones(HIDDEN, dtype=DTYPE),
    }


def fuse(target: Any, pattern: int, **kwargs: Any) -> Any:
    return comm.allreduce_fusion(
        torch.zeros(TOKENS, HIDDEN, dtype=DTYPE), target, pattern, **kwargs
    )


def refused_by(call: Callable[[], Any]) -> CapabilityMissingError:
    """The typed refusal of ``call``, whose feature must be a name that is missing now."""
    with pytest.raises(CapabilityMissingError) as info:
        call()
    feature = info.value.feature
    assert feature in REQUIREMENT_NAMES, feature
    lacking = missing(get_capabilities(), [feature])
    assert lacking, feature
    assert build_report(get_capabilities())["requirements"][feature]["status"] == "missing"
    return info.value


def met(name: str) -> None:
    assert missing(get_capabilities(), [name]) == [], name


# ------------------------------------------------------------------------------ patterns


@pytest.mark.parametrize("release", [LEGACY, OLD_UNIFIED, "0.6.11", "0.7.2.post1", NEWEST])
def test_a_pattern_runs_exactly_where_its_name_is_met(release: str) -> None:
    record = load_release(release)
    enum = record.comm_enums["AllReduceFusionPattern"]
    assert enum is not None
    members = set(enum.members)
    seen = set()
    with fake_flashinfer(release) as fake:
        target = workspace()
        assert target.api == ("unified" if record.unified_api else "legacy")
        for member in PATTERN_MEMBERS:
            name = f"AllReduceFusionPattern.{member}"
            code = getattr(PATTERN, member)
            if member in members:
                met(name)
                fake.clear_calls()
                fuse(target, code, **rmsnorm_tensors())
                seen.add("ran")
            else:
                fake.clear_calls()
                error = refused_by(functools.partial(fuse, target, code, **rmsnorm_tensors()))
                assert error.feature == name
                assert error.introduced_in is not None
                assert error.introduced_in in str(error)
                assert not fake.calls_to("allreduce_fusion")
                assert not fake.calls_to("trtllm_allreduce_fusion")
                seen.add("refused")
        target.destroy()
    assert seen == ({"ran"} if release == NEWEST else {"ran", "refused"})


def test_without_comm_every_pattern_is_missing_with_the_reason() -> None:
    with fake_flashinfer(NEWEST, comm_import_error=OSError("no libcudart")):
        lacking = missing(
            get_capabilities(), [f"AllReduceFusionPattern.{m}" for m in PATTERN_MEMBERS]
        )
    assert len(lacking) == len(PATTERN_MEMBERS)
    assert all("libcudart" in line for line in lacking)


def test_an_unrecorded_release_answers_unknown_for_patterns() -> None:
    with fake_flashinfer(NEWEST) as fake:
        setattr(fake.flashinfer, "__version__", "0.0.0+unknown")  # noqa: B010 - a module
        (line,) = missing(get_capabilities(refresh=True), ["AllReduceFusionPattern.kAllReduce"])
    assert "unknown" in line
    assert "not a recorded release" in line


def test_the_reference_path_refuses_with_names_of_its_own() -> None:
    """The unfused path runs kAllReduce and kARResidualRMSNorm only, on every release: its
    refusals carry ``reference:AllReduceFusionPattern.<member>``, missing everywhere."""
    with fake_flashinfer(NEWEST):
        target = comm.create_workspace(1, 0, TOKENS, HIDDEN, DTYPE, api="reference")
        quant = PATTERN.kARResidualRMSNormFP8Quant
        error = refused_by(lambda: fuse(target, quant, **rmsnorm_tensors()))
        assert error.feature == "reference:AllReduceFusionPattern.kARResidualRMSNormFP8Quant"
        met("AllReduceFusionPattern.kARResidualRMSNormFP8Quant")  # a fused workspace runs it
        scale = torch.zeros(TOKENS, HIDDEN, dtype=DTYPE)
        error = refused_by(lambda: fuse(target, PATTERN.kAllReduce, quant_out=scale))
        assert error.feature == "reference:AllReduceFusionPattern.kAllReduce"
        error = refused_by(
            lambda: fuse(
                target, PATTERN.kARResidualRMSNorm, rms_gamma=torch.ones(HIDDEN, dtype=DTYPE)
            )
        )
        assert error.feature == "reference:AllReduceFusionPattern.kARResidualRMSNorm"
        fuse(target, PATTERN.kAllReduce)  # what it computes runs
        answers = build_report(get_capabilities())["requirements"]
    for member in PATTERN_MEMBERS:
        answer = answers[f"reference:AllReduceFusionPattern.{member}"]
        assert answer["status"] == "missing"
        assert "on every release" in answer["reason"]


# ----------------------------------------------------------------------- factory options

#: A valid non-default value of each option of the drop-in factory (``group`` and
#: ``comm_backend`` need a process group: they are tested where their gates are).
OPTIONS: dict[str, Any] = {
    "gpus_per_node": 8,
    "force_oneshot_support": True,
    "top_k": 8,
    "rms_eps": 1e-5,
    "weight_bias": 1.0,
    "routed_scaling_factor": 1.0,
    "include_shared_expert": True,
    "add_residual": True,
    "write_residual_output": True,
    "apply_rms_norm": True,
    "output_dtype": torch.bfloat16,
    "dynamic_fp8": True,
    "write_norm_output": True,
}


def test_every_option_of_the_drop_in_factory_has_a_name() -> None:
    from fi_compat.comm._dropin import create_allreduce_fusion_workspace

    parameters = inspect.signature(create_allreduce_fusion_workspace).parameters
    spec = {"backend", "world_size", "rank", "max_token_num", "hidden_dim", "dtype"}
    assert set(FACTORY_OPTIONS) == set(parameters) - spec
    assert {f"{FACTORY}.{option}" for option in FACTORY_OPTIONS} <= set(REQUIREMENT_NAMES)
    assert set(OPTIONS) | {"group", "comm_backend", "config"} == set(FACTORY_OPTIONS)


def _listed_backends() -> tuple[object, ...]:
    """The backends the installed factory's ``Literal`` lists (a release before
    ``mnnvl-cutedsl`` refuses that backend before looking at the options)."""
    from fi_compat._literal import literal_choices
    from fi_compat._probe import locate
    from fi_compat._surface import UNIFIED_FACTORY

    return literal_choices(locate(UNIFIED_FACTORY), "backend") or ()


@pytest.mark.parametrize("release", [LEGACY, OLD_UNIFIED, NEWEST])
def test_an_option_is_taken_exactly_where_its_name_is_met(release: str) -> None:
    seen = set()
    with fake_flashinfer(release):
        caps = get_capabilities()
        answers = factory_support(caps)
        for option, value in OPTIONS.items():
            name = f"{FACTORY}.{option}"
            given = {option: value}
            if (
                option not in ("gpus_per_node", "force_oneshot_support")
                and caps.comm.unified_api
                and "mnnvl-cutedsl" in _listed_backends()
            ):
                given["backend"] = "mnnvl-cutedsl"  # FlashInfer's only backend that takes them
            if answers[name].supported:
                met(name)
                workspace(**given).destroy()
                seen.add("taken")
            else:
                error = refused_by(functools.partial(workspace, **given))
                assert error.feature == name
                assert error.introduced_in == "0.7.2.post1"  # the first recorded with it
                assert "0.7.2.post1" in str(error)
                seen.add("refused")
    assert seen == ({"taken"} if release == NEWEST else {"taken", "refused"})


def test_the_legacy_api_records_what_only_mnnvl_reads() -> None:
    with fake_flashinfer(LEGACY):
        for option in ("gpus_per_node", "force_oneshot_support", "comm_backend"):
            met(f"{FACTORY}.{option}")
        (line,) = missing(get_capabilities(), [f"{FACTORY}.top_k"])
        assert "legacy API has no counterpart" in line


def test_group_keeps_its_gate_name_and_has_a_factory_name() -> None:
    """Every recorded release honours a group (as group=, or a comm_backend over it); a
    build with neither refuses it, with GroupNotSupportedError whose feature is the gate."""
    with fake_flashinfer(OLD_UNIFIED):
        caps = get_capabilities()
        assert missing(caps, ["group"])  # the gate: no group= before 0.6.10.post1
        met(f"{FACTORY}.group")  # carried by comm_backend over the group
        met(f"{FACTORY}.comm_backend")
        bare = dataclasses.replace(
            caps, comm=dataclasses.replace(caps.comm, torch_dist_backend=None)
        )
        answer = factory_support(bare)[f"{FACTORY}.group"]
    assert not answer.supported
    assert "GroupNotSupportedError" in answer.reason
    with fake_flashinfer(LEGACY):
        met(f"{FACTORY}.group")
    assert {"group", "comm_backend"} <= set(REQUIREMENTS)


# -------------------------------------------------------------- the fused calls' signature


@pytest.fixture
def narrowed(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[FakeFlashInfer, str, str], None]]:
    """Replace a fused call of the fake by one without ``keyword`` (a source build with
    another signature), and probe again."""

    def narrow(fake: FakeFlashInfer, name: str, keyword: str) -> None:
        import flashinfer.comm

        original = getattr(flashinfer.comm, name)
        parameters = [
            parameter
            for parameter in inspect.signature(original).parameters.values()
            if parameter.name != keyword
        ]

        def narrower(*args: Any, **kwargs: Any) -> Any:
            return original(*args, **kwargs)

        narrower.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        monkeypatch.setattr(flashinfer.comm, name, narrower)
        get_capabilities(refresh=True)

    yield narrow
    get_capabilities(refresh=True)


@pytest.mark.parametrize(
    ("release", "call", "flag"),
    [
        (NEWEST, "allreduce_fusion", "unified_api"),
        (LEGACY, "trtllm_allreduce_fusion", "legacy_api"),
    ],
)
def test_a_fused_call_without_our_keywords_refuses_its_api(
    release: str, call: str, flag: str, narrowed: Callable[[FakeFlashInfer, str, str], None]
) -> None:
    with fake_flashinfer(release) as fake:
        met(flag)
        narrowed(fake, call, "fp32_acc")
        error = refused_by(workspace)
        assert error.feature == flag
        (line,) = missing(get_capabilities(), [flag])
        assert "fp32_acc" in line
        assert "another signature" in line


# ------------------------------------------------------------------------ fast_decode_plan


def decode_wrapper() -> Any:
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper

    buffer = torch.empty(1024, dtype=torch.uint8)
    return BatchDecodeWithPagedKVCacheWrapper(buffer, "NHD", use_tensor_cores=True)


def test_a_fast_decode_planner_needs_fast_decode_plan() -> None:
    with fake_flashinfer(NO_FAST_PLAN):
        error = refused_by(
            lambda: AttentionPlanner.single(decode=decode_wrapper(), fast_decode=True)
        )
        assert error.feature == "fast_decode_plan"
        assert "0.4.0" in missing(get_capabilities(), ["fast_decode_plan"])[0]
    with fake_flashinfer("0.4.0"):
        met("fast_decode_plan")
        AttentionPlanner.single(decode=decode_wrapper(), fast_decode=True)


def test_fast_decode_plan_of_an_unrecorded_build_is_unknown() -> None:
    with fake_flashinfer(NEWEST) as fake:
        setattr(fake.flashinfer, "__version__", "0.0.0+unknown")  # noqa: B010 - a module
        (line,) = missing(get_capabilities(refresh=True), ["fast_decode_plan"])
    assert "unknown" in line


# ----------------------------------------------------------------------- torch.distributed


def test_torch_distributed_is_named_and_says_it_must_be_initialized() -> None:
    """A state of the process, not of the release: the name is met where torch has
    torch.distributed, and its reason says a reference workspace of several processes also
    needs it initialized, which is what this refusal reports."""
    import torch.distributed as dist

    assert not dist.is_initialized()
    with fake_flashinfer(NEWEST):
        with pytest.raises(CapabilityMissingError) as info:
            comm.create_workspace(2, 0, TOKENS, HIDDEN, DTYPE, api="reference")
        assert info.value.feature == "torch.distributed"
        assert info.value.feature in REQUIREMENT_NAMES
        answer = build_report(get_capabilities())["requirements"]["torch.distributed"]
    assert answer["status"] == ("met" if dist.is_available() else "missing")
    met("torch.distributed")
    assert "initialized" in str(info.value)


# ---------------------------------------------------------------- every feature is named

#: Every ``feature`` expression in fi_compat, by module, with the family of names it
#: belongs to. ``capability_missing``'s first argument and ``installed``'s third are
#: features too; ``feature`` alone is a parameter handed on by the callers collected here.
#: Each is a builder or a constant of ``fi_compat._requirements.names``, where every
#: ``--require`` name is spelled (``test_every_name_is_spelled_in_one_module``).
KNOWN: dict[tuple[str, str], str] = {
    ("attention/_planner.py", "FAST_PLAN"): "fast_decode_plan",
    ("attention/_vouch.py", "gate_feature(keyword)"): "gate",
    ("attention/_vouch.py", "deterministic_feature(family, backend)"): "deterministic",
    (
        "attention/_wrapper.py",
        "deterministic_feature(_reach.FAST_DECODE_PLAN, settled.backend)",
    ): "deterministic",
    ("comm/_sizes.py", "fit.feature"): "per_call_sizes",
    ("comm/_factory.py", "feature"): "handed on",
    ("comm/_factory.py", "dropin_feature(name)"): "dropin",
    ("comm/_factory.py", "factory_feature(name)"): "factory",
    ("comm/_factory.py", "pattern_feature(name)"): "pattern",
    ("comm/_factory.py", "gate_feature('group')"): "gate",
    ("comm/_factory.py", "api_feature(symbol)"): "flag",
    ("comm/_interface.py", "checkpoint_feature(kind)"): "checkpointing",
    ("comm/_legacy.py", "UNIFIED_API"): "flag",
    ("comm/_legacy.py", "LEGACY_API"): "flag",
    ("comm/_unified.py", "UNIFIED_API"): "flag",
    ("comm/_unified.py", "LEGACY_API"): "flag",
    ("comm/_unified.py", "gate_feature('comm_backend')"): "gate",
    ("comm/_workspace.py", "feature"): "flag",  # UNIFIED_API or LEGACY_API
    ("comm/_reference.py", "TORCH_DISTRIBUTED"): "torch.distributed",
    ("comm/_reference.py", "reference_feature(str(name))"): "reference",
    ("comm/_reference.py", "reference_feature(PATTERN_NAMES[_RMSNORM])"): "reference",
    ("errors.py", "deterministic_feature(family, backend)"): "deterministic",
}
#: Each family's names, all of which ``--require`` must accept.
FAMILIES: dict[str, Callable[[], set[str]]] = {
    "gate": lambda: set(REQUIREMENTS),
    "flag": lambda: {"unified_api", "legacy_api"},
    "handed on": set,
    "dropin": lambda: {n for n in REQUIREMENT_NAMES if n.startswith("dropin:allreduce_fusion.")},
    "factory": lambda: {f"{FACTORY}.{option}" for option in FACTORY_OPTIONS},
    "pattern": lambda: {f"AllReduceFusionPattern.{m}" for m in PATTERN_MEMBERS},
    "reference": lambda: {f"reference:AllReduceFusionPattern.{m}" for m in PATTERN_MEMBERS},
    "per_call_sizes": lambda: {n for n in REQUIREMENT_NAMES if n.startswith("per_call_sizes:")},
    "checkpointing": lambda: {n for n in REQUIREMENT_NAMES if n.startswith("checkpointing:")},
    "deterministic": lambda: {n for n in REQUIREMENT_NAMES if n.startswith("deterministic:")},
    "fast_decode_plan": lambda: {"fast_decode_plan"},
    "torch.distributed": lambda: {"torch.distributed"},
}


def feature_expressions() -> set[tuple[str, str]]:
    """``(module, expression)`` of every feature fi_compat passes to a typed refusal."""
    root = Path(fi_compat.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "feature":
                    found.add((module, ast.unparse(keyword.value)))
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "capability_missing" and node.args:
                found.add((module, ast.unparse(node.args[0])))
            if name == "installed" and len(node.args) >= 3:
                found.add((module, ast.unparse(node.args[2])))
    return found


def test_every_feature_the_package_passes_is_a_named_family() -> None:
    found = feature_expressions()
    unnamed = found - set(KNOWN)
    assert not unnamed, f"a refusal whose feature --require may not know: {sorted(unnamed)}"
    for family in {KNOWN[key] for key in found}:
        names = FAMILIES[family]()
        assert names <= set(REQUIREMENT_NAMES), (family, sorted(names - set(REQUIREMENT_NAMES)))
    assert {
        "dropin:allreduce_fusion.weight_bias",
        "dropin:create_allreduce_fusion_workspace.top_k",
        "AllReduceFusionPattern.kAllReduce",
        "reference:AllReduceFusionPattern.kAllReduce",
        "fast_decode_plan",
        "torch.distributed",
    } <= set(REQUIREMENT_NAMES)


def test_the_families_list_the_api_features_used() -> None:
    """The literal features passed to ``installed`` and ``capability_missing`` are names."""
    literals = {expr.strip("'") for _, expr in feature_expressions() if expr.startswith("'")}
    assert literals <= set(REQUIREMENT_NAMES), sorted(literals - set(REQUIREMENT_NAMES))


#: How the families' names begin, as ``fi_compat._requirements.names`` spells them.
PREFIXES = re.compile(r"(?<![\w-])(dropin|per_call_sizes|checkpointing|deterministic|reference):")


def spelled_prefixes(path: Path) -> list[str]:
    """Every string in ``path``'s code (docstrings aside) that spells a family's prefix."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = docstrings(tree)  # a module's, class's or function's, and an attribute's
    return [
        f"{path.name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and PREFIXES.search(node.value)
    ]


def test_every_name_is_spelled_in_one_module() -> None:
    """The ``--require`` language is built in ``_requirements/names.py``: no other module of
    fi_compat spells a family's prefix in its code, and the builders are what the table and
    the refusals use (``KNOWN`` above)."""
    root = Path(fi_compat.__file__).parent
    names = root / "_requirements" / "names.py"
    found = [
        hit
        for path in sorted(root.rglob("*.py"))
        if path != names
        for hit in spelled_prefixes(path)
    ]
    assert not found, found
    assert spelled_prefixes(names), "the check no longer sees the prefixes where they are"


def test_the_spelling_check_sees_a_prefix_spelled_elsewhere(tmp_path: Path) -> None:
    module = tmp_path / "elsewhere.py"
    module.write_text(
        '"""A docstring may say dropin:allreduce_fusion.<name>."""\n'
        'def f(kind):\n    return f"checkpointing:{kind}"\n'
        'X = "per_call_sizes:trtllm"\n'
        'Y = "a reason naming no name: preference: none"\n',
        encoding="utf-8",
    )
    assert sorted(hit.split(": ", 1)[1] for hit in spelled_prefixes(module)) == [
        "'checkpointing:'",
        "'per_call_sizes:trtllm'",
    ]
