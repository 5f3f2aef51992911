"""The entries of compiled transforms: what runs on a call like the last one.

A transform installs its last specialisation's entry as its ``__call__``
(``api.Transformed._install``). The entry checks, with a few ``type`` and
``shape`` comparisons, that a call fits the specialisation, runs its compiled
code and builds the result; anything else goes to the general path. After
``HOT_CALLS`` calls, small straight-line or folded code gets a *direct*
entry: a Numba function that places the outputs where the result is built
from, called through Numba's dispatcher (whose type checks, in C, replace
the entry's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir.outputs import OutLayout
from ..trace import loader
from ..trace.mode import DEFAULT_MODE, MODE
from .program import DirectPlan

F64_DTYPE = np.dtype(np.float64)
Specialisation = Any  # api.Specialisation (api imports this module, not the reverse)


#: After this many calls through a specialisation's entry, small code gets a
#: direct entry (``direct_entry``): compiled once more, in about 0.1-0.3 s, so
#: that a hot call skips most of the Python around the Numba call.
HOT_CALLS = 100
#: Direct entries compile in a thread of their own, while calls go on (False:
#: in the call that made the transform hot).
BACKGROUND = True
#: Straight-line code gets one if its tape has at most this many slots (larger
#: code runs long enough that the Python around the call matters little, and
#: compiles for longer).
HOT_SLOTS = 400
#: Folded code gets one if its source prints at most this many primitive
#: statements (``CodeFacts.statements``, loop bodies once; about 300 lines of
#: source: folded code of the loop IR prints 1.2 to 2.9 lines per statement).
HOT_FOLDED_STATEMENTS = 150
#: ... and either only if its compiled code takes at most this long a call
#: (a direct entry saves about 0.3 to 0.5 µs a call).
HOT_MAX_SECONDS = 20e-6


def entry(
    spec: Specialisation,
    key: tuple,
    slow: Callable,
    hot: Callable | None,
    check: Callable[[], int] | None = None,
    hidden: Sequence[Callable[[], Any]] = (),
) -> Callable:
    """The call of a transform whose arguments fit ``spec`` (arguments of ``key``'s
    shapes), installed as its ``__call__``: a few ``type`` and ``shape``
    comparisons, the compiled code, the transform's result. Anything else (other
    arguments, keywords, a failed guard, a ``no_grad`` or ``debug_nans`` block,
    ``check()`` other than -1: a value read from outside the arguments changed)
    goes to ``slow(args, kwargs)``, the general path. ``hot()`` is called once,
    after ``HOT_CALLS`` calls. ``hidden`` read, one each, the values ``f`` reads
    from outside its arguments that are inputs (the last of ``key``).
    """
    names, visible, lines = entry_start(key, check, hidden)
    flat = []
    for name, shape in zip(names, key):
        if shape is None:
            lines.append(f"    if type({name}) is not float:")
        else:
            # a 1-D array goes to the compiled code as it is: it must be contiguous
            # (the code was compiled for that layout and is called past Numba's
            # dispatcher, which would otherwise compile another version)
            strided = f" or {name}.strides != (8,)" if len(shape) == 1 else ""
            lines.append(
                f"    if type({name}) is not ndarray or {name}.dtype is not F64 "
                f"or {name}.shape != {shape!r}{strided}:"
            )
        lines.append(f"        {to_general(visible)}")
        flat.append(name if shape is None or len(shape) == 1 else f"{name}.ravel()")
    compiled = spec.compiled
    call = compiled.native
    if call is None:  # no Numba function of its own: through its ``call``
        lines.append(f"    ok, out = call({', '.join(flat)})")
        lines.append("    if not ok:")
    else:  # the Numba function itself (with this thread's work array, if it takes one)
        called = [*map(str, call.lead), *flat]
        if call.work is not None:
            lines.append("    work = getattr(local, 'work', None)")
            lines.append("    if work is None:")
            lines.append(f"        {to_general(visible)}")
            called += ["work", "columns"]
        lines.append(f"    out = empty({compiled.n_out})")
        lines.append(f"    if not fn({', '.join([*called, 'out'])}):")
    lines.append(f"        {to_general(visible)}")
    if hot is not None:
        lines += ["    calls[0] += 1", f"    if calls[0] == {HOT_CALLS}:", "        hot()"]
    lines.append(f"    return {result_text(spec.out)}")
    ns = entry_names(slow)
    ns.update(call=spec.call, hot=hot, calls=[0], check=check)
    if call is not None:
        ns.update(fn=native(call.fn), local=call.local, columns=call.columns)
    ns.update(readers(hidden))
    stem = f"entry_of_{compiled.facts.kind}_code"
    return loader.load("\n".join(lines) + "\n", stem, ns).entry


def entry_start(
    key: tuple, check: Callable[[], int] | None, hidden: Sequence[Callable[[], Any]]
) -> tuple[list[str], list[str], list[str]]:
    """An entry's names (one per part of ``key``), the names of the arguments it
    takes (without the hidden inputs, which ``hidden`` read: ``r0()`` ...), and
    its first lines."""
    visible = [f"a{k}" for k in range(len(key) - len(hidden))]
    inputs = [f"h{k}" for k in range(len(hidden))]
    lines = entry_head(visible) + watched_lines(visible, check)
    if inputs:
        lines.append("    try:")
        for k, (h, shape) in enumerate(zip(inputs, key[len(visible) :])):
            lines.append(f"        {h} = r{k}()" if shape else f"        {h} = float(r{k}())")
        lines += [
            "    except Exception:  # (the general path says what is wrong)",
            f"        {to_general(visible)}",
        ]
    return visible + inputs, visible, lines


def readers(hidden: Sequence[Callable[[], Any]]) -> dict[str, Callable[[], Any]]:
    """The names an entry reads the hidden inputs by (``entry_start``)."""
    return {f"r{k}": read for k, read in enumerate(hidden)}


def watched_lines(names: list[str], check: Callable[[], int] | None) -> list[str]:
    """The lines of an entry that leave a call to the general path when a value
    read from outside the arguments changed (``captures``: -1 is no change)."""
    if check is None:
        return []
    return ["    if check() != -1:", f"        {to_general(names)}"]


def entry_head(names: list[str]) -> list[str]:
    """The first lines of an entry taking the arguments ``names``: positional
    only, so that any other call (fewer or more arguments, keywords) is seen
    and goes to the general path, which says what is wrong with it."""
    if not names:
        return [
            "def entry(*rest, **kwargs):",
            "    if rest or kwargs or mode() is not default:",
            "        return slow(rest, kwargs)",
        ]
    return [
        f"def entry({', '.join(n + '=unset' for n in names)}, /, *rest, **kwargs):",
        f"    if rest or kwargs or {names[-1]} is unset or mode() is not default:",
        f"        return slow(given(({', '.join(names)},), rest), kwargs)",
    ]


def to_general(names: list[str]) -> str:
    """The line of an entry that leaves a call it took to the general path."""
    return f"return slow(({''.join(n + ', ' for n in names)}), {{}})"


def given_args(args: tuple, rest: tuple) -> tuple:
    """The arguments of a call an entry did not take."""
    return tuple(a for a in args if a is not UNSET) + rest


UNSET = object()


def entry_names(slow: Callable) -> dict[str, Any]:
    """The names every generated entry reads."""
    return {
        "__name__": __name__,  # (warnings and guard lines look past adcompile's frames)
        "ndarray": np.ndarray,
        "F64": F64_DTYPE,
        "empty": np.empty,
        "mode": MODE.get,
        "default": DEFAULT_MODE,
        "slow": slow,
        "unset": UNSET,
        "given": given_args,
    }


def hot_ready(spec: Specialisation, key: tuple) -> bool:
    """Whether ``spec`` may get a direct entry once hot: code that takes one
    (``CompiledProgram.gets_direct_entry``), of floats and 1-D arrays, and by its
    facts small: straight-line code of at most ``HOT_SLOTS`` slots, folded code
    of at most ``HOT_FOLDED_STATEMENTS`` statements."""
    if not all(shape is None or len(shape) == 1 for shape in key):
        return False
    if not spec.compiled.gets_direct_entry:
        return False
    facts = spec.compiled.facts
    if facts.kind == "folded":
        return facts.statements <= HOT_FOLDED_STATEMENTS
    return facts.slots <= HOT_SLOTS


def worth_it(spec: Specialisation, key: tuple) -> bool:
    """Whether a call of ``spec``'s compiled code is short enough (under
    ``HOT_MAX_SECONDS``, timed on zeros, the fastest of three: another thread
    holding the interpreter can only make one slower) that a direct entry would
    matter."""
    args = [0.0 if shape is None else np.zeros(shape) for shape in key]
    times = []
    for _ in range(3):
        clock = time.perf_counter()
        spec.call(*args)
        times.append(time.perf_counter() - clock)
    return min(times) <= HOT_MAX_SECONDS


def direct_entry(
    spec: Specialisation,
    key: tuple,
    slow: Callable,
    fname: str,
    check: Callable[[], int] | None = None,
    hidden: Sequence[Callable[[], Any]] = (),
) -> Callable:
    """The entry of a hot specialisation (see ``entry``), called through Numba's
    dispatcher, whose type checks in C replace most of the entry's (a call it
    cannot take raises: the general path then runs; floats and dtypes are
    checked here, where Numba would convert them). Scalars come back as
    the Numba function's result, arrays are allocated here and filled there.

    The compiled code makes the Numba function (``CompiledProgram.direct``):
    straight-line code is compiled once more with its outputs placed so;
    folded code is called by a small Numba function that places them, with
    scratch space kept per thread.
    """
    parts = spec.out.parts
    scalars = [k for k, (_, shape) in enumerate(parts) if shape is None]
    arrays = [k for k, (_, shape) in enumerate(parts) if shape is not None]
    sizes = {k: int(np.prod(parts[k][1])) for k in arrays}
    whole = not arrays and tuples_only(spec.out.tree)  # Numba returns the result itself
    made = spec.compiled.direct(_direct_plan(spec.out, key, f"{fname}_direct", whole))
    if made is None:
        raise ValueError("this code gets no direct entry (see hot_ready)")
    fn, scratch = made
    given = {k: f"g{k}" for k in arrays}
    returned = {k: "r" if len(scalars) == 1 else f"r[{n}]" for n, k in enumerate(scalars)}

    def part(k: int) -> str:
        shape = parts[k][1]
        if shape is None:
            return returned[k]
        return given[k] if len(shape) == 1 else f"{given[k]}.reshape({shape!r})"

    names, visible, lines = entry_start(key, check, hidden)
    lines += [f"    {given[k]} = empty({sizes[k]})" for k in arrays]
    if scratch:  # this thread's scratch space
        lines += [
            "    try:",
            "        s = local.s",
            "    except AttributeError:",
            f"        s = local.s = empty({scratch})",
        ]
    called = names + [given[k] for k in arrays] + (["s"] if scratch else [])
    # Numba's dispatcher converts bools and ints to float64 (the general path
    # refuses bools), and has been seen to take a byte-swapped float64 array
    # for a native one: floats and dtypes are checked here
    checks = [
        f"type({name}) is not float" if shape is None else f"{name}.dtype is not F64"
        for name, shape in zip(names, key)
    ]
    lines.append("    try:")
    if checks:
        lines += [f"        if {' or '.join(checks)}:", f"            {to_general(visible)}"]
    lines += [
        f"        r = fn({', '.join(called)})",
        "    except Exception:  # other types than compiled for (Numba's errors included)",
        f"        {to_general(visible)}",
        "    if r is None:  # another length, or a failed guard",
        f"        {to_general(visible)}",
        f"    return {'r' if whole else result_text(spec.out, part)}",
    ]
    ns = entry_names(slow)
    ns.update(fn=fn, local=threading.local(), check=check, **readers(hidden))
    return loader.load("\n".join(lines) + "\n", "direct_entry", ns).entry


def _direct_plan(layout: OutLayout, key: tuple, fname: str, whole: bool) -> DirectPlan:
    """What the direct function of a specialisation whose result is laid out as
    ``layout`` does, for arguments of ``key``'s shapes: it returns the whole result
    (``whole``: scalars in tuples only), its one scalar, a tuple of its scalars, or
    True (its arrays are filled)."""
    scalars = [k for k, (_, shape) in enumerate(layout.parts) if shape is None]

    def success(local: dict[int, str]) -> str:
        """What the direct function returns, given each scalar part's text."""
        if whole:
            return result_text(layout, lambda k: local[k])
        if len(scalars) == 1:
            return local[scalars[0]]
        if scalars:
            return "(" + ", ".join(local[k] for k in scalars) + ")"
        return "True"

    sizes = tuple(None if shape is None else shape[0] for shape in key)
    return DirectPlan(fname, sizes, tuple(layout.parts), success)


def tuples_only(tree: Any) -> bool:
    """Whether an output tree nests only tuples (Numba can return it as it is)."""
    if isinstance(tree, int):
        return True
    return tree[0] == "tuple" and all(tuples_only(t) for t in tree[1])


def result_text(layout: OutLayout, part: Callable[[int], str] | None = None) -> str:
    """The expression that builds the transform's result from ``out`` (as
    ``layout.unpack`` does), for the generated entry; ``part(k)`` the text of
    part ``k``, if not read from ``out``."""
    parts = []
    for k, (start, shape) in enumerate(layout.parts):
        if part is not None:
            parts.append(part(k))
        elif shape is None:
            parts.append(f"out.item({start})")
        else:
            text = f"out[{start}:{start + int(np.prod(shape))}]"
            parts.append(text if len(shape) == 1 else f"{text}.reshape({shape!r})")

    def walk(tree: Any) -> str:
        if isinstance(tree, int):
            return parts[tree]
        items = [walk(t) for t in tree[1]]
        if tree[0] == "list":
            return f"[{', '.join(items)}]"
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"

    return walk(layout.tree)


def native(fn: Any) -> Any:
    """A Numba function's one compiled version, called without the dispatcher's
    type matching (the entry has checked the arguments' types and layouts);
    ``fn`` itself when it has none or several."""
    overloads = getattr(fn, "overloads", None)
    if not overloads or len(overloads) != 1:
        return fn
    return getattr(next(iter(overloads.values())), "entry_point", fn)
