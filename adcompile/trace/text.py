"""The text of a traced value: printed as it is, refused as data.

``print(x)``, ``f"{loss:.4f}"`` and logging inside a traced function show the
value the trace sees, as plain Python shows the value of each call. A branch or a
key made of that text (``if f"{x:.1f}" == "0.7"``, ``len(str(x))``, ``T[str(x)]``)
would be compiled in with the traced value's answer: :class:`TracedText`, what
``repr``, ``str`` and ``format`` of a traced Value (or of its ``.data``) give in the
user's code while tracing, refuses those uses by name. Joined to other text
(``"loss " + str(x)``) it stays itself.
"""

from __future__ import annotations

from typing import Any

from .mode import MODE, in_library

_WHY = (
    "text made from a traced value ({what}) was used as data: compiled, it would be "
    "the text of the value seen while tracing, where plain Python makes it from the "
    "value of each call. Compare the Value itself (x > 0.65), or make the text outside "
    "the function"
)


class TracedText(str):
    """``str(x)`` of a traced value, in the user's code (see the module doc)."""

    __slots__ = ()

    def _refuse(self, what: str) -> None:
        if not in_library(2):  # (the caller of the refusing method)
            raise TypeError(_WHY.format(what=what))

    def __add__(self, other: Any) -> Any:
        return TracedText(str.__add__(self, other))

    def __radd__(self, other: Any) -> Any:
        return TracedText(str.__add__(other, self)) if isinstance(other, str) else NotImplemented


def _refusing(name: str) -> Any:
    plain = getattr(str, name)

    def method(self: TracedText, *args: Any, **kwargs: Any) -> Any:
        self._refuse(f"{name.strip('_')} of it")
        return plain(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in (
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __len__ __contains__ __getitem__ "
    "__iter__ startswith endswith find rfind index rindex count split rsplit partition "
    "rpartition isdigit isnumeric isdecimal encode"
).split():
    setattr(TracedText, _name, _refusing(_name))


def traced_text(text: str, depth: int = 2) -> str:
    """``text`` (of a value), as :class:`TracedText` where the user's code made it
    while tracing (``depth``: its frame, above the caller's), else as it is."""
    if MODE.get().trace is not None and not in_library(depth):
        return TracedText(text)
    return text
