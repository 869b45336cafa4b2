"""The shared base of netmon's algorithm classes: a faithful ``repr`` from the constructor.

As in river (``river/base/base.py``): the constructor's parameters are the public surface, stored
under the same names, so ``repr`` and ``clone`` can be derived from the ``__init__`` signature.
"""

from __future__ import annotations

import inspect
from typing import Any, Self

__all__ = ["Base"]


class Base:
    """Mixin: ``__repr__`` and ``clone()`` from the ``__init__`` parameters stored as attributes."""

    def _get_params(self) -> dict[str, Any]:
        params = inspect.signature(type(self).__init__).parameters
        return {
            name: getattr(self, name)
            for name, p in params.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._get_params().items())
        return f"{type(self).__name__}({args})"

    def clone(self) -> Self:
        """A fresh instance with the same parameters and no state."""
        return type(self)(**self._get_params())
