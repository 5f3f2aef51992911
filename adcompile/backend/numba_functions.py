"""The Numba functions compiled programs make (``backend.compiled``): their code
compiled, or loaded from Numba's cache (folded and straight-line code), the direct
entries' functions, and the entries for the user's own ``@numba.njit`` code.
Numba itself is reached through ``backend.jit``, imported where code is first
compiled or loaded (this module does not import it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..emit.codegen import Outputs, Program, module_source, straight_line
from ..ir.tape import Param, Tape
from ..trace import loader
from .program import DirectFunction, DirectPlan, NativeCall
from .python_first import numba_of


def jit_module() -> Any:
    """``backend.jit``, the Numba side."""
    from . import jit  # (Numba is imported where code is first compiled or loaded)

    return jit


#: The Numba type of a flat float64 array argument.
_ARRAY = "float64[::1]"


def arg_type(size: int | None) -> str:
    """The Numba type of an argument of ``size`` values (None: a float)."""
    return "float64" if size is None else _ARRAY


def signature(params: Sequence[Param], arrays: int = 1, lead: str = "") -> str:
    """The Numba signature of generated code ``fn(lead?, *params, *arrays) -> bool``
    (``arrays`` more flat float64 arrays after the parameters: ``out`` ...)."""
    types = [lead] if lead else []
    types += [arg_type(p.size) for p in params] + [_ARRAY] * arrays
    return f"boolean({', '.join(types)})"


def arguments(types: Sequence[str]) -> str:
    """The Numba signature of a function's arguments, its result inferred: ``(float64, )``."""
    return "(" + "".join(f"{t}, " for t in types) + ")"


def compile_folded_source(
    source: str, fname: str, functions: Sequence[str], params: Sequence[Param], lead: str = ""
) -> Callable:
    """Compile ``fname`` of folded ``source``: ``fname(lead?, *params, v, c, out) -> bool``.

    ``functions`` are the outlined loop bodies it calls; Numba inlines them.
    ``lead`` is the type of an argument before the parameters (``"int64"``
    for the batch length of batch-generic code), or empty.
    """
    mod = loader.load(source, fname)
    for name in functions:
        fn = getattr(mod, name)
        if not hasattr(fn, "py_func"):  # not yet a Numba function (a reloaded module)
            setattr(mod, name, jit_module().njit(fn, inline=True))
    return jit_module().compile_now(getattr(mod, fname), signature(params, 3, lead))


def compile_straight_line(source: str, fname: str, params: Sequence[Param]) -> Callable:
    """``fname`` of straight-line ``source``: ``fname(*params, out) -> ok``, compiled."""
    return jit_module().compile_now(getattr(loader.load(source, fname), fname), signature(params))


def comment(text: str) -> str:
    """``text`` as ``#`` comment lines of at most 78 characters."""
    lines = textwrap.wrap(text, 76, break_on_hyphens=False)
    return "".join(f"# {line}\n" for line in lines)


def direct_native(native: NativeCall, n_out: int, plan: DirectPlan) -> DirectFunction:
    """The direct entry's function of code called as ``native`` says, writing
    ``n_out`` outputs (folded and batch-generic code): a small Numba function that
    calls it and places its outputs (:func:`compile_direct_folded`)."""
    arrays = plan.array_parts()
    scalars = {k: f"out[{start}]" for k, (start, shape) in enumerate(plan.parts) if shape is None}
    placed = [(f"out_{k}", plan.parts[k][0], int(np.prod(plan.parts[k][1]))) for k in arrays]
    fn, scratch = compile_direct_folded(
        native, n_out, list(plan.sizes), plan.fname, placed, plan.success(scalars)
    )
    return DirectFunction(fn, scratch)


def compile_direct(tape: Tape, params: Sequence[Param], fname: str, outputs: Outputs) -> Callable:
    """Straight-line code of ``tape`` with its outputs placed as ``outputs`` says,
    as a Numba function that the fast entry of a transform calls directly
    (through Numba's dispatcher, which checks the arguments' types in C).

    It is compiled for ``params`` and then closed to other types: a call with
    other types raises TypeError. An array argument of another length, or a
    failed guard, returns ``outputs.failure``.
    """
    source = module_source(
        [
            comment(
                f"{fname}: the code of the transform's calls, its outputs placed where "
                "the caller reads them (arrays it passes, or returned)"
            )
            + straight_line(tape, fname, params, outputs=outputs)
        ]
    )
    types = [arg_type(p.size) for p in params] + [arg_type(1)] * len(outputs.arrays)
    fn = jit_module().compile_now(getattr(loader.load(source, fname), fname), arguments(types))
    fn.disable_compile()
    return fn


def compile_direct_folded(
    native: Any,
    n_out: int,
    sizes: Sequence[int | None],
    fname: str,
    arrays: Sequence[tuple[str, int, int]],
    success: str,
) -> tuple[Callable, int]:
    """A Numba function that calls folded code and places its outputs as the
    fast entry of a transform reads them: ``fn(*args, *arrays, s) -> result``.

    ``native`` says how the folded code is called (a :class:`NativeCall`:
    its Numba function, a batch length before the arguments, its work array's
    length and its constants); it writes ``n_out`` outputs. ``sizes`` are its
    arguments' (None for a float). ``arrays`` are ``(name, start, size)``:
    each such parameter receives ``out[start:start + size]``; ``success`` is
    returned (an expression of ``out``); None when a guard fails or an array
    argument has another length than traced. ``s`` is scratch space of the
    returned size (the work array, then ``out``), kept by the caller between
    calls. As ``compile_direct``, it is closed to other types than compiled
    for (TypeError). Not cached on disk: it links the folded code in, which
    its text does not show.
    """
    names = [f"a{k}" for k in range(len(sizes))]
    lines = [f"def {fname}({', '.join([*names, *(a[0] for a in arrays), 's'])}):"]
    for name, size in zip(names, sizes):
        if size is not None:
            lines += [f"    if {name}.shape[0] != {size}:", "        return None"]
    work, lead = native.work, [str(n) for n in native.lead]
    lines += [
        f"    out = s[{work}:]",
        f"    if not main({', '.join([*lead, *names, 's', 'columns', 'out'])}):",
        "        return None",
    ]
    for name, start, size in arrays:  # loops: Numba compiles slice copies slowly
        lines += [f"    for k in range({size}):", f"        {name}[k] = out[{start} + k]"]
    lines.append(f"    return {success}")
    linked = {"main": numba_of(native.fn), "columns": native.columns}
    mod = loader.load("\n".join(lines) + "\n", f"direct_call_{fname}", linked)
    types = [arg_type(size) for size in sizes] + [arg_type(1)] * (len(arrays) + 1)
    what = f"the direct call of {fname}"
    fn = jit_module().compile_uncached(
        getattr(mod, fname), arguments(types), what, "with the code it calls"
    )
    return fn, work + n_out


def native_entry(params: Sequence[Param], native: Any, n_out: int | None = None) -> Callable:
    """One Numba function ``entry(*args, out) -> ok`` around compiled code called as
    ``native`` says (a :class:`NativeCall`), callable from the user's own
    ``@numba.njit`` code.

    ``args`` are as in ``params`` (a float, or a flat float64 array); ``out``
    receives the outputs; the result is False when a guard fails. The work
    array the code needs is made inside, so the signature is the same for
    every kind of code. With ``n_out`` (code of fixed sizes), an array argument of
    another length than its parameter's, or an ``out`` shorter than ``n_out``,
    raises ``ValueError`` (the code would read or write past their ends).
    """
    names = [f"a{k}" for k in range(len(params))]
    ns: dict[str, Any] = {"np": np, "inner": numba_of(native.fn), "columns": native.columns}
    called = [*map(str, native.lead), *names]
    body = []
    if n_out is not None:
        for k, (name, p) in enumerate(zip(names, params)):
            if p.size is not None:
                body.append(f"if {name}.shape[0] != {p.size}:")
                body.append(
                    f"    raise ValueError('argument {k} ({p.name}) needs {p.size} values')"
                )
        body.append(f"if out.shape[0] < {n_out}:")
        body.append(f"    raise ValueError('out needs {n_out} values')")
    if native.work is not None:
        body.append(f"work = np.empty({native.work})")
        called += ["work", "columns"]
    body.append(f"return inner({', '.join([*called, 'out'])})")
    return _entry(names, body, ns)


def interpreter_entry(params: Sequence[Param], program: Program) -> Callable:
    """As :func:`native_entry`, for the tape interpreter running ``program`` (its
    arrays are constants of the function)."""
    names = [f"a{k}" for k in range(len(params))]
    run, check = jit_module().interpreter()
    p = program
    ns: dict[str, Any] = {"np": np, "run": run, "check": check, "opcodes": p.opcodes}
    ns.update(arg0=p.arg0, arg1=p.arg1, init=p.init, inputs=p.inputs, outputs=p.outputs)
    ns["guards"] = p.guards
    body, start = ["vals = init.copy()"], 0
    for name, prm in zip(names, params):
        if prm.size is None:
            body.append(f"vals[inputs[{start}]] = {name}")
            start += 1
        else:
            body.append(f"vals[inputs[{start}:{start + prm.size}]] = {name}")
            start += prm.size
    body += [
        "run(opcodes, arg0, arg1, vals)",
        "out[:] = vals[outputs]",
        "return check(guards, vals)" if len(p.guards) else "return True",
    ]
    return _entry(names, body, ns)


def _entry(names: list[str], body: list[str], ns: dict[str, Any]) -> Callable:
    source = f"def entry({', '.join([*names, 'out'])}):\n" + "".join(f"    {ln}\n" for ln in body)
    # (never cached by Numba: it links in the code it calls, which its text does not show)
    return jit_module().njit(loader.load(source, "numba_entry", ns).entry)
