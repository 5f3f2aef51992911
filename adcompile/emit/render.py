"""One printer for generated code: statements in, source text out, a table per target.

The printers of programs (``codegen.print_tape`` for a tape as straight-line
code, ``loopgen`` for the loop IR) decide what to compute and say it as
statements at a depth (:class:`Assign`, :class:`For`, :class:`Guard` ...),
building their expressions with the target's table (:class:`Target`: an op's
template, a literal, a conditional). :func:`render` prints those statements as
one function in the target's language. The targets:

- ``NUMBA``: Python for Numba; a guard that fails returns False, the end True;
- ``PYTHON``: plain Python for ``ad.export``; guard ``k`` returns ``k``, the end 0;
- ``C99``: C with ``<math.h>`` only, for ``ad.export``; the same statuses.

Guards are data: each is printed with the number it returns (the printers
number them) and described by a :class:`GuardInfo` (its number, the comparison,
what it was when traced, the user's line), which the printers return beside the
text. Exported targets name the user's file by its base name (``model.py:12``).
"""

from __future__ import annotations

import math
import ntpath
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..ir.ops import Op
from ..ir.tape import Param


@dataclass(frozen=True)
class GuardInfo:
    """One guard as printed: the ``number`` code of a status target returns when it
    fails, the comparison (``x[7] > 0.0``), the answer it gave when traced and the
    user's ``file:line`` that made it."""

    number: int
    condition: str
    expected: bool
    where: str = ""


# ------------------------------------------------------------------ targets

#: How each target spells what the printers say: statement forms, expression forms,
#: the op template attribute it reads, and its constants.
PYTHON_SYNTAX = {
    "assign": "{target} {op}= {expr}",
    "for": "for {var} in range({stop}):",
    "for_down": "for {var} in range({start}, -1, -1):",
    "if": "if {cond}:",
    "comment": "# {text}",
    "inline": "  # {text}",
    "return": "return {value}",
    "continue": "continue",
    "pass": "pass",
    "fill": "{array}[{start}:{stop}] = {value}",
    "select": "{a} if {cond} else {b}",
    "not": "not ({cond})",
    "is": "{cond}",
    "guard": "if {test}:{note}\n    return {value}",
    "flag": "{flag} = {start}{note}",
    "flag_first": "{flag} += ({flag} == 0) * {number} * ({test}){note}",
    "flag_and": "{flag} &= {holds}{note}",
    "flag_test": "if {flag}:\n    return {value}",
    "flag_test_not": "if not {flag}:\n    return {value}",
    "nan": "math.nan",
    "inf": "math.inf",
    "template": "code",
}
C_SYNTAX = {
    "assign": "{target} {op}= {expr};",
    "for": "for (long {var} = 0; {var} < {stop}; {var}++) {{",
    "for_down": "for (long {var} = {start}; {var} >= 0; {var}--) {{",
    "if": "if ({cond}) {{",
    "comment": "/* {text} */",
    "inline": "  /* {text} */",
    "return": "return {value};",
    "continue": "continue;",
    "pass": "",
    "fill": "for (long k_ = {start}; k_ < {stop}; k_++) {array}[k_] = {value};",
    "select": "({cond} ? {a} : {b})",
    "not": "!({cond})",
    "is": "({cond})",
    "guard": "if ({test}) return {value};{note}",
    "flag": "int {flag} = {start};{note}",
    "flag_first": "{flag} += ({flag} == 0) * {number} * ({test});{note}",
    "flag_test": "if ({flag}) return {value};",
    "nan": "NAN",
    "inf": "INFINITY",
    "template": "c",
}


@dataclass(frozen=True)
class Target:
    """A language and calling convention generated code is printed in (see the
    module doc): its ``syntax`` table, whether guards return numbers (``status``),
    and what the end and a failed guard return."""

    name: str
    syntax: dict[str, str] = field(repr=False)
    status: bool
    success: str
    failure: str
    short_paths: bool  # the user's file named by its base name (exported code)

    @property
    def c(self) -> bool:
        return self.syntax is C_SYNTAX

    def op(self, op: Op, args: Sequence[str]) -> str:
        """``op`` applied to the operands ``args``, from its template for this target."""
        template = getattr(op, self.syntax["template"])
        if template is None:
            raise NotImplementedError(no_c_form(op))
        return template.format(*args)

    def lit(self, value: float) -> str:
        """A float as a literal, a negative one parenthesised (``(-2.0) ** x``: Python
        reads ``-2.0 ** x`` as ``-(2.0 ** x)``; C would not parse ``--1.0``). A float
        subclass with its own text (``loops.ir.NFloat``, a number in the batch length
        ``n``) is printed as that text."""
        expr = getattr(value, "expr", None)
        if expr is not None:  # (loops.ir.NFloat)
            return expr
        if value != value:
            return self.syntax["nan"]
        if value in (math.inf, -math.inf):
            text = ("-" if value < 0 else "") + self.syntax["inf"]
            return f"({text})" if value < 0 else text
        text = repr(float(value))
        return f"({text})" if text.startswith("-") else text

    def select(self, cond: str, a: str, b: str, paren: bool = False) -> str:
        """``a`` where ``cond`` holds, else ``b`` (parenthesised with ``paren``)."""
        text = self.syntax["select"].format(cond=cond, a=a, b=b)
        return f"({text})" if paren and not self.c else text

    def negate(self, cond: str) -> str:
        return self.syntax["not"].format(cond=cond)

    def where(self, where: str) -> str:
        """The user's ``file:line`` as this target prints it."""
        return short_where(where) if self.short_paths else where


NUMBA = Target("numba", PYTHON_SYNTAX, False, "True", "False", False)
PYTHON = Target("python", PYTHON_SYNTAX, True, "0", "", True)
C99 = Target("c", C_SYNTAX, True, "0", "", True)


def no_c_form(op: Op) -> str:
    """The message of a C export stopped by an op without a C template."""
    return (
        f"op {op.name!r} has no C form, so the C export cannot print it: define it with "
        "ad.primitive(..., c=...) (or an ad.Function's class attribute c), a C99 template "
        "over <math.h> and its operands ({0}, {1}), such as c='erf({0})'"
    )


def literal(value: float, lang: str = "python") -> str:
    """A float as a literal of Python (``math.inf``) or, with ``lang="c"``, C (``INFINITY``)."""
    return (C99 if lang == "c" else NUMBA).lit(value)


def strip_parens(expr: str) -> str:
    """``(a + b)`` -> ``a + b`` when the outer parentheses enclose everything."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for k, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and k < len(expr) - 1:
            return expr
    return expr[1:-1]


def base_name(path: str) -> str:
    """The last part of a POSIX or Windows path (``model.py``); ``<stdin>`` as it is."""
    return ntpath.basename(posixpath.basename(path)) or path


def short_where(where: str) -> str:
    """``file:line`` with the file's base name (``model.py:12``)."""
    m = re.match(r"(.*):(\d+)$", where or "")
    return f"{base_name(m[1])}:{m[2]}" if m else where


# ------------------------------------------------------------------ statements


@dataclass
class Assign:
    """``target = expr`` (``op="+"``: ``+=``). A local it is the first assignment of is
    declared in C as ``type``. ``noop``: printed as ``pass`` (a write that turned out
    to have nothing to do)."""

    target: str
    expr: str
    op: str = ""
    type: str = "double"
    noop: bool = False


@dataclass
class Fill:
    """``array[start:stop] = value``."""

    array: str
    start: Any
    stop: Any
    value: str


@dataclass
class For:
    """A loop over ``var`` in ``range(trips)``, or with ``down`` from ``trips - 1``
    down to 0; the statements one level deeper that follow are its body."""

    var: str
    trips: Any
    down: bool = False


@dataclass
class If:
    """A branch taken where ``cond`` holds (``note``: a comment on the line); its body
    follows one level deeper."""

    cond: str
    note: str = ""


@dataclass
class Comment:
    text: str


@dataclass
class Return:
    """Return ``value``; None: the target's success."""

    value: str | None = None


@dataclass
class Continue:
    pass


@dataclass
class Guard:
    """Return the failure unless ``cond`` is ``expected``: the target's failure, or
    ``number`` (``number + var`` in a loop of guards), or ``fail`` where given."""

    cond: str
    expected: bool
    where: str
    number: int
    var: str | None = None
    fail: str | None = None


@dataclass
class Flag:
    """Guards checked together in one flag, without a branch each (a chain of ``if``
    blocks makes Numba's SSA pass recurse once per block): ``ok = True`` (status
    targets: ``flag = 0``, the number of the first guard that fails), then a
    :class:`FlagGuard` per guard, then :class:`FlagTest`. ``note``: a comment on the
    line."""

    flag: str
    note: str = ""


@dataclass
class FlagGuard:
    flag: str
    cond: str
    expected: bool
    where: str
    number: int


@dataclass
class FlagTest:
    """Return the failure (``fail``, where given) when a guard of the flag failed."""

    flag: str
    fail: str | None = None


@dataclass
class Function:
    """What :func:`render` prints around the statements: ``name(*lead, *params,
    *arrays)`` with ``doc``. ``lead`` are integers (the batch length n), ``arrays``
    float arrays after the parameters (the work array ``v``, the constants ``c``,
    ``out``). In C, ``local`` arrays are the function's own (name -> its declaration,
    such as ``double v[24]``) rather than arguments, and ``consts`` are read-only."""

    name: str
    params: Sequence[Param]
    arrays: Sequence[str] = ("out",)
    doc: str = ""
    lead: Sequence[str] = ()
    local: dict[str, str] = field(default_factory=dict)
    consts: frozenset[str] = frozenset({"c"})
    static: bool = False


Stmt = Any  # one of the statement classes above
Line = tuple[int, Stmt]  # (depth, statement): depth 1 is the function's body


# ------------------------------------------------------------------ rendering


def guard_note(t: Target, cond: str, expected: bool, where: str) -> str:
    """The comment on a guard: ``guard: x > 0.0 was True at model.py:3``."""
    return f"guard: {cond} was {expected}" + (f" at {t.where(where)}" if where else "")


def _statement(t: Target, s: Stmt) -> list[str]:
    """One statement as lines of the target (relative indentation in the text)."""
    sx = t.syntax
    kind = type(s)
    if isinstance(s, Assign):
        if s.noop:
            return [sx["pass"]]
        return [sx["assign"].format(target=s.target, op=s.op, expr=s.expr)]
    if kind is Fill:
        return [sx["fill"].format(array=s.array, start=s.start, stop=s.stop, value=s.value)]
    if kind is For:
        if s.down:
            return [sx["for_down"].format(var=s.var, start=s.trips - 1)]
        return [sx["for"].format(var=s.var, stop=s.trips)]
    if kind is If:
        note = sx["inline"].format(text=_comment_text(t, s.note)) if s.note else ""
        return [sx["if"].format(cond=s.cond) + note]
    if kind is Comment:
        return [sx["comment"].format(text=_comment_text(t, s.text))]
    if kind is Return:
        return [sx["return"].format(value=t.success if s.value is None else s.value)]
    if kind is Continue:
        return [sx["continue"]]
    if kind is Guard:
        return _guard(t, s)
    if kind in (Flag, FlagGuard, FlagTest):
        return _flag(t, s)
    raise TypeError(f"not a statement: {s!r}")


def _comment_text(t: Target, text: str) -> str:
    return text.replace("*/", "* /") if t.c else text


def _failure(t: Target, s: Guard) -> str:
    if s.fail is not None:
        return s.fail
    if not t.status:
        return t.failure
    return f"{s.number} + {s.var}" if s.var else str(s.number)


def _guard(t: Target, s: Guard) -> list[str]:
    sx = t.syntax
    note = sx["inline"].format(text=_comment_text(t, guard_note(t, s.cond, s.expected, s.where)))
    test = t.negate(s.cond) if s.expected else sx["is"].format(cond=s.cond)
    return sx["guard"].format(test=test, note=note, value=_failure(t, s)).split("\n")


def _flag(t: Target, s: Stmt) -> list[str]:
    sx = t.syntax
    if type(s) is Flag:
        note = sx["inline"].format(text=s.note) if s.note else ""
        return [sx["flag"].format(flag=s.flag, start="0" if t.status else "True", note=note)]
    if type(s) is FlagGuard:
        text = _comment_text(t, guard_note(t, s.cond, s.expected, s.where))
        note = sx["inline"].format(text=text)
        if t.status:  # no branch: the flag takes k if it is still 0 and guard k fails
            test = t.negate(s.cond) if s.expected else s.cond
            line = sx["flag_first"].format(flag=s.flag, number=s.number, test=test, note=note)
            return [line]
        holds = s.cond if s.expected else t.negate(s.cond)
        return [sx["flag_and"].format(flag=s.flag, holds=holds, note=note)]
    if t.status:  # FlagTest: the number of the guard that failed
        return sx["flag_test"].format(flag=s.flag, value=s.fail or s.flag).split("\n")
    return sx["flag_test_not"].format(flag=s.flag, value=s.fail or t.failure).split("\n")


def _header(t: Target, f: Function) -> list[str]:
    if not t.c:
        names = [*f.lead, *(p.name for p in f.params), *f.arrays]
        lines = [f"def {f.name}({', '.join(names)}):"]
        if f.doc:
            lines.append(f'    """{f.doc}"""')
        return lines
    args = [f"long {n}" for n in f.lead]
    args += [f"double {p.name}" if p.size is None else f"const double* {p.name}" for p in f.params]
    args += [
        f"const double* {a}" if a in f.consts else f"double* {a}"
        for a in f.arrays
        if a not in f.local
    ]
    lines = [f"{'static ' if f.static else ''}int {f.name}({', '.join(args)}) {{"]
    if f.doc:
        lines.append(f"    /* {_comment_text(t, f.doc)} */")
    lines += [f"    {decl};" for decl in f.local.values()]
    return lines


def _c_locals(f: Function, lines: Sequence[Line]) -> tuple[dict[int, str], list[str]]:
    """C declarations: the locals first assigned in the function's own block are
    declared there (``double v3 = ...``; by line number, their type), the others
    (first assigned inside a loop or a branch) at the top, by type."""
    taken = {*f.lead, *(p.name for p in f.params), *f.arrays}
    inline: dict[int, str] = {}
    top: dict[str, list[str]] = {}
    for k, (depth, s) in enumerate(lines):
        if not isinstance(s, Assign) or "[" in s.target or s.target in taken:
            continue
        taken.add(s.target)
        if depth == 1 and not s.op:
            inline[k] = s.type
        else:
            top.setdefault(s.type, []).append(s.target)
    decls = []
    for kind, names in top.items():  # a line of at most about 88 characters each
        line: list[str] = []
        for name in names:
            if line and len(kind) + sum(len(n) + 2 for n in line) + len(name) > 80:
                decls.append(f"{kind} {', '.join(line)};")
                line = []
            line.append(name)
        decls.append(f"{kind} {', '.join(line)};")
    return inline, decls


def render(f: Function, lines: Sequence[Line], t: Target) -> str:
    """The function ``f`` with the statements ``lines`` as its body, in ``t``'s language."""
    out = _header(t, f)
    inline: dict[int, str] = {}
    if t.c:
        inline, decls = _c_locals(f, lines)
        out += [f"    {d}" for d in decls]
    opened: list[int] = []  # C: the depths of the blocks open (For, If)
    for k, (depth, s) in enumerate(lines):
        while opened and opened[-1] >= depth:
            out.append("    " * opened.pop() + "}")
        pad = "    " * depth
        if k in inline:
            out.append(f"{pad}{inline[k]} {_statement(t, s)[0]}")
            continue
        out += [
            pad + text if text else pad.rstrip() for text in _statement(t, s) if text or not t.c
        ]
        if t.c and type(s) in (For, If):
            opened.append(depth)
    while opened:
        out.append("    " * opened.pop() + "}")
    if t.c:
        out.append("}")
    return "\n".join(out) + "\n"
