"""``ad.export(..., target="c")``: a specialisation as one C99 file (``<math.h>`` only).

The file begins with its header (a comment documenting the signature, where
each part of the result lies in ``out`` and what each guard's number means,
then the prototype ``int name(inputs..., double* out)``), which
:func:`c_header` cuts out. The code is printed by the one renderer
(``render.C99``) from what adcompile compiled: folded code from its loop
program, so loops stay loops (its work array is the function's own, on the
stack, or ``static`` when large; its per-repetition constants a ``static
const`` array); straight-line code from its tape; the tape interpreter's tape
straight-line; a Jacobian or Hessian made one basis vector at a time as a loop
around the code of one.

Each kind of compiled code is told apart by the compiled program itself
(``program.visit``: :class:`_CCode`); the guards say what they mean
in the header (:func:`guard_messages`).
"""

from __future__ import annotations

import linecache
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend.program import CompiledProgram
from ..emit.codegen import print_tape
from ..emit.render import C99, Function, GuardInfo, short_where
from ..ir.outputs import OutLayout, size
from ..ir.tape import Param

#: The line that ends the header part of an exported C file (see :func:`c_header`).
HEADER_END = "/* ---- end of header ---- */"
#: A work array of at most this many doubles lives on the stack (256 KiB); a larger
#: one is ``static`` (the function is then not reentrant, and its header says so).
STACK_WORK = 32_768


def _where(where: str) -> str:
    """``file:line`` (the file by its base name) and the line's text, when the file can be
    read."""
    m = re.match(r"(.*):(\d+)$", where or "")
    if not m:
        return where or "an unrecorded line"
    text = linecache.getline(m[1], int(m[2])).strip()
    short = short_where(where)
    return f"{short}: {text}" if text else short


def guard_messages(guards: Sequence[GuardInfo]) -> list[str]:
    """One line per guard, in the order of their numbers: the comparison and the line."""
    return [
        f"{g.condition} was {g.expected} when traced, at {_where(g.where)}"
        for g in sorted(guards, key=lambda g: g.number)
    ]


def c_header(source: str) -> str:
    """The header part of an exported C file (its documentation and prototype)."""
    head = source.split(HEADER_END)[0]
    return head + HEADER_END + "\n"


def _comment(text: str) -> str:
    """``text`` as a C comment block, wrapped."""
    lines = textwrap.wrap(text.replace("*/", "* /"), 76, break_on_hyphens=False)
    return "/*\n" + "".join(f" * {line}\n" for line in lines) + " */\n"


@dataclass
class _CCode:
    """Each kind of compiled code as C99 (a ``program.ProgramVisitor``): ``(code, its
    guards, notes for the header)``, the function ``int fname(params..., double* out)``
    (``static`` where another calls it)."""

    params: list[Param]
    fname: str
    doc: str
    static: bool = False

    def straight_line(self, program: CompiledProgram) -> tuple[str, list[GuardInfo], list[str]]:
        printed = print_tape(program.tape, self.fname, self.params, self.doc, C99)
        return ("static " if self.static else "") + printed.text, printed.guards, []

    def interpreter(self, program: CompiledProgram, opcodes: Any) -> tuple:
        return self.straight_line(program)  # (its tape, straight-line)

    def folded(self, program: CompiledProgram, loops: Any, lead: tuple) -> tuple:
        code = loops.printed(C99)
        work, columns = int(code.work_size), code.columns
        local, arrays, notes = {}, ["out"], []
        if len(columns):
            items = ", ".join(C99.lit(float(x)) for x in columns)
            local["c"] = f"static const double c[{len(columns)}] = {{{items}}}"
            arrays.insert(0, "c")
        if work:
            big = work > STACK_WORK
            local["v"] = f"{'static ' if big else ''}double v[{work}]"
            arrays.insert(0, "v")
            if big:
                notes.append(
                    f"Not reentrant: its work array of {work} doubles is static (larger "
                    f"than {STACK_WORK}, kept off the stack); do not call it from two "
                    "threads at once."
                )
        params = code.function.params
        function = Function(self.fname, params, arrays, self.doc, local=local, static=self.static)
        return _comment(loops.explanation) + code.printed_as(function), code.guards, notes

    def basis(self, program: CompiledProgram, one: CompiledProgram, m: int, dest: Any) -> tuple:
        inner = _CCode([*self.params, one.params[-1]], f"{self.fname}_one", self.doc, True)
        code, guards, notes = one.visit(inner)
        return code + "\n" + _c_basis(dest, self.params, self.fname), guards, notes


def c_module(spec: Any, params: list[Param], fname: str, doc: str, what: str) -> str:
    """The C file of ``spec`` (a specialisation traced at exactly the example's shapes):
    its header, then its code."""
    code, guards, notes = spec.compiled.visit(_CCode(list(params), fname, doc))
    sig = [f"double {p.name}" if p.size is None else f"const double* {p.name}" for p in params]
    proto = f"int {fname}({', '.join([*sig, 'double* out'])});"
    doc_lines = [
        f"{what}, exported by adcompile as C99 (only <math.h>).",
        "",
        proto,
        "",
        "Arguments: a scalar is a double; an array is a const double* to its",
        "elements in C (row-major) order:",
    ]
    doc_lines += [
        f"  {p.name}: " + ("double" if p.size is None else f"{p.size} doubles") for p in params
    ]
    doc_lines += ["", f"out: {spec.out.n_out} doubles the function writes:"]
    doc_lines += [f"  {line}" for line in _layout_lines(spec.out)]
    doc_lines += [
        "",
        "Returns 0, or k when guard k fails (the inputs take another branch",
        "than the traced one; out then means nothing):",
    ]
    messages = guard_messages(guards)
    doc_lines += [f"  {k}: {m}" for k, m in enumerate(messages, 1)] or ["  (no guards)"]
    for note in notes:
        doc_lines += ["", *textwrap.wrap(note, 72)]
    comment = "/*\n" + "".join(f" * {ln}".rstrip() + "\n" for ln in doc_lines).replace("*/", "* /")
    guard = f"ADCOMPILE_{fname.upper()}_H"
    header = f"{comment} */\n#ifndef {guard}\n#define {guard}\n\n{proto}\n\n#endif\n{HEADER_END}\n"
    return header + "\n#include <math.h>\n\n" + code


def _layout_lines(layout: OutLayout) -> list[str]:
    """Where each part of the result lies in ``out``, in words."""
    paths: dict[int, str] = {}

    def walk(tree: Any, path: str) -> None:
        if type(tree) is tuple and len(tree) == 2 and tree[0] in ("tuple", "list"):
            for k, sub in enumerate(tree[1]):
                walk(sub, f"{path}[{k}]")
        else:
            paths[tree] = path or "the result"

    walk(layout.tree, "")
    lines = []
    for k, (s, sh) in enumerate(layout.parts):
        where = f"out[{s}]" if sh is None else f"out[{s}..{s + size(sh) - 1}]"
        shape = "a scalar" if sh is None else f"shape {tuple(sh)}, row-major"
        path = paths[k] if paths[k] == "the result" else "result" + paths[k]
        lines.append(f"{where}: {path} ({shape})")
    return lines


def _c_basis(dest: np.ndarray, params: list[Param], fname: str) -> str:
    """The C loop over basis vectors around ``fname_one``: entry ``i`` of the result for
    ``e_j`` goes to ``out[dest[j, i]]``."""
    m, k = dest.shape
    rows = ",\n".join("    {" + ", ".join(str(int(x)) for x in row) + "}" for row in dest)
    args = "".join(f"{p.name}, " for p in params)
    sig = [f"double {p.name}" if p.size is None else f"const double* {p.name}" for p in params]
    return (
        f"static const long {fname}_dest[{m}][{k}] = {{\n{rows}\n}};\n\n"
        f"int {fname}({', '.join([*sig, 'double* out'])}) {{\n"
        f"    double e[{m}] = {{0.0}};\n"
        f"    double res[{k}];\n"
        f"    for (int j = 0; j < {m}; j++) {{  /* one basis vector e_j at a time */\n"
        "        e[j] = 1.0;\n"
        f"        int s = {fname}_one({args}e, res);\n"
        "        if (s) return s;\n"
        "        e[j] = 0.0;\n"
        f"        for (int i = 0; i < {k}; i++) out[{fname}_dest[j][i]] = res[i];\n"
        "    }\n"
        "    return 0;\n"
        "}\n"
    )
