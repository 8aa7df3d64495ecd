"""What a drafting method is: its name, whether it needs a drafter checkpoint, its own options (with
defaults and validation), its traits, and how it builds its proposer; ``@register`` adds it.

Everything else — which method runs, engines — asks the registry (``METHODS``) and never names a method.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from lilicorr import options
from lilicorr.decoding.proposal import Proposer

if TYPE_CHECKING:
    from lilicorr.models.draft import DraftModel
    from lilicorr.runtime.runtime import TargetRuntime

AUTO = "auto"


def option(default: int | str, help: str, *, auto: bool = False, minimum: int = 1, why: str = ""):
    """One of a method's own options, declared once as a field of the method's options dataclass: its
    default, help (the CLI flag's), and its one bound (``minimum``; ``why``: what the bound protects)."""
    return options.option(default, help, auto=auto, minimum=minimum, why=why)


@dataclass(frozen=True)
class Option:
    """A method option as the command line and the checks see it: a positive integer (every option so far
    is a count), or ``"auto"`` where ``auto`` is set (the method then chooses the value itself, e.g. from
    the measured cost curve)."""

    key: str
    default: int | str
    help: str
    auto: bool = False
    minimum: int = 1  # 0 where zero means "off"; 2 for a tree's node count
    why: str = ""

    @classmethod
    def of(cls, f: dataclasses.Field) -> Option:
        m = f.metadata
        return cls(f.name, f.default, m.get("help", ""), m.get("auto", False), m.get("minimum", 1), m.get("why", ""))

    def check(self, method: str, value: Any) -> int | str:
        """The option's one check: its type and its one bound."""
        if self.auto and value == AUTO:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            kind = "a positive integer" if self.minimum >= 1 else f"an integer >= {self.minimum}"
            expected = f"{kind} or 'auto'" if self.auto else kind
            bound = f" (at least {self.minimum}: {self.why})" if self.minimum > 1 else ""
            raise ValueError(f"method {method!r}: '{self.key}' must be {expected}{bound}, got {value!r}")
        return value

    def parse(self, text: str) -> int | str:
        """A command-line value: an integer, or ``auto`` where allowed (argparse ``type``)."""
        if self.auto and text == AUTO:
            return text
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--{self.key.replace('_', '-')}: expected an integer{' or auto' if self.auto else ''}, got {text!r}"
            ) from None


@dataclass(frozen=True)
class NoOptions:
    """The options of a method that takes none."""


@dataclass
class BuildContext:
    """What a method may read to build its proposer."""

    target: TargetRuntime
    draft: DraftModel | None
    draft_dir: Path | None
    draft_sample_method: str  # the speculative config's (greedy | probabilistic)
    num_speculative_tokens: int  # resolved (``decoding.config.resolve``): tokens drafted per step
    options: Any  # the method's ``Options`` instance, resolved
    extras: dict[str, Any] = field(default_factory=dict)  # e.g. the oracle's reference outputs


class Method:
    """One drafting method. Subclasses set the class attributes and ``build``."""

    name: ClassVar[str]
    needs_draft: ClassVar[bool] = True
    Options: ClassVar[type] = NoOptions  # a frozen dataclass of ``option(...)`` fields: the method's own keys
    default_draft_length: ClassVar[int | None] = None  # model-free methods: tokens drafted per step unless asked
    help: ClassVar[str] = ""
    baseline: ClassVar[bool] = False  # plain decoding: what every speedup is measured against
    needs_reference: ClassVar[bool] = False  # measurement only: reads the greedy reference output (T = 0)
    per_draft_length: ClassVar[bool] = True  # the drafter's block length applies (not trees / model-free)

    proposer: ClassVar[type[Proposer] | None] = None  # the default ``build``: ``proposer(draft_sample_method)``

    @classmethod
    def build(cls, ctx: BuildContext) -> Proposer:
        if cls.proposer is None:
            raise NotImplementedError(f"method {cls.name!r} sets neither 'proposer' nor 'build'")
        return cls.proposer(ctx.draft_sample_method)

    @classmethod
    def option_list(cls) -> tuple[Option, ...]:
        return tuple(Option.of(f) for f in dataclasses.fields(cls.Options))

    @classmethod
    def make_options(cls, given: dict[str, Any]) -> Any:
        """The method's typed options: defaults filled in, each value checked by its one ``Option.check``
        (relations between options by the dataclass itself); an option of another method is a named error."""
        known = {o.key: o for o in cls.option_list()}
        stray = sorted(set(given) - set(known))
        if stray:
            raise ValueError(
                f"method {cls.name!r} has no option {', '.join(repr(s) for s in stray)}"
                + (f" (its options: {', '.join(sorted(known))})" if known else " (it takes none)")
            )
        return cls.Options(**{k: o.check(cls.name, given.get(k, o.default)) for k, o in known.items()})

    @classmethod
    def resolve_options(cls, given: dict[str, Any]) -> dict[str, int | str]:
        """``make_options`` as a dict (every key, defaults filled in)."""
        return dataclasses.asdict(cls.make_options(given))


METHODS: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    if cls.name in METHODS:
        raise ValueError(f"method {cls.name!r} is registered twice")
    METHODS[cls.name] = cls
    return cls


def get_method(name: str) -> type[Method]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}: expected one of {', '.join(method_names())}") from None


def method_names() -> list[str]:
    return sorted(METHODS)


def option_keys() -> list[str]:
    """Every method's own option keys (for the server's key check and the CLI)."""
    return sorted({o.key for m in METHODS.values() for o in m.option_list()})
