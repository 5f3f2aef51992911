"""The index arithmetic of array ops' loop forms (``arrays.LoopForm``).

Loop code reads an element of an operand at an index written as texts
(``i0``, ``(3 + 2 * i1)``): these give the operand's index for a broadcast, a
reshape that adds or drops axes of length 1, and a basic index (ints,
slices, None, ``...``; an int may itself be the text of one, in a scan's
step). Used by ``array_ops``, ``array_index`` and ``array_products`` (the ops'
forms) and ``emit.array_loops``.
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


def getitem_form(index: tuple, text: str, names: Sequence[str] = ()) -> LoopForm | None:
    """``x[index]`` in loop nests: an element of the result reads one of ``x`` (a
    basic index, or one whose arrays ``names`` are read in the loop: see
    :func:`gathered`), and a run of ints is a view of a whole array (``{0}[text]``)."""
    if any(isinstance(item, np.ndarray) for item in index):
        found = gathered(index, names)
        if found is None:
            return None
        items, consts = found
        return LoopForm(view=lambda at, shape, old: _gather(items, at, old), consts=consts)
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


def nest(loops: Sequence[tuple[str, object]], inner: list[str]) -> list[str]:
    """``inner`` inside ``for var in range(size)`` for each (var, size), outermost first."""
    lines = [f"{'    ' * k}for {v} in range({n}):" for k, (v, n) in enumerate(loops)]
    pad = "    " * len(loops)
    return lines + [pad + line for line in inner]


def slice_text(item: slice) -> str:
    """A slice as Python writes it in an index (``1:``, ``::2``, ``:``)."""
    text = ":".join("" if v is None else str(v) for v in (item.start, item.stop))
    return text + ("" if item.step is None else f":{item.step}")


def einsum_statement(a: str, b: str, out: str) -> str:
    """``np.einsum(f"{a},{b}->{out}", {0}, {1})`` as loops (a ``LoopForm.statement``):
    one loop per output letter, and inside, the sum over the other letters in a
    local. Sizes are read from the operands' shapes; the temporaries' names end
    in the result's (``_s_v12``), so that two such statements never share one."""

    def size(c: str) -> str:
        return f"{{0}}.shape[{a.index(c)}]" if c in a else f"{{1}}.shape[{b.index(c)}]"

    def var(c: str) -> str:
        return f"_{c}_{{name}}"

    summed = [c for c in dict.fromkeys(a + b) if c not in out]
    at = ", ".join(var(c) for c in out)
    left = f"{{0}}[{', '.join(map(var, a))}]" if a else "{0}"  # (a 0-d operand: a number)
    right = f"{{1}}[{', '.join(map(var, b))}]" if b else "{1}"
    term = f"{left} * {right}"
    acc = "_s_{name}"
    body = [f"{acc} = 0.0", *nest([(var(c), size(c)) for c in summed], [f"{acc} += {term}"])]
    if not out:
        return "\n".join([*body, f"{{name}} = {acc}"])
    shape = "(" + "".join(f"{size(c)}, " for c in out) + ")"
    loops = nest([(var(c), size(c)) for c in out], [*body, f"{{name}}[{at}] = {acc}"])
    return "\n".join([f"{{name}} = np.empty({shape})", *loops])


def _along(axis: int | None) -> list[str]:
    """Lines that see ``{0}`` as ``_y_{name}`` of shape (before, along, after) around
    ``axis`` (None: all of it along one axis), and ``{name}``, a new array of its
    shape, as ``_z_{name}`` alike."""
    if axis is None:
        sizes = ["_m_{name} = 1", "_n_{name} = _x_{name}.size"]
    else:
        sizes = [
            "_m_{name} = 1",
            f"for _d_{{name}} in range({axis}):",
            "    _m_{name} *= _x_{name}.shape[_d_{name}]",
            f"_n_{{name}} = _x_{{name}}.shape[{axis}]",
        ]
    return [
        "_x_{name} = np.ascontiguousarray({0})",
        *sizes,
        "_k_{name} = _x_{name}.size // max(_m_{name} * _n_{name}, 1)",
        "_y_{name} = _x_{name}.reshape((_m_{name}, _n_{name}, _k_{name}))",
        "{name} = np.empty(_x_{name}.shape)",
        "_z_{name} = {name}.reshape((_m_{name}, _n_{name}, _k_{name}))",
    ]


_EACH = [("_p_{name}", "_m_{name}"), ("_q_{name}", "_k_{name}")]
_AT = "[_p_{name}, _r_{name}, _q_{name}]"


def cumsum_statement(axis: int) -> str:
    """``np.cumsum({0}, axis=axis)`` as loops, for any number of axes (a
    ``LoopForm.statement``): each running sum in a local, in NumPy's order."""
    inner = [
        "_s_{name} = 0.0",
        "for _r_{name} in range(_n_{name}):",
        f"    _s_{{name}} += _y_{{name}}{_AT}",
        f"    _z_{{name}}{_AT} = _s_{{name}}",
    ]
    return "\n".join([*_along(axis), *nest(_EACH, inner)])


def others_statement(axis: int | None) -> str:
    """Each element's product of the others along ``axis`` (None: all), as loops: the
    products of those before it, then of those after it, in the order and with the
    operations of ``array_values.prod_of_others``."""
    inner = [
        "_s_{name} = 1.0",
        "for _r_{name} in range(_n_{name}):",
        f"    _z_{{name}}{_AT} = _s_{{name}}",
        f"    _s_{{name}} *= _y_{{name}}{_AT}",
        "_s_{name} = 1.0",
        "for _r_{name} in range(_n_{name} - 1, -1, -1):",
        f"    _z_{{name}}{_AT} *= _s_{{name}}",
        f"    _s_{{name}} *= _y_{{name}}{_AT}",
    ]
    return "\n".join([*_along(axis), *nest(_EACH, inner)])


def gathered(index: tuple, names: Sequence[str]) -> tuple[list, dict[str, np.ndarray]] | None:
    """An index of slices and integer arrays as loop code reads it: its items, each
    array one ``(name, length)`` per axis it indexes, and those arrays by name
    (a boolean mask: its ``np.nonzero``, one array per axis); or None where NumPy's
    rule is not one result axis at the arrays' place (arrays apart, or of other
    lengths, ints beside them, None, ``...``, arrays of more than one axis).
    ``names``: the arrays' names in the index, in order."""
    items: list = []
    consts: dict[str, np.ndarray] = {}
    arrays = iter(names)
    for item in index:
        if isinstance(item, slice):
            items.append(item)
            continue
        if not isinstance(item, np.ndarray):
            return None
        name = next(arrays)
        parts = np.nonzero(item) if item.dtype == np.bool_ else (item,)
        if item.dtype != np.bool_ and (item.ndim != 1 or item.dtype.kind not in "iu"):
            return None
        for j, part in enumerate(parts):
            key = name if len(parts) == 1 and item.dtype != np.bool_ else f"{name}_{j}"
            consts[key] = np.ascontiguousarray(part, dtype=np.int64)
            items.append((key, len(part)))
    at = [k for k, item in enumerate(items) if isinstance(item, tuple)]
    if at != list(range(at[0], at[-1] + 1)) or len({items[k][1] for k in at}) != 1:
        return None
    return items, consts


def _gather(items: list, at: Sequence[str], old: Shape) -> list[str]:
    """The operand's index of a gathered result's ``at`` (:func:`gathered`)."""
    items = items + [slice(None)] * (len(old) - len(items))
    found, rest, row = [], iter(at), None
    for item, n in zip(items, old):
        if isinstance(item, tuple):
            row = next(rest) if row is None else row  # (the arrays share one axis)
            found.append(f"{item[0]}[{row}]")
        else:
            start, _, step = item.indices(n)
            found.append(affine_text(start, step, next(rest)))
    return found


def scatter_statement(items: list, shape: Shape, write: bool = False, scalar: bool = False) -> str:
    """The adjoint of a gather (:func:`gathered`) as loops: zeros of ``shape``, and
    each row of ``{0}`` added where it was read from (rows read twice add up). With
    ``write``: ``{0}`` with each row of ``{1}`` written there, in order (a row
    written twice keeps the last, as NumPy's assignment does); with ``scalar``,
    the number ``{1}`` in each."""
    items = items + [slice(None)] * (len(shape) - len(items))
    rows = next(item[1] for item in items if isinstance(item, tuple))
    target, source, done = [], [], False
    for item in items:
        if isinstance(item, tuple):
            target.append(f"{item[0]}[_j_{{name}}]")
            if not done:
                source.append("_j_{name}")
                done = True
        else:
            target.append(slice_text(item))
            source.append(":")
    if write:  # (a number is written as it is; rows, row by row)
        row = "{1}" if scalar else f"{{1}}[{', '.join(source)}]"
        return "\n".join(
            [
                "{name} = {0}.copy()",
                f"for _j_{{name}} in range({rows}):",
                f"    {{name}}[{', '.join(target)}] = {row}",
            ]
        )
    return "\n".join(
        [
            f"{{name}} = np.zeros({tuple(shape)!r})",
            f"for _j_{{name}} in range({rows}):",
            f"    {{name}}[{', '.join(target)}] += {{0}}[{', '.join(source)}]",
        ]
    )
