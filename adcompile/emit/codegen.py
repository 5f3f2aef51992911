"""Tape -> Python source text (no Numba here).

Two forms:

- straight-line source, one statement per primitive, primal slots ``vK``,
  adjoints ``bK``, a comment naming the primal statement above each adjoint
  block, ``repr`` float literals, only ``math`` and the arguments referenced;
- for large tapes, an opcode program (arrays) and the source of one tape
  interpreter generated from the op table's code templates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.ops import OPS, Op
from ..ir.tape import CONST, INPUT, Param, Tape
from .render import (
    C99,
    NUMBA,
    PYTHON,
    Assign,
    Comment,
    Flag,
    FlagGuard,
    FlagTest,
    Function,
    Guard,
    GuardInfo,
    If,
    Line,
    Return,
    Target,
    render,
    strip_parens,
)


@dataclass(frozen=True)
class Outputs:
    """Where straight-line code puts its outputs instead of ``out[k]`` (the
    calling convention of a transform's direct entry, ``jit.compile_direct``).

    Output ``k`` is assigned to ``targets[k]``: an element of one of the
    ``arrays`` parameters (which replace ``out``), or a local; empty: not
    written. ``success`` is returned when every guard holds, ``failure`` when
    one does not or an array argument has another length than traced."""

    arrays: tuple[str, ...]
    targets: tuple[str, ...]
    success: str
    failure: str = "None"


#: Generated code checks at most this many guards with one ``if`` each; more are
#: folded into loops (``loops.ir.GuardLoop``) or into one flag tested once.
GUARD_IFS = 32


def _final_names(tape: Tape) -> list[str]:
    """Slot names for the source; a name is reused (``b3 = b3 + t9``) only
    when the value it held before is not read again."""
    n = len(tape.nodes)
    last_use = list(range(n))
    for j, node in enumerate(tape.nodes):
        for a in node.args:
            last_use[a] = j
    for o in tape.outputs:
        last_use[o] = n
    for g in tape.guards:
        last_use[g.a] = last_use[g.b] = n
    names, holder = [], {}
    for j in range(n):
        name = tape.name(j)
        prev = holder.get(name)
        if prev is not None and last_use[prev] > j:
            name = f"t{j}" if name != f"t{j}" else f"t{j}_"
        holder[name] = j
        names.append(name)
    return names


def py_ident(name: str) -> str:
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    return out if out and not out[0].isdigit() else "_" + out


def straight_line(
    tape: Tape,
    fname: str,
    params: Sequence[Param],
    doc: str = "",
    status: bool = False,
    lang: str = "python",
    outputs: Outputs | None = None,
) -> str:
    """Source of ``def fname(*params, out) -> bool``: writes the outputs to ``out``
    and returns False when a guard recorded while tracing does not hold.
    ``outputs`` puts them elsewhere (Python only; see :class:`Outputs`).

    With ``status`` it returns 0 instead of True, and ``k`` (1-based) when
    ``tape.guards[k - 1]`` fails. ``lang="c"`` prints the same code as a C99
    function ``int fname(...)`` (always with status): array parameters are
    ``const double*``, scalars ``double``, and ``out`` is ``double*``; each op
    is printed from its ``c`` template. (:func:`print_tape` also returns the guards.)
    """
    target = C99 if lang == "c" else PYTHON if status else NUMBA
    return print_tape(tape, fname, params, doc, target, outputs).text


@dataclass
class Printed:
    """Generated source of one function, and its guards as data (``GuardInfo``)."""

    text: str
    guards: list[GuardInfo]


def guard_records(tape: Tape, params: Sequence[Param]) -> list[GuardInfo]:
    """One :class:`GuardInfo` per guard of ``tape`` (number ``k + 1`` for
    ``tape.guards[k]``): the comparison with inputs named after the arguments
    (``x[0] > 0.5``)."""
    flat = [
        p.name if p.size is None else f"{p.name}[{k}]" for p in params for k in range(_length(p))
    ]
    names = dict(zip(tape.inputs, flat))

    def side(i: int) -> str:
        if tape.nodes[i].op == INPUT:
            return names.get(i, tape.name(i))
        return tape.operand(i)

    return [
        GuardInfo(k + 1, f"{side(g.a)} {g.cmp} {side(g.b)}", g.expected, g.where)
        for k, g in enumerate(tape.guards)
    ]


def print_tape(
    tape: Tape,
    fname: str,
    params: Sequence[Param],
    doc: str = "",
    target: Target = NUMBA,
    outputs: Outputs | None = None,
) -> Printed:
    """``tape`` as straight-line code in ``target``'s language (see
    :func:`straight_line`), and its guards."""
    names = _final_names(tape)

    def operand(i: int) -> str:
        node = tape.nodes[i]
        return target.lit(node.value) if node.op == CONST else names[i]

    # which argument element each input slot reads
    sources = [
        p.name if p.size is None else f"{p.name}[{k}]" for p in params for k in range(_length(p))
    ]
    input_src = dict(zip(tape.inputs, sources))
    # each guard is checked as soon as its operands are computed
    guard_at: dict[int, list] = {}
    for k, g in enumerate(tape.guards):
        computed = [s for s in (g.a, g.b) if tape.nodes[s].op != CONST]
        guard_at.setdefault(max(computed, default=-1), []).append((k + 1, g))
    lines: list[Line] = []
    arrays = list(outputs.arrays) if outputs else ["out"]
    failed = outputs.failure if outputs else None
    for p in params if outputs else ():
        if p.size is not None:
            lines += [(1, If(f"{p.name}.shape[0] != {p.size}")), (2, Return(failed))]
    # many guards: folded into one flag, tested once at the end (one ``if`` each
    # would make as many blocks, and Numba's SSA pass recurse once per block)
    checked = [g for j, gs in guard_at.items() if j >= 0 for g in gs]
    many = not target.c and len(checked) > GUARD_IFS
    flag = _fresh("st" if target.status else "ok", names, params) if many else ""
    if flag:
        note = (
            f"{len(checked)} guards: the first that fails, or 0"
            if target.status
            else f"{len(checked)} guards, checked together at the end"
        )
        lines.append((1, Flag(flag, note)))
    block = -1
    read = _read_slots(tape) if target.c else None  # (C warns of a local never read)
    for j, node in enumerate(tape.nodes):
        op = node.op
        if op == CONST or (read is not None and j not in read):
            continue
        if tape.blocks is not None and tape.blocks[j] != block and tape.blocks[j] >= 0:
            block = tape.blocks[j]
            lines.append((1, Comment(tape.primal.statement(block) if tape.primal else "")))
        if op == INPUT:
            lines.append((1, Assign(names[j], input_src[j])))
        else:
            expr = target.op(op, [operand(a) for a in node.args])
            lines.append((1, Assign(names[j], strip_parens(expr))))
        for k, g in guard_at.get(j, ()):
            cond = f"{operand(g.a)} {g.cmp} {operand(g.b)}"
            if flag:
                lines.append((1, FlagGuard(flag, cond, g.expected, g.where, k)))
            else:
                lines.append((1, Guard(cond, g.expected, g.where, k, fail=failed)))
    for _, g in guard_at.get(-1, ()):  # constant on both sides: decided while tracing
        assert g.holds([n.value for n in tape.nodes])
    if flag:
        lines.append((1, FlagTest(flag, failed)))
    for k, o in enumerate(tape.outputs):
        target_k = outputs.targets[k] if outputs else f"out[{k}]"
        if target_k:  # (empty: an output the caller does not read)
            lines.append((1, Assign(target_k, operand(o))))
    lines.append((1, Return(outputs.success if outputs else None)))
    text = render(Function(fname, params, arrays, doc), lines, target)
    return Printed(text, guard_records(tape, params))


def _length(p: Param) -> int:
    """How many input slots parameter ``p`` fills (1 for a scalar; an empty array: 0)."""
    return 1 if p.size is None else p.size


def _read_slots(tape: Tape) -> set[int]:
    """The slots of ``tape`` something reads: an operation, a guard or the outputs."""
    read = {a for node in tape.nodes for a in node.args} | set(tape.outputs)
    return read | {g.a for g in tape.guards} | {g.b for g in tape.guards}


def _fresh(name: str, names: Sequence[str], params: Sequence[Param]) -> str:
    """``name``, or ``name_``, ``name__``... if a slot or parameter is named so."""
    taken = set(names) | {p.name for p in params}
    while name in taken:
        name += "_"
    return name


@dataclass(frozen=True)
class CodeFacts:
    """What compiled code is, in numbers kept when it is made
    (``CompiledProgram.facts``: ``api.summary`` words them, ``entries.hot_ready``
    reads ``statements`` and ``slots``)."""

    kind: str  # "straight-line", "folded", "interpreter" or "arrays" (NumPy code)
    operations: int  # primitive operations of the tape it was made from (for code
    # differentiated as loops: of the primal tape, before differentiating)
    statements: int  # primitive statements the source prints (loop bodies once)
    loops: int = 0  # repeated segments folded into for loops
    slots: int = 0  # slots of the tape (what the interpreter runs)
    generic: bool = False  # one program for every batch length (``adcompile.batch``)
    how: str = ""  # how a derivative was made ("Jacobian by reverse-mode sweeps"), or ""


def module_source(functions: Sequence[str]) -> str:
    """A module holding generated functions; it imports only ``math``."""
    return "# generated by adcompile\nimport math\n\n\n" + "\n\n".join(functions)


# ------------------------------------------------------------ opcode programs

LEAF_INPUT = -1
LEAF_CONST = -2
CMP_CODES = {"<": 0, "<=": 1, ">": 2, ">=": 3, "==": 4, "!=": 5}


@dataclass
class Program:
    """A tape as arrays, for the compiled tape interpreter."""

    opcodes: np.ndarray  # int64 per slot: an Op's opcode, LEAF_INPUT or LEAF_CONST
    arg0: np.ndarray  # int64 first operand slot (0 if none)
    arg1: np.ndarray  # int64 second operand slot (0 if none)
    init: np.ndarray  # float64 per slot: constants' values
    inputs: np.ndarray  # int64 input slots, in argument order
    outputs: np.ndarray  # int64 output slots
    guards: np.ndarray  # int64 (n_guards, 4): cmp code, a, b, expected


def to_program(tape: Tape) -> Program:
    """The tape as opcode arrays."""
    n = len(tape.nodes)
    opcodes = np.empty(n, np.int64)
    arg0 = np.zeros(n, np.int64)
    arg1 = np.zeros(n, np.int64)
    init = np.zeros(n, np.float64)
    for j, node in enumerate(tape.nodes):
        if node.op == INPUT:
            opcodes[j] = LEAF_INPUT
        elif node.op == CONST:
            opcodes[j] = LEAF_CONST
            init[j] = node.value
        else:
            if node.op.arity > 2:
                raise NotImplementedError(f"op {node.op.name!r} has more than 2 operands")
            opcodes[j] = node.op.opcode
            if node.args:
                arg0[j] = node.args[0]
            if len(node.args) > 1:
                arg1[j] = node.args[1]
    guards = np.array(
        [[CMP_CODES[g.cmp], g.a, g.b, int(g.expected)] for g in tape.guards], np.int64
    ).reshape(-1, 4)
    return Program(
        opcodes,
        arg0,
        arg1,
        init,
        np.array(tape.inputs, np.int64),
        np.array(tape.outputs, np.int64),
        guards,
    )


def interpreter_source(ops: Sequence[Op] | None = None) -> str:
    """Source of ``run(opcodes, arg0, arg1, vals)``: one branch per op, from the table."""
    ops = list(OPS.values()) if ops is None else list(ops)
    lines = [
        "def run(opcodes, arg0, arg1, vals):",
        "    for i in range(opcodes.shape[0]):",
        "        op = opcodes[i]",
        "        if op < 0:",
        "            continue",
        "        a = vals[arg0[i]]",
        "        b = vals[arg1[i]]",
    ]
    for k, op in enumerate(ops):
        kw = "if" if k == 0 else "elif"
        expr = op.code.format("a", "b")
        lines.append(f"        {kw} op == {op.opcode}:  # {op.name}")
        lines.append(f"            vals[i] = {strip_parens(expr)}")
    lines.append("")
    lines.append("")
    lines.append("def check(guards, vals):")
    lines.append("    for k in range(guards.shape[0]):")
    lines.append("        c = guards[k, 0]")
    lines.append("        a = vals[guards[k, 1]]")
    lines.append("        b = vals[guards[k, 2]]")
    conds = ["a < b", "a <= b", "a > b", "a >= b", "a == b", "a != b"]
    for code, cond in enumerate(conds):
        kw = "if" if code == 0 else "elif"
        lines.append(f"        {kw} c == {code}:")
        lines.append(f"            r = {cond}")
    lines.append("        else:")
    lines.append("            r = False")
    lines.append("        if r != (guards[k, 3] == 1):")
    lines.append("            return False")
    lines.append("    return True")
    return "\n".join(lines) + "\n"
