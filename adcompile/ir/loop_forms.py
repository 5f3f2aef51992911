"""The index arithmetic of array ops' loop forms (``arrays.LoopForm``).

Loop code reads an element of an operand at an index written as texts
(``i0``, ``(3 + 2 * i1)``): these give the operand's index for a broadcast, a
reshape that adds or drops axes of length 1, and a basic index (ints,
slices, None, ``...``; an int may itself be the text of one, in a scan's
step). Used by ``array_ops`` (the ops' forms) and ``emit.array_loops``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .arrays import LoopForm, Shape


def broadcast_index(index: Sequence[str], shape: Shape, old: Shape) -> list[str]:
    """The index of an operand of shape ``old`` broadcast to ``shape`` at ``index``."""
    lead = len(shape) - len(old)
    return ["0" if n == 1 else index[lead + k] for k, n in enumerate(old)]


def unit_reshape(index: Sequence[str], shape: Shape, old: Shape) -> list[str] | None:
    """The operand's index of a reshape that only adds or drops axes of length 1;
    None for another reshape."""
    kept = [i for i, n in zip(index, shape) if n != 1]
    if [n for n in shape if n != 1] != [n for n in old if n != 1]:
        return None
    it = iter(kept)
    return ["0" if n == 1 else next(it) for n in old]


def affine_text(start: int, step: int, var: str) -> str:
    """``start + step * var`` as loop code writes it (``(3 + 2 * i0)``, ``i0``)."""
    term = var if step == 1 else f"{step} * {var}"
    if not step:
        return str(start)
    return term if start == 0 else f"({start} + {term})"


def getitem_form(index: tuple, text: str) -> LoopForm | None:
    """``x[index]`` in loop nests: an element of the result reads one of ``x`` (a
    basic index: None for one with arrays), and a run of ints is a view of a whole
    array (``{0}[text]``)."""
    if any(isinstance(item, np.ndarray) for item in index):
        return None
    ints = all(isinstance(i, (int, np.integer, str)) for i in index)

    def view(at: Sequence[str], shape: Shape, old: Shape) -> list[str]:
        items = list(index)
        if Ellipsis in items:
            k = items.index(Ellipsis)
            filled = len(old) - sum(1 for i in items if i is not None and i is not Ellipsis)
            items[k : k + 1] = [slice(None)] * filled
        items += [slice(None)] * (len(old) - sum(1 for i in items if i is not None))
        found, rest, dims = [], iter(at), iter(old)
        for item in items:
            if item is None:
                next(rest)
                continue
            n = next(dims)
            if isinstance(item, slice):
                start, _, step = item.indices(n)
                found.append(affine_text(start, step, next(rest)))
            elif isinstance(item, str):  # (an int in loop code: in range)
                found.append(item)
            else:
                found.append(str(int(item) % n))
        return found

    return LoopForm(view=view, array=f"{{0}}[{text}]" if ints else None)
