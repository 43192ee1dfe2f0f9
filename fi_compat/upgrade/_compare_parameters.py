"""The comparison of two releases' parameters: keywords, positions, defaults and renames."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from fi_compat._records._facts import Facts, Key
from fi_compat.upgrade._change import Change, Comparing
from fi_compat.upgrade._kinds import Category

__all__ = ["ParameterChanges"]

_VAR = ("VAR_POSITIONAL", "VAR_KEYWORD")


def _moved(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The positional parameters on both sides that sit at another position in ``after``."""
    return [name for name in before if name in after and before.index(name) != after.index(name)]


class ParameterChanges(Comparing):
    """The changes of a callable's parameters, and what a call of it asks about them."""

    def keyword(self, path: str, keyword: str) -> Change | None:
        """Whether the callable at ``path`` accepts ``keyword`` on each release (``old``/``new``
        are its :meth:`~fi_compat._records._facts.Facts.acceptance`: ``"supported"``,
        ``"unsupported"`` or ``"unknown"``, that is declared, refused, or taken by a
        ``**kwargs`` whose use the records cannot prove); None where both accept it, or
        neither record can tell. A keyword neither accepts is a change whose ``release`` is
        None."""

        def value(facts: Facts) -> Hashable:
            return facts.acceptance(path, keyword)

        before, after = value(self.old), value(self.new)
        if before == after != "unsupported" or (before, after) == ("unknown", "supported"):
            return None  # taken on both (or unknown on both: nothing to say)
        key: Key = ("params", path)
        if after == "unsupported":
            detail = (
                f"takes {keyword}= on neither release"
                if before == "unsupported"
                else f"no longer takes {keyword}: calls passing it raise TypeError"
            )
            return self.change(
                "keyword-missing", Category.BREAKS, path, detail, key, value, keyword
            )
        if after == "supported":
            return self.change(
                "keyword-added",
                Category.AVAILABLE,
                path,
                f"takes {keyword}= (raises TypeError on {self.old.release})",
                key,
                value,
                keyword,
            )
        return self.change(
            "keyword-unverified",
            Category.BEHAVIOUR,
            path,
            f"no longer declares {keyword}; **kwargs takes it without a known use",
            key,
            value,
            keyword,
        )

    def positional(self, path: str) -> Change | None:
        """The positional parameters of the callable at ``path`` on each release (``old``,
        ``new``), where they differ; None where they do not."""
        before, after = self.old.positional(path), self.new.positional(path)
        if before is None or after is None or before == after:
            return None
        moved = _moved(before, after)
        detail = (
            f"positional parameters are now ({', '.join(after)}), no longer ({', '.join(before)})"
        )
        if moved:
            detail += f": a positional call passes {moved[0]}'s value elsewhere"
        return self.change(
            "positional-shift",
            Category.BREAKS,
            path,
            detail,
            ("params", path),
            lambda facts: facts.positional(path),
        )

    def renamed_to(self, path: str, keyword: str) -> str | None:
        """The name ``keyword``'s parameter of ``path`` goes by on the new release, where it
        was only renamed in place (``parameter-renamed``); None otherwise."""
        for change in self.about(("params", path)):
            if change.kind == "parameter-renamed" and change.parameter == keyword:
                return str(change.new[0]) if change.new else None
        return None

    def lands_alike(self, path: str, count: int) -> bool:
        """Whether the first ``count`` positional arguments of a call of ``path`` land on the
        same parameters on both releases (a parameter renamed in place counts as the same:
        the value still lands where it did)."""
        before = (self.old.positional(path) or ())[:count]
        after = (self.new.positional(path) or ())[:count]
        if before == after:
            return True
        if len(before) != len(after):
            return False
        renames = {
            change.parameter: change.new[0]
            for change in self.about(("params", path))
            if change.kind == "parameter-renamed" and change.new
        }
        return all(o == n or renames.get(o) == n for o, n in zip(before, after, strict=True))

    def acceptance_change(self, path: str, keyword: str) -> Change | None:
        """The change of the callable at ``path`` that adds or removes its parameter
        ``keyword`` (what ``"keyword" in inspect.signature(f).parameters`` answers); None
        where both releases declare it or neither does."""
        for change in self.about(("params", path)):
            if change.kind == "parameter-renamed" and keyword in (change.old or ()) + (
                change.new or ()
            ):
                return change
            if change.parameter == keyword and (change.old is None) != (change.new is None):
                return change
        return None

    def _params(self, key: Key, before: Any, after: Any) -> None:
        path = key[1]
        if before is None or after is None:
            return  # the callable itself came or went: the name or method change says so
        old = {name: (kind, default) for name, kind, default in before}
        new = {name: (kind, default) for name, kind, default in after}
        renamed = self._renamed(path, before, after, old, new)
        for name in (*old, *(name for name in new if name not in old)):
            if old.get(name) != new.get(name) and name not in renamed:
                self._parameter(path, name, old.get(name), new.get(name))
        self._positional(path)
        if self.old.var_keyword(path) and not self.new.var_keyword(path):
            self.add(
                "kwargs-removed",
                Category.BREAKS,
                path,
                "no longer takes **kwargs: keywords it did not declare raise TypeError",
                key,
                lambda facts: facts.var_keyword(path),
            )

    def _renamed(
        self,
        path: str,
        before: tuple[tuple[str, str, str | None], ...],
        after: tuple[tuple[str, str, str | None], ...],
        old: dict[str, tuple[str, str | None]],
        new: dict[str, tuple[str, str | None]],
    ) -> set[str]:
        """Report each parameter that only changed its name (gone from one position, a new
        name at the same position with the same kind and default); the names involved. A
        required parameter counts only when it is the one parameter that changed: several
        required ones replaced at once are a new signature, not renames."""
        involved: set[str] = set()
        gone = [name for name in old if name not in new]
        for index, (name, kind, default) in enumerate(before):
            if name in new or index >= len(after):
                continue
            other, other_kind, other_default = after[index]
            if other in old or (other_kind, other_default) != (kind, default):
                continue
            if default is None and len(gone) > 1:
                continue
            involved.update((name, other))

            def value(facts: Facts, name: str = name, other: str = other) -> Hashable:
                # the name the parameter goes by on each release
                return tuple(n for n in (name, other) if facts.parameter(path, n) is not None)

            self.add(
                "parameter-renamed",
                Category.BREAKS,
                path,
                f"{name} is now called {other}: calls passing {name}= raise TypeError",
                ("params", path),
                value,
                name,
            )
        return involved

    def _parameter(
        self,
        path: str,
        name: str,
        before: tuple[str, str | None] | None,
        after: tuple[str, str | None] | None,
    ) -> None:
        key: Key = ("params", path)

        def value(facts: Facts) -> Hashable:
            return facts.parameter(path, name)

        if before is None:
            assert after is not None
            kind, default = after
            if default is None and kind not in _VAR:
                self.add(
                    "required-missing",
                    Category.BREAKS,
                    path,
                    f"new required parameter {name}: calls without it raise TypeError",
                    key,
                    value,
                    name,
                )
            else:
                detail = (
                    f"takes {name}= (default {default})"
                    if default is not None
                    else f"takes *{name}"
                    if kind == "VAR_POSITIONAL"
                    else f"takes **{name}"
                )
                self.add("keyword-added", Category.AVAILABLE, path, detail, key, value, name)
            return
        if after is None:
            accepted = self.keyword(path, name)  # what a call passing it meets now
            reach = "supported" if accepted is None else accepted.new
            if reach == "supported":
                target = self.new.get(("forwards", path))
                detail = (
                    f"no longer declares {name}; its **kwargs passes it on to {target}, which "
                    "takes it by keyword (passing it by position no longer works)"
                )
            elif reach == "unknown":
                detail = f"no longer declares {name}; **kwargs takes it without a known use"
            else:
                detail = f"no longer takes {name}: calls passing it raise TypeError"
            self.add(
                "keyword-missing",
                Category.BREAKS if reach == "unsupported" else Category.BEHAVIOUR,
                path,
                detail,
                key,
                value,
                name,
            )
            return
        (old_kind, old_default), (new_kind, new_default) = before, after
        if old_kind != new_kind:
            self.add(
                "parameter-kind",
                Category.BREAKS,
                path,
                f"{name} is now {new_kind.lower()}, no longer {old_kind.lower()}",
                key,
                value,
                name,
            )
            if old_default is None or old_default == new_default:
                return  # a kind change that keeps its default (or never had one) is all
        if old_default is not None and new_default is None:
            self.add(
                "required-missing",
                Category.BREAKS,
                path,
                f"{name} is now required (its default was {old_default})",
                key,
                value,
                name,
            )
        elif old_default is None and new_default is not None:
            self.add(
                "parameter-optional",
                Category.AVAILABLE,
                path,
                f"{name} is now optional (default {new_default})",
                key,
                value,
                name,
            )
        else:
            self.add(
                "default-changed",
                Category.BEHAVIOUR,
                path,
                f"{name}'s default is now {new_default}, no longer {old_default}",
                key,
                value,
                name,
            )

    def _positional(self, path: str) -> None:
        change = self.positional(path)
        if change is not None and _moved(change.old, change.new):
            self.changes.append(change)  # listed where a parameter moved
