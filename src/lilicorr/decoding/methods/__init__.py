"""The method registry: one module per drafting method, each registering itself on import.

Adding a method is one new module here (a ``Method`` subclass with ``@register``, see ``base.py``) plus
its import line below; ``generate``, ``bench`` and ``serve`` find it through the registry.
"""

# The built-in methods (each module registers itself on import).
from lilicorr.decoding.methods import ar, arms, dflash, lilicorr, ngram, oracle, trees  # noqa: E402, F401, I001
from lilicorr.decoding.methods.base import (
    AUTO,
    METHODS,
    BuildContext,
    Method,
    NoOptions,
    Option,
    get_method,
    method_names,
    option,
    option_keys,
    register,
)

__all__ = ["AUTO", "METHODS", "BuildContext", "Method", "NoOptions", "Option", "get_method", "method_names", "option",
           "option_keys", "register"]  # fmt: skip
