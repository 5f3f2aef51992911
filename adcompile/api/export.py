"""``ad.export``: derivative code to take away, as a standalone module.

``export(f, *example_args, transform=..., target=...)`` compiles the
transform for the example arguments as adcompile does, then prints the code
of that specialisation with what it needs around it:

- ``target="python"``: a module importing only ``math`` and ``numpy`` (and
  ``numba`` with ``jit=True``), defining one function named after ``f`` with
  its parameters. It checks the arguments' shapes, runs the generated kernel
  and returns what the adcompile transform returns. Folded loops stay loops;
  their per-repetition constants and work-array size are literals.
- ``target="c"``: one C99 function using only ``<math.h>``, ``int
  name(inputs..., double* out)``, returning 0 or the number of the guard that
  failed, printed from what adcompile compiled (loops stay loops:
  ``export_c``). The file begins with its header (a comment documenting the
  signature and where each part of the result lies in ``out``, then the
  prototype), which :func:`c_header` cuts out; with ``path`` it is also
  written beside the ``.c`` file as ``.h``.

Both are printed by the one printer (``emit.render``) from what adcompile
compiled: straight-line code from its tape, folded code from its loop program
(loops stay loops in C as in Python), the tape interpreter's program as data
(Python; C prints its tape straight-line).

Guards: each kernel returns a status, 0 when every guard recorded while
tracing holds, else the guard's number (1-based), which the Python module
turns into a ValueError naming the comparison and the user's source line.
The numbers and what they mean come from the printer, as data
(``render.GuardInfo``). Exported code names that line by its file's base name
(``model.py:12``), never the absolute path: it does not depend on where it
was made.

The exported function is named after ``f``, made a valid identifier that is
not a keyword, a builtin or a name the module uses (a lambda's is
``lambda_``).
"""

from __future__ import annotations

import builtins
import keyword
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backend.program import CompiledProgram
from ..emit.codegen import guard_records, print_tape
from ..emit.render import PYTHON, literal
from ..ir.outputs import OutLayout, size
from ..ir.tape import Param
from ..loops.ir import at_length
from .export_c import HEADER_END, c_header, c_module, guard_messages

__all__ = ["export", "exported_name", "c_header", "HEADER_END", "TRANSFORMS", "TARGETS"]

TRANSFORMS = ("value", "grad", "value_and_grad", "jacobian", "hessian", "hvp", "jvp")
TARGETS = ("python", "c")


def export(
    f: Callable,
    *example_args: Any,
    transform: str = "value_and_grad",
    target: str = "python",
    path: str | Path | None = None,
    jit: bool = False,
    argnums: int | Sequence[int] = 0,
) -> str:
    """The source of a standalone module computing ``transform`` of ``f`` for
    arguments of the example arguments' shapes (and the branches they take);
    written to ``path`` if given (for C, the header beside it as ``.h``).

    ``transform``: one of :data:`TRANSFORMS` (``jvp`` takes the primals then
    the tangents; ``hvp`` takes ``x, v, *rest``); ``argnums`` for the
    gradient, Jacobian and Hessian. ``target``: ``"python"`` or ``"c"``.
    ``jit=True`` (Python) compiles the kernel with Numba in the module.
    """
    if transform not in TRANSFORMS:
        raise ValueError(
            f"transform={transform!r}: choose one of {', '.join(map(repr, TRANSFORMS))}"
        )
    if target not in TARGETS:
        raise ValueError(f"target={target!r}: choose one of {', '.join(map(repr, TARGETS))}")
    t = _transform(f, transform, argnums)
    t.array_level = False  # (exported code is printed from the element-wise tape)
    t.expand = True  # (np.zeros written into: its array program, in elements)
    spec, key = t.spec_for(example_args)
    names = t.arg_names(len(key))
    params = t.params_for(key)
    hidden = list(t.captures.values())
    fname, doc = t.compiled_name, t.compiled_doc
    what = f"{transform} of {t.fun_name}"
    if target == "c":
        if hidden:
            raise NotImplementedError(
                f"{t.fun_name}() reads {t.captures.hidden[0].what} from outside its arguments; "
                "the C export takes only the arguments: pass that data as an argument"
            )
        if spec.compiled.facts.generic:  # C needs the tape of exactly this length
            spec = t.traced_spec(*example_args)
        text = c_module(spec, params, fname, doc, what)
    else:
        kernel = _python_kernel(spec.compiled, params, fname, doc)
        n_vis = len(key) - len(hidden)
        name = exported_name(t.fun_name, {kernel.name, *kernel.helpers})
        text = _python_module(kernel, spec.out, name, names, key, n_vis, hidden, what, jit)
    if path is not None:
        Path(path).write_text(text)
        if target == "c":
            Path(path).with_suffix(".h").write_text(c_header(text))
    return text


def _transform(f: Callable, transform: str, argnums: Any) -> Any:
    from . import derived as transforms
    from . import transform as api

    if isinstance(f, api.Transformed):
        raise TypeError("export() takes the plain function, not a transform of it")
    if transform == "value":
        return api.jit(f)
    if transform in ("grad", "value_and_grad"):
        return api.Transformed(f, argnums, transform)
    if transform in ("jacobian", "hessian"):
        return transforms.Derived(f, argnums, transform)
    return transforms.Derived(f, 0, transform)


# ------------------------------------------------------------------ kernels


@dataclass
class Kernel:
    """Generated code with a status: ``name(*lead, *args, *extras, out) -> int``.

    ``extras`` are ``(parameter, expression)``: what the wrapper passes besides
    the arguments (a work array made per call, constants of ``consts``).
    ``messages[k - 1]`` describes guard ``k``.
    """

    name: str
    defs: str
    messages: list[str]
    extras: list[tuple[str, str]] = field(default_factory=list)
    consts: list[str] = field(default_factory=list)
    lead: list[str] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)  # functions the kernel calls

    def call(self, args: Sequence[str], out: str, extras: Sequence[str] | None = None) -> str:
        ex = [e for e, _ in self.extras] if extras is None else list(extras)
        return f"{self.name}({', '.join([*self.lead, *args, *ex, out])})"


#: Names an exported Python module uses itself, besides its kernels' names.
MODULE_NAMES = frozenset({"math", "numbers", "np", "numba", *dir(builtins)})


def exported_name(name: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """``name`` as the name of an exported function: a valid identifier (other characters
    become ``_``; ``f_`` in front of a leading digit) that is not a keyword, nor a builtin or
    a name the module uses (``MODULE_NAMES``, ``taken``): those get a ``_`` at the end, as
    ``lambda`` -> ``lambda_``."""
    text = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "f"
    if not text.isidentifier():
        text = "f_" + text
    while keyword.iskeyword(text) or text in MODULE_NAMES or text in taken:
        text += "_"
    return text


def _comment(text: str) -> str:
    """``text`` as a Python comment, wrapped as generated modules' header comments are."""
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, 76, break_on_hyphens=False))


def _array_literal(a: np.ndarray, dtype: str = "float64") -> str:
    a = np.asarray(a)
    if a.size == 0:
        return f"np.zeros({a.shape!r}, dtype=np.{dtype})"
    items = ", ".join(literal(float(x)) if dtype == "float64" else str(int(x)) for x in a.ravel())
    shape = "" if a.ndim == 1 else f".reshape({a.shape!r})"
    return f"np.array([{items}], dtype=np.{dtype}){shape}"


def _python_kernel(
    compiled: CompiledProgram, params: Sequence[Param], fname: str, doc: str
) -> Kernel:
    """The kernel of compiled code of any kind, as Python source with a status."""
    return compiled.visit(_PythonKernels(params, fname, doc))


_NO_GUARDS = "np.zeros((0, 4), dtype=np.int64)"


@dataclass
class _PythonKernels:
    """Each kind of compiled code as a :class:`Kernel` (a ``program.ProgramVisitor``)."""

    params: Sequence[Param]
    fname: str
    doc: str

    def straight_line(self, program: CompiledProgram) -> Kernel:
        printed = print_tape(program.tape, self.fname, self.params, self.doc, PYTHON)
        return Kernel(self.fname, printed.text, guard_messages(printed.guards))

    def folded(self, program: Any, loops: Any, lead: tuple) -> Kernel:
        code = loops.printed(PYTHON)  # (the guards numbered, and described, by the printer)
        work = at_length(code.work_size, lead[0]) if lead else code.work_size  # (generic: at n)
        cols = f"_COLUMNS_{self.fname}"
        extras = [(f"_work_{self.fname}", f"np.empty({max(int(work), 1)})"), (cols, cols)]
        literal = [f"{cols} = {_array_literal(code.columns)}"]
        defs = _comment(loops.explanation) + code.text
        messages = guard_messages(code.guards)
        return Kernel(self.fname, defs, messages, extras, literal, [str(n) for n in lead])

    def basis(self, program: Any, one: CompiledProgram, m: int, dest: np.ndarray) -> Kernel:
        """A loop over the ``m`` basis vectors around the kernel of ``one`` (a Jacobian or
        Hessian); entry ``i`` of the result for ``e_j`` goes to ``out[dest[j, i]]``."""
        fname, params = self.fname, self.params
        inner = _python_kernel(one, [*params, Param("e", m)], f"{fname}_one", self.doc)
        k = dest.shape[1]
        args = [p.name for p in params]
        extras = [e for e, _ in inner.extras]
        sig = ", ".join([*args, *extras, "_DEST", "out"])
        loop = (
            f"def {fname}({sig}):\n"
            f"    _e = np.zeros({m})\n"
            f"    _res = np.empty({k})\n"
            f"    for _j in range({m}):  # one basis vector e_j at a time\n"
            "        _e[_j] = 1.0\n"
            f"        _s = {inner.call([*args, '_e'], '_res')}\n"
            "        if _s:\n"
            "            return _s\n"
            "        _e[_j] = 0.0\n"
            f"        for _i in range({k}):\n"
            "            out[_DEST[_j, _i]] = _res[_i]\n"
            "    return 0\n"
        )
        const = f"_DEST_{fname}"
        return Kernel(
            fname,
            inner.defs + "\n\n" + loop,
            inner.messages,
            [*inner.extras, ("_DEST", const)],
            [*inner.consts, f"{const} = {_array_literal(dest, 'int64')}"],
            [],
            [*inner.helpers, inner.name],
        )

    def interpreter(self, program: CompiledProgram, p: Any) -> Kernel:
        """The tape interpreter with its opcode program ``p`` as literals; ``check``
        returns a status."""
        fname, params = self.fname, self.params
        from ..emit.codegen import interpreter_source

        run = (
            interpreter_source()
            .split("\n\n\ndef check")[0]
            .replace("def run(", f"def {fname}_run(")
        )
        cmps = ["<", "<=", ">", ">=", "==", "!="]
        args = ", ".join(p.name for p in params)
        lines = [f"def {fname}({args}{', ' if args else ''}_P, out):"]
        lines.append("    opcodes, arg0, arg1, init, inputs, outputs, guards = _P")
        lines.append("    vals = init.copy()")
        start = 0
        for prm in params:
            n = prm.size or 1
            lines.append(
                f"    vals[inputs[{start}]] = {prm.name}"
                if prm.size is None
                else f"    vals[inputs[{start}:{start + n}]] = {prm.name}"
            )
            start += n
        lines.append(f"    {fname}_run(opcodes, arg0, arg1, vals)")
        lines.append("    for k in range(guards.shape[0]):")
        lines.append("        a = vals[guards[k, 1]]")
        lines.append("        b = vals[guards[k, 2]]")
        lines.append("        c = guards[k, 0]")
        for code, cmp in enumerate(cmps):
            lines.append(f"        {'if' if code == 0 else 'elif'} c == {code}:")
            lines.append(f"            r = a {cmp} b")
        lines.append("        else:")
        lines.append("            r = False")
        lines.append("        if r != (guards[k, 3] == 1):")
        lines.append("            return k + 1")
        lines.append("    for k in range(outputs.shape[0]):")
        lines.append("        out[k] = vals[outputs[k]]")
        lines.append("    return 0")
        const = f"_PROGRAM_{fname}"
        arrays = [
            _array_literal(p.opcodes, "int64"),
            _array_literal(p.arg0, "int64"),
            _array_literal(p.arg1, "int64"),
            _array_literal(p.init),
            _array_literal(p.inputs, "int64"),
            _array_literal(p.outputs, "int64"),
            _array_literal(p.guards, "int64")
            if len(p.guards)
            else "np.zeros((0, 4), dtype=np.int64)",
        ]
        return Kernel(
            fname,
            run + "\n\n" + "\n".join(lines) + "\n",
            guard_messages(guard_records(program.tape, self.params)),
            [("_P", const)],
            [f"{const} = (\n" + "".join(f"    {a},\n" for a in arrays) + ")"],
            [],
            [f"{fname}_run"],
        )


# ------------------------------------------------------------------ the Python module


def result_code(layout: OutLayout, out: str = "out") -> str:
    """The expression that rebuilds the transform's result from ``out``."""
    parts = [
        f"{out}.item({s})" if sh is None else f"{out}[{s}:{s + size(sh)}].reshape({sh!r})"
        for s, sh in layout.parts
    ]

    def walk(tree: Any) -> str:
        if type(tree) is tuple and len(tree) == 2 and tree[0] in ("tuple", "list"):
            items = [walk(t) for t in tree[1]]
            if tree[0] == "list":
                return f"[{', '.join(items)}]"
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        return parts[tree]

    return walk(layout.tree)


_HELPERS = '''
def _array(fname, name, value, shape):
    """``value`` as a flat float64 array, after checking its shape."""
    if isinstance(value, bool) or not isinstance(value, (np.ndarray, list, tuple)):
        got = np.shape(value) if isinstance(value, numbers.Real) else type(value).__name__
        raise ValueError(f"argument {name} of {fname}(): expected shape {shape}, got {got}")
    a = np.asarray(value, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"argument {name} of {fname}(): expected shape {shape}, got {a.shape}")
    return np.ascontiguousarray(a).ravel()


def _scalar(fname, name, value):
    """``value`` as a float, after checking it is a scalar."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "fiu":
        return float(value)
    got = np.shape(value) if isinstance(value, (np.ndarray, list, tuple)) else type(value).__name__
    raise ValueError(f"argument {name} of {fname}(): expected a scalar, shape (), got {got}")


def _fail(fname, status):
    """A guard failed: these inputs take another branch than the exported code."""
    what = _GUARDS[status - 1]
    raise ValueError(
        f"{fname}(): these inputs take another branch than the exported one "
        f"(guard {status} failed: {what}); export again at inputs that take it"
    )
'''


def _python_module(
    kernel: Kernel,
    layout: OutLayout,
    name: str,
    names: list[str],
    key: tuple,
    n_vis: int,
    hidden: list[Any],
    what: str,
    jit: bool,
) -> str:
    shapes = ", ".join(
        f"{n}: {'float' if s is None else 'float64' + str(list(s))}"
        for n, s in zip(names[:n_vis], key)
    )
    head = [
        f"# {what}, exported by adcompile for arguments {shapes}.",
        "# Standalone: it needs only math and numpy"
        + (" and numba." if jit else ".")
        + " Generated code: edit at your own risk.",
        "import math",
        "import numbers",
        "",
        "import numpy as np",
    ]
    if jit:
        head.append("import numba")
    consts = list(kernel.consts)
    args = []
    for k, (nm, s) in enumerate(zip(names, key)):
        if k < n_vis:
            args.append(nm)
            continue
        const = f"_HIDDEN_{k}"  # data f reads from outside its arguments, as exported
        value = np.asarray(hidden[k - n_vis], dtype=np.float64)
        consts.append(
            f"{const} = {literal(float(value))}"
            if s is None
            else f"{const} = {_array_literal(value.ravel())}"
        )
        args.append(const)
    consts.append("_GUARDS = (\n" + "".join(f"    {m!r},\n" for m in kernel.messages) + ")")
    body = [kernel.defs.rstrip()]
    if jit:
        numba_lines = [
            f"{h} = numba.njit(cache=False, error_model='numpy')({h})" for h in kernel.helpers
        ]
        numba_lines.append(
            f"{kernel.name} = numba.njit(cache=False, error_model='numpy')({kernel.name})"
        )
        body.append("\n".join(numba_lines))
    public = names[:n_vis]
    doc = (
        f'    """{what}: returns what adcompile\'s transform returns, for arguments '
        f"of these shapes ({shapes or 'none'}).\n\n"
        "    Raises ValueError for other shapes, or for inputs that take another branch.\n"
        '    """'
    )
    wrapper = [f"def {name}({', '.join(public)}):", doc]
    for nm, s in zip(public, key):
        if s is None:
            wrapper.append(f"    {nm} = _scalar({name!r}, {nm!r}, {nm})")
        else:
            wrapper.append(f"    {nm} = _array({name!r}, {nm!r}, {nm}, {tuple(s)!r})")
    wrapper.append(f"    out = np.empty({max(layout.n_out, 1)})")
    extras = [e for _, e in kernel.extras]
    wrapper.append(f"    status = {kernel.call(args, 'out', extras)}")
    wrapper += ["    if status:", f"        _fail({name!r}, status)"]
    wrapper.append(f"    return {result_code(layout)}")
    parts = [
        "\n".join(head),
        "\n".join(consts),
        *body,
        _HELPERS.strip(),
        "\n".join(wrapper),
    ]
    return "\n\n\n".join(parts) + "\n"
