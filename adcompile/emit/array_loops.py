"""Printing an array tape as loop nests for Numba: element-wise chains fused, products to BLAS.

``loop_source`` prints the program of an array tape (the one ``emit.arrays``
prints as NumPy calls) as explicit loops, for ``numba.njit``:

- a chain of element-wise ops (and views: transposes, broadcasts, basic
  indexing) whose every link has one reader is one loop nest, one statement per
  op in its body, named after the op's slot (``t12 = max(t10, 0.0)``), with no
  array between the links;
- a reduction is a loop that accumulates, with the chain that feeds it inside;
- ``matmul`` is ``np.dot`` (BLAS), or loops where small (``SMALL_PRODUCT``),
  which accumulate onto the array they are added to, where they are read only
  by that add (onto that array itself where no one reads it after, else onto
  a copy); other ops are their ``LoopForm.statement`` (``einsum`` and
  ``cumsum``: loops of their own);
- in a scan, the arrays a step makes are made once before the loop, where no
  step hands them to the next;
- an array is made only where a value is read twice, by a product, or
  broadcast against a larger one (each of its elements would be computed more
  than once), or read outside its loop;
- a tape's repeated runs (a Python loop over steps) are loops of the loop IR
  (``loops.array_scan.scan``), laid out with one body each (``emit.array_scans``),
  printed inside ``for r0 in range(reps)``.

Every op's form is its own (``Op.code`` for the scalar ops, ``ArrayOp.loop``
for the others); a tape with an op that has none raises :class:`NotLowered`,
and its program stays NumPy code. Constant arrays of one value are written as
that number; other constant arrays are arguments after ``out`` (``consts``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..ir.arrays import ArrayOp, ArrayTape
from ..ir.loop_forms import broadcast_index, nest
from ..ir.ops import Op
from ..ir.tape import CONST, INPUT, Param
from ..loops.array_scan import scan
from .array_scans import Span, lay_out
from .arrays import code_params, literal, out_sizes

_INIT = {"sum": "0.0", "prod": "1.0", "max": "-np.inf", "min": "np.inf"}
#: A matrix product of at most this many multiply-adds is written as loops (its
#: operands' views read in place); a larger one calls np.dot (BLAS).
SMALL_PRODUCT = 32768


class NotLowered(ValueError):
    """An array tape has an op with no form in loop nests (its NumPy code serves)."""


def loop_source(
    tape: ArrayTape,
    params: Sequence[Param],
    fname: str,
    doc: str,
    small: int | None = None,
    max_nodes: int | None = None,
) -> tuple[str, dict[str, np.ndarray]]:
    """The source of ``fname(*params, out, *consts)`` computing ``tape``'s outputs
    into ``out`` (flattened, in order) as loop nests, and the constant arrays it
    takes after ``out`` (by name, in order); :class:`NotLowered` where an op has
    no loop form, or the tape has more than ``max_nodes`` nodes once its repeated
    runs are folded into loops (``loops.array_scan``). Products of at most
    ``small`` multiply-adds are loops (0: none, as code generic in the batch
    length has it, whose sizes are not known; None: ``SMALL_PRODUCT``)."""
    folded, spans = lay_out(tape, scan(tape, params))
    if max_nodes is not None and len(folded.nodes) > max_nodes:
        raise NotLowered(f"{len(folded.nodes)} nodes once folded (more than {max_nodes})")
    small = SMALL_PRODUCT if small is None else small
    return _Printer(folded, small, spans).source(params, fname, doc)


class _Printer:
    def __init__(self, tape: ArrayTape, small: int, spans: Sequence[Span] = ()) -> None:
        self.tape, self.small, self.spans = tape, small, list(spans)
        # the loop each node is in (-1: none), and the nodes that must be arrays or
        # numbers of their own: what a loop carries or keeps, and carries' first values
        self.region = [-1] * len(tape.nodes)
        self.forced: set[int] = set()
        for k, span in enumerate(self.spans):
            self.region[span.first : span.last] = [k] * (span.last - span.first)
            self.forced |= {i for c in span.carries for i in c[1:]}
            self.forced |= {i for _, i in span.stacks}
        self.kinds = [self._kind(i) for i in range(len(tape.nodes))]
        self.readers: list[list[int]] = [[] for _ in tape.nodes]
        for i, node in enumerate(tape.nodes):
            for a in node.args:
                self.readers[a].append(i)
        self.consts: dict[str, np.ndarray] = {}
        self.onto: dict[int, tuple[int, int]] = {}  # an add -> (its product, the other)
        self.in_place: set[int] = set()  # adds of ``onto`` that take over the other's array
        # carry nodes (what ``p_vX`` is in the body) -> their node before the loop
        self.carry_init: dict[int, int] = {}
        for span in self.spans:
            for name, init, _ in span.carries:
                for j in range(span.first, span.last):
                    if tape.nodes[j].op == INPUT and tape.name(j) == name:
                        self.carry_init[j] = init
        self.carry_last = {c[2] for span in self.spans for c in span.carries}
        self.stacked = {i for span in self.spans for _, i in span.stacks}
        self.state = self._plan()
        # body arrays made once before their loop and filled again at each step
        self.hoisted = {i for i in range(len(tape.nodes)) if self._hoist(i)}

    # ------------------------------------------------------------ what each node is

    def _kind(self, i: int) -> str:
        node, tape = self.tape.nodes[i], self.tape
        op = node.op
        if op == INPUT:
            return "input"
        if op == CONST:
            v = node.value
            if not isinstance(v, np.ndarray) or (v.size and np.all(v == v.flat[0])):
                return "uniform"
            if v.dtype.kind not in "fb":
                raise NotLowered(f"a constant array of {v.dtype}")
            return "const"
        if not isinstance(op, ArrayOp):
            return "element"
        form = op.loop
        shapes = [tape.shapes[a] for a in node.args]
        if form is None or (form.fits is not None and not form.fits(*shapes)):
            raise NotLowered(f"{op.name} has no loop form here")
        if form.element is not None:
            return "element"
        if form.view is not None:
            if form.view(["0"] * len(tape.shapes[i]), tape.shapes[i], shapes[0]) is None:
                return "reshape" if form.array else _refuse(op)
            return "view"
        if form.reduce is not None:
            return "reduce"
        small = math.prod(shapes[0]) * shapes[1][-1] <= self.small if form.product else False
        if small and len(shapes[0]) <= 2 and len(shapes[1]) <= 2:
            return "product"
        return "statement"

    def _plan(self) -> list[str]:
        """Each node's place: 'name' (an array or number of its own, or an argument),
        'literal', 'inline' (a statement in its reader's loop), 'free' (a view of a
        named array: an index of it)."""
        tape, state = self.tape, []
        outputs = set(tape.outputs)
        for i, kind in enumerate(self.kinds):
            shape = tape.shapes[i]
            readers = self.readers[i]
            wants_array = any(self.kinds[r] in ("statement", "reshape") for r in readers)
            # (a reshape's operand is a C-contiguous array of its own: not a view such as .T)
            wants_own = any(self.kinds[r] == "reshape" for r in readers)
            products = any(self.kinds[r] == "product" for r in readers)  # (read many times)
            elsewhere = any(self.region[r] != self.region[i] for r in readers)
            if i in self.forced:
                state.append("name")
            elif kind == "uniform":
                state.append("name" if wants_array else "literal")
            elif kind in ("input", "const", "reduce", "statement", "reshape", "product"):
                state.append("name")
            elif not shape:
                state.append("name")
            elif kind == "view" and state[tape.nodes[i].args[0]] in ("name", "free", "literal"):
                arg = tape.nodes[i].args[0]
                base = state[arg] == "name" and bool(tape.shapes[arg])  # (not a number)
                array = base and tape.nodes[i].op.loop.array is not None
                state.append("free" if not wants_array or (array and not wants_own) else "name")
            elif i in outputs or wants_array or len(readers) != 1 or products or elsewhere:
                state.append("name")
            elif math.prod(self._space(readers[0])) > math.prod(shape):
                state.append("name")  # broadcast: each element would be made again
            else:
                state.append("inline")
            if state[i] == "name" and self._onto(i, state):
                state[self.onto[i][0]] = "onto"  # (made in i's place: _make)
        return state

    def _onto(self, i: int, state: list[str]) -> bool:
        """Whether node ``i`` adds a product, read by it alone, to an array of its
        shape: then the product accumulates onto a copy of that array (a weight's
        gradient summed over steps), which saves an array and a pass a step."""
        node, tape = self.tape.nodes[i], self.tape
        if getattr(node.op, "name", None) != "add" or isinstance(node.op, ArrayOp):
            return False
        for p, base in (node.args, node.args[::-1]):
            if (
                self.kinds[p] == "product"
                and self.readers[p] == [i]
                and self.region[p] == self.region[i]
                and state[base] == "name"
                and tape.shapes[p] == tape.shapes[base] == tape.shapes[i]
            ):
                self.onto[i] = (p, base)
                if self._dead_after(base, i, state):
                    self.in_place.add(i)
                return True
        return False

    def _dead_after(self, base: int, i: int, state: list[str]) -> bool:
        """Whether the array of ``base`` may become node ``i``'s (the add onto it),
        with no copy: no one reads it after ``i``, at this step or a later one, and
        it is no argument, constant or view of one."""
        made = ("element", "reduce", "product", "statement")
        if base in self.carry_init:  # ``p_vX``: last step's array (the first: the node before)
            init = self.carry_init[base]
            return (
                self.readers[base] == [i]
                and not self.readers[init]
                and self.kinds[init] in made
                and state[init] == "name"
                and init not in self.tape.outputs
                and list(self.carry_init.values()).count(init) == 1
            )
        same = self.region[base] == self.region[i]
        return (
            self.readers[base] == [i]
            and self.kinds[base] in made
            and base not in self.tape.outputs
            and base not in self.carry_init.values()
            and (same or self.region[i] == -1)
            and not (same and (base in self.carry_last or base in self.stacked))
        )

    def _hoist(self, i: int) -> bool:
        """Whether body node ``i``'s array can be made once, before its loop, and
        filled again at each step: it is not carried to the next step, not taken
        over by an add, and not reshaped (a reshape may be a view of it)."""
        kind, shape = self.kinds[i], self.tape.shapes[i]
        return (
            self.region[i] != -1
            and self.state[i] == "name"
            and bool(shape)
            and (kind in ("reduce", "product", "view") or kind == "element" and i not in self.onto)
            and i not in self.carry_last
            and not any(base == i for j, (_, base) in self.onto.items() if j in self.in_place)
            and not any(self.kinds[r] == "reshape" for r in self.readers[i])
        )

    def _space(self, i: int) -> tuple[int, ...]:
        """The loop space of node ``i``: its operand's shape for a reduction, else its own."""
        if self.kinds[i] == "reduce":
            return self.tape.shapes[self.tape.nodes[i].args[0]]
        return self.tape.shapes[i]

    # ------------------------------------------------------------ printing

    def source(self, params: Sequence[Param], fname: str, doc: str) -> tuple[str, dict]:
        tape, body, params = self.tape, [], code_params(params)
        for node in tape.nodes:  # (the arrays an op's form reads: an index's integers)
            form = getattr(node.op, "loop", None) if isinstance(node.op, ArrayOp) else None
            if form is not None and form.consts:
                self.consts.update(form.consts)
        for pos, i in enumerate(tape.inputs):
            shape, name, size = tape.shapes[i], params[pos].name, params[pos].size
            if not shape:  # a number (passed as one of its own, or as an array of one)
                body.append(f"{tape.name(i)} = {name if size is None else f'{name}[0]'}")
            else:
                text = name if len(shape) == 1 else f"{name}.reshape({shape!r})"
                body.append(f"{tape.name(i)} = {text}")
        pad = ""
        for i, node in enumerate(tape.nodes):
            span = next((s for s in self.spans if s.first == i), None)
            if span is not None:
                body += self._prologue(span)
                pad = "    "
            if i == tape.adjoint_from:
                body.append(pad + "# the adjoint: reverse mode, node by node backwards")
            if node.op != INPUT and self.state[i] == "name":
                body += [pad + line for line in self._make(i)]
            span = next((s for s in self.spans if s.last == i + 1), None)
            if span is not None:
                body += [pad + line for line in self._epilogue(span)]
                pad = ""
        start = 0
        for o, size in zip(tape.outputs, out_sizes(tape)):
            body += self._write_out(o, start)
            start += size
        body.append("return True")
        args = [p.name for p in params] + ["out"] + list(self.consts)
        ops = sum(1 for n in tape.nodes if isinstance(n.op, Op))
        head = [
            "# generated by adcompile",
            "import math",
            "",
            "import numpy as np",
            "",
            "",
            f"# Loop nests ({ops} array operations): element-wise chains fused, "
            "products by np.dot or loops, repeated runs folded into loops.",
            f"def {fname}({', '.join(args)}):",
            f'    """{doc}"""',
        ]
        return "\n".join(head + ["    " + line for line in body]) + "\n", self.consts

    def _prologue(self, span: Span) -> list[str]:
        """Before a loop: its stacks made, its carries given their first values."""
        tape, lines = self.tape, [f"# {span.reps} steps of {span.last - span.first} nodes"]
        for stack, i in span.stacks:
            dtype = ", dtype=np.bool_" if tape.booleans[i] else ""
            lines.append(f"{stack} = np.empty({(span.reps, *tape.shapes[i])!r}{dtype})")
        for name, init, _ in span.carries:
            lines.append(f"{name} = {self._array(init)}")
        for i in sorted(j for j in self.hoisted if span.first <= j < span.last):
            lines.append(self._new(i, "empty"))
        return [*lines, f"for {span.var} in range({span.reps}):"]

    def _alloc(self, i: int, how: str, fill: str = "0.0") -> list[str]:
        """The line making node ``i``'s array (``np.empty``, ``np.zeros``, or
        ``np.full`` of ``fill``); for an array made before its loop (``hoisted``),
        the line filling it again at each step, if it needs one."""
        if i not in self.hoisted:
            return [self._new(i, how, fill)]
        return [] if how == "empty" else [f"{self.tape.name(i)}.fill({fill})"]

    def _new(self, i: int, how: str, fill: str = "0.0") -> str:
        name, shape = self.tape.name(i), self.tape.shapes[i]
        dtype = ", dtype=np.bool_" if self.tape.booleans[i] else ""
        if how == "full":
            return f"{name} = np.full({shape!r}, {fill}{dtype})"
        return f"{name} = np.{how}({shape!r}{dtype})"

    def _epilogue(self, span: Span) -> list[str]:
        """At the end of a step: what it keeps, and what the next step reads."""
        lines = [f"{stack}[{span.var}] = {self.tape.name(i)}" for stack, i in span.stacks]
        return lines + [f"{name} = {self.tape.name(i)}" for name, _, i in span.carries]

    def _make(self, i: int) -> list[str]:
        """The statements making node ``i``'s array (or number)."""
        tape, kind, name = self.tape, self.kinds[i], self.tape.name(i)
        node, shape = tape.nodes[i], tape.shapes[i]
        if kind == "const":
            const = f"_c{i}"
            self.consts[const] = np.ascontiguousarray(node.value)
            return [f"{name} = {const}"]
        if kind == "uniform":
            v = node.value
            v = v.flat[0] if isinstance(v, np.ndarray) else v
            if not shape:  # (a number of its own: a loop carries it)
                return [f"{name} = {_number(v)}"]
            dtype = ", dtype=np.bool_" if tape.booleans[i] else ""
            return [f"{name} = np.full({shape!r}, {_number(v)}{dtype})"]
        if kind in ("statement", "reshape"):
            form = node.op.loop
            operands = [self._array(a) for a in node.args]
            if kind == "reshape":
                return [f"{name} = {form.array.format(*operands)}"]
            shapes = [tape.shapes[a] for a in node.args]
            text = form.statement if form.statement_of is None else form.statement_of(*shapes)
            return text.format(*operands, name=name).splitlines()
        if kind == "reduce":
            return self._reduce(i)
        if kind == "product":
            return self._product(i)
        if i in self.onto:
            product, base = self.onto[i]
            return self._product(product, i, base)
        if not shape:  # a number
            lines: list[str] = []
            value = self._element(i, [], lines, top=True)
            return [*lines, f"{name} = {value}"]
        lines = self._alloc(i, "empty")
        index = [f"i{k}" for k in range(len(shape))]
        inner: list[str] = []
        value = self._element(i, index, inner, top=True)
        return lines + _nest(shape, [*inner, f"{name}[{', '.join(index)}] = {value}"])

    def _reduce(self, i: int) -> list[str]:
        tape, name = self.tape, self.tape.name(i)
        kind, axes, keepdims = self.tape.nodes[i].op.loop.reduce
        (a,) = tape.nodes[i].args
        space = tape.shapes[a]
        index = [f"i{k}" for k in range(len(space))]
        inner: list[str] = []
        value = self._element(a, index, inner)
        kept = [
            ("0" if keepdims else None) if axes is None or k in axes else index[k]
            for k in range(len(space))
        ]
        kept = [k for k in kept if k is not None]
        acc = f"{name}[{', '.join(kept)}]" if kept else name
        init = _INIT[kind]
        head = self._alloc(i, "full", init) if kept else [f"{name} = {init}"]
        x = f"x{i}"
        inner.append(f"{x} = {value}")
        if kind == "sum":
            inner.append(f"{acc} += {x}")
        elif kind == "prod":
            inner.append(f"{acc} *= {x}")
        else:  # max, min: nan wins, as in NumPy
            better = ">" if kind == "max" else "<"
            inner += [f"if {x} {better} {acc} or {x} != {x}:", f"    {acc} = {x}"]
        return head + _nest(space, inner)

    def _product(self, i: int, into: int | None = None, base: int | None = None) -> list[str]:
        """A small matrix product as loops: ``out[i, j] += a[i, k] * b[k, j]``, the
        innermost loop along a row of ``b``; where ``b`` is a vector (or a matrix of
        one column), each element a sum in a local. Made as node ``into``, from
        ``base``, where given (``_onto``): on a copy, or on its own array where no
        one reads it after (``in_place``). The sums run in the same order either way."""
        tape, made = self.tape, i if into is None else into
        name = tape.name(made)
        a, b = tape.nodes[i].args
        sa, sb = tape.shapes[a], tape.shapes[b]
        rows = ["i0"] if len(sa) == 2 else []
        column = len(sb) == 2 and sb[1] == 1  # (a column: a vector)
        cols = ["i2"] if len(sb) == 2 and not column else []
        left = self._element(a, [*rows, "i1"], [])
        right = self._element(b, ["i1", *cols, *(["0"] if column else [])], [])
        at = ", ".join(rows + cols + (["0"] if column else []))
        acc = f"{name}[{at}]" if at else name
        shape, dot = tape.shapes[i], bool(rows) and not cols
        if base is not None:
            own = made in self.in_place or not shape
            how = "its array" if made in self.in_place else "a copy"
            start = tape.name(base) + ("" if own else ".copy()")
            lines = [f"{name} = {start}  # (+ {tape.name(i)}, onto {how})"]
        else:
            lines = self._alloc(made, "empty" if dot else "zeros") if shape else [f"{name} = 0.0"]
        if dot:  # each element a dot product, summed in a local
            total = f"x{i}"
            inner = [f"{total} = {acc if base is not None else '0.0'}"]
            inner += [f"for i1 in range({sa[-1]}):", f"    {total} += {left} * {right}"]
            body = [f"for i0 in range({sa[0]}):", *("    " + ln for ln in inner)]
            return [*lines, *body, f"    {acc} = {total}"]
        inner = [f"x{i} = {left}"]
        if cols:
            inner += [f"for i2 in range({sb[1]}):", f"    {acc} += x{i} * {right}"]
        else:
            inner.append(f"{acc} += x{i} * {right}")
        body = [f"for i1 in range({sa[-1]}):", *("    " + line for line in inner)]
        if rows:
            body = [f"for i0 in range({sa[0]}):", *("    " + line for line in body)]
        return lines + body

    def _element(self, i: int, index: Sequence[str], lines: list[str], top: bool = False) -> str:
        """The text of node ``i``'s element at ``index``, with the statements it needs
        appended to ``lines`` (``top``: node ``i`` is made here, whatever its place)."""
        tape, state, node = self.tape, self.state[i], self.tape.nodes[i]
        if not top and state == "name":
            return f"{tape.name(i)}[{', '.join(index)}]" if index else tape.name(i)
        if state == "literal":
            v = node.value
            return _number(v.flat[0] if isinstance(v, np.ndarray) else v)
        shape, op = tape.shapes[i], node.op
        if self.kinds[i] == "view":
            at = op.loop.view(list(index), shape, tape.shapes[node.args[0]])
            return self._element(node.args[0], at, lines)
        operands = [
            self._element(a, broadcast_index(index, shape, tape.shapes[a]), lines)
            for a in node.args
        ]
        template = op.loop.element if isinstance(op, ArrayOp) else op.code
        temp = f"t{i}"
        lines.append(f"{temp} = {template.format(*operands)}")
        return temp

    def _array(self, i: int) -> str:
        """Node ``i`` as a whole array (a name, or an array view of a named array)."""
        if self.state[i] == "free":
            node = self.tape.nodes[i]
            return node.op.loop.array.format(self._array(node.args[0]))
        return self.tape.name(i)

    def _write_out(self, o: int, start: int) -> list[str]:
        shape = self.tape.shapes[o]
        if not shape:
            return [f"out[{start}] = {self._element(o, [], [])}"]
        index = [f"i{k}" for k in range(len(shape))]
        flat = " + ".join(
            f"{index[k]} * {math.prod(shape[k + 1 :])}" if k < len(shape) - 1 else index[k]
            for k in range(len(shape))
        )
        lines: list[str] = []
        value = self._element(o, index, lines)
        return _nest(shape, [*lines, f"out[{start} + {flat}] = {value}"])


def _refuse(op: Op) -> str:
    raise NotLowered(f"{op.name} has no loop form here")


def _number(v: object) -> str:
    if isinstance(v, (bool, np.bool_)):
        return repr(bool(v))
    return literal(float(v))


def _nest(shape: Sequence[int], inner: list[str]) -> list[str]:
    """``inner`` inside one loop per axis of ``shape`` (``i0`` outermost)."""
    return nest([(f"i{k}", n) for k, n in enumerate(shape)], inner)
