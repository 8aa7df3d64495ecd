"""Options declared once: a config dataclass's fields (type, default, help) generate the command's
argparse options, read them back into the dataclass, and rebuild the command line a model card records.

A field's help and flag live in its metadata (``option(...)``); a nested dataclass field (e.g. the
head's loss weights) contributes its own fields. Adding a training option is one field.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import types
import typing
from typing import Any


def option(default: Any = dataclasses.MISSING, help: Any = "", *, flag: str | None = None, **extra: Any):
    """A dataclass field with its command-line help (and optionally its flag, ``choices``, ``always``:
    always written into a recorded command, ``invert``: a bool whose flag sets it False, ``skip``: not an
    option, e.g. derived, ``flag_default``: the command line's default where it differs from the field's,
    ``metavar``).
    ``help`` and ``choices`` may be callables, read when the parser is built (e.g. from a registry that
    grows after the dataclass is defined)."""
    meta = {"help": help, "flag": flag, **extra}
    if isinstance(default, type) and dataclasses.is_dataclass(default):  # a nested options dataclass
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _default(f: dataclasses.Field) -> Any:
    """The field's default (None for a required field)."""
    if _required(f):
        return None
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def _meta(f: dataclasses.Field, key: str, default: Any = None) -> Any:
    """A metadata entry, a callable one read now."""
    value = f.metadata.get(key, default)
    return value() if callable(value) else value


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _fields(cls) -> list[tuple[dataclasses.Field, Any, str | None]]:
    """(field, resolved type, parent field name or None) for every option, nested dataclasses flattened."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("skip"):
            continue
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            out += [(g, gt, f.name) for g, gt, _ in _fields(t)]
        else:
            out.append((f, t, None))
    return out


def _base(t) -> type:
    """``int | None`` → int; ``list[int] | None`` → list."""
    args = [a for a in typing.get_args(t) if a is not type(None)]
    if typing.get_origin(t) in (typing.Union, types.UnionType) and len(args) == 1:
        t = args[0]
    return typing.get_origin(t) or t


def _parse_ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_options(parser: argparse.ArgumentParser, cls, skip: tuple[str, ...] = ()) -> None:
    """One argparse option per field of ``cls`` (fields without a default are required)."""
    for f, t, _ in _fields(cls):
        if f.name in skip:
            continue
        base, help_ = _base(t), _meta(f, "help", "")
        required, default = _required(f), f.metadata.get("flag_default", _default(f))
        kw: dict[str, Any] = {"dest": f.name, "help": help_}
        if base is bool:
            kw["action"] = "store_false" if f.metadata.get("invert") else "store_true"
        else:
            kw["type"] = {list: _parse_ints}.get(base, base)
            kw["required"] = required
            if f.metadata.get("choices"):
                kw["choices"] = _meta(f, "choices")
            if f.metadata.get("metavar"):
                kw["metavar"] = f.metadata["metavar"]
            if not required:
                shown = ",".join(map(str, default)) if isinstance(default, list) else default
                kw["help"] = f"{help_} (default: {shown})" if help_ else f"default: {shown}"
        if not required:
            kw["default"] = default
        parser.add_argument(_flag(f), **kw)


def from_args(cls, args: argparse.Namespace, **given: Any):
    """The dataclass back from parsed options (``given`` fills skipped fields)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in given or f.metadata.get("skip"):
            continue
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            values[f.name] = t(**{g.name: getattr(args, g.name) for g in dataclasses.fields(t)})
        elif hasattr(args, f.name):
            values[f.name] = getattr(args, f.name)
    return cls(**values, **given)


def _text(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v))
    if isinstance(v, float):
        return f"{v:g}"
    return shlex.quote(str(v))


def command_line(prog: str, cls, config: dict) -> str:
    """The command that reproduces ``config`` (a dataclass as a dict): required options, options marked
    ``always`` and every option whose value differs from its default."""
    parts = [prog]
    for f, _t, parent in _fields(cls):
        required, default = _required(f), _default(f)
        # a config recorded before an option existed has that option's default
        value = (config.get(parent) or {}).get(f.name, default) if parent else config.get(f.name, default)
        if isinstance(value, bool):
            if value != default:
                parts.append(_flag(f))
        elif value is not None and (required or f.metadata.get("always") or value != default):
            parts.append(f"{_flag(f)} {_text(value)}")
    return " ".join(parts)
