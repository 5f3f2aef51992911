"""Introspection of a transform: its code, explanation, facts, Numba function.

:class:`IntrospectMixin` is part of :class:`adcompile.api.transform.Transformed`: the
read-only views other modules and users take of it (``.source``,
``.explanation``, ``.facts``, ``.numba(...)``, the specialisations kept, the
names of the generated code), with no state of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..emit.codegen import CodeFacts
from ..ir.tape import Param
from ..trace import captures
from ..trace.arguments import keyword_is_input
from .events import summary
from .specialisation import Specialisation
from .tracing import flatten_args


class IntrospectMixin:
    """What a transform has compiled, for users and the modules that drive it."""

    @property
    def source(self) -> str:
        """The generated source of the most recently used specialisation."""
        if self._last is None:
            raise AttributeError(
                f"{self._name}() has not been compiled yet: call it once, or use "
                "ad.show_code(f, *args)"
            )
        return self._last.compiled.source

    def spec_for(self, args: Sequence[Any]) -> tuple[Specialisation, tuple]:
        """The specialisation that serves these arguments (compiling if needed), and
        the call's structure key."""
        return self._adopting(lambda: self._swapped(lambda: self._spec_for(args)))

    def _swapped(self, call: Callable[[], Any]) -> Any:
        """``call()``; where ``f`` failed on the stand-ins of what it reads from outside
        (``captures.SwapFailed``), again with those watched instead, as a call does:
        then ``f``'s own error is raised, not SwapFailed."""
        try:
            return call()
        except captures.NewOuterValues:
            raise
        except captures.SwapFailed:
            self._scan(swap=False)
            return call()

    def _spec_for(self, args: Sequence[Any]) -> tuple[Specialisation, tuple]:
        caps = self._caps if self._caps is not None else self._scan()
        args = (*args, *caps.values())
        flat, key = flatten_args(self._name, args, caps.hidden, self._skip)
        for spec in self._specs.get(key, ()):
            if spec.call(*flat)[0]:
                return spec, key
        return self._miss(key, args, flat)[0], key

    @property
    def last(self) -> Specialisation | None:
        """The specialisation the last call ran (None before the first)."""
        return self._last

    @property
    def specialisations(self) -> dict[tuple, list[Specialisation]]:
        """The specialisations kept, per argument structure (its shapes)."""
        return dict(self._specs)

    @property
    def variants(self) -> list[Any]:
        """This transform for each keyword signature it was called with."""
        return list(self._variants.values())

    def arg_names(self, nargs: int) -> list[str]:
        """The names of ``nargs`` arguments in generated code and messages."""
        return self._names(nargs)

    @property
    def fun_name(self) -> str:
        """``fun``'s name as an identifier."""
        return self._name

    @property
    def compiled_name(self) -> str:
        """The name of the generated function (``f_value_and_grad`` ...)."""
        return self._fname_doc()[0]

    @property
    def compiled_doc(self) -> str:
        """The generated function's docstring."""
        return self._fname_doc()[1]

    def params_for(self, key: tuple) -> list[Param]:
        """The generated code's parameters for arguments of structure ``key``."""
        return self._params(self._names(len(key)), key)

    @property
    def explanation(self) -> str:
        """Why the most recently used specialisation's code has the form it has."""
        if self._last is None:
            raise AttributeError(f"{self._name}() has not been compiled yet: call it once")
        return self._last.compiled.explanation

    def answered(self, kwargs: dict[str, Any]) -> str:
        """The compiled code that answered the last call (with keywords ``kwargs``), with
        what ``ad.explain`` knows of it: for check mode's errors."""
        t = self
        if kwargs:  # the transform of the keyword signature (_keywords)
            dynamic = tuple(sorted(k for k, v in kwargs.items() if keyword_is_input(v)))
            static = tuple(
                (k, kwargs[k]) for k in sorted(kwargs) if not keyword_is_input(kwargs[k])
            )
            t = self._variants.get((dynamic, static), self)
        spec = t.last
        if spec is None:
            return "no specialisation recorded"
        text = summary(spec.compiled.facts)
        if spec.direct is not None:
            text += ", with a direct entry (hot)"
        traced = sum(e.traced for e in t.events)
        text += f"; {traced} trace{'s' * (traced != 1)} so far"
        if t.events:
            text += f", the last because of: {t.events[-1].reason}"
        return text

    @property
    def facts(self) -> CodeFacts:
        """What the most recently used specialisation's code is, in numbers
        (``codegen.CodeFacts``: its kind, operations, statements, loops)."""
        if self._last is None:
            raise AttributeError(f"{self._name}() has not been compiled yet: call it once")
        return self._last.compiled.facts

    def code_for(self, *args: Any) -> str:
        """The generated source for these arguments (compiling if needed)."""
        return self.spec_for(args)[0].compiled.source

    def numba(self, *example_args: Any) -> Callable:
        """The Numba function of the specialisation ``example_args`` take, to call from
        your own ``@numba.njit`` code: ``fn(*args, out) -> bool``.

        ``args`` are the positional arguments in order, each a float or a
        C-contiguous float64 array (an array of several dimensions flattened with
        ``.ravel()``), of the shapes of ``example_args``. ``out`` is a float64
        array the function fills: for ``value_and_grad`` and ``grad``,
        ``out[0]`` is the value and the gradients follow, flattened, in
        ``argnums`` order (``1 + `` their total size); for ``jit``, ``out[0]``.
        It returns False when a guard fails (these inputs would take another
        branch than the traced one; ``out`` then means nothing): call the
        transform itself there, which traces again. Helpers, objects and
        containers ``f`` reads are taken as they were when traced (the Numba
        function does not watch them); data it reads from outside is refused.
        """
        caps = self._caps if self._caps is not None else self._scan()
        data = [w for w in caps.watched if w.how in ("value", "array")]  # (not structure)
        if caps.hidden or data:
            what = caps.hidden[0].what if caps.hidden else data[0].what
            raise TypeError(
                f"{self._name}() reads {what} from outside its arguments; the Numba "
                "function takes only the arguments, so pass that data as an argument "
                "to use .numba()"
            )
        spec, key = self.spec_for(example_args)
        if spec.compiled.facts.kind == "arrays":  # NumPy code has no Numba function:
            spec = self.traced_spec(*example_args)  # the same traced element by element
        return self.numba_of(spec, key)

    def traced_spec(self, *args: Any) -> Specialisation:
        """A specialisation traced at exactly these arguments' shapes (not code generic
        in the batch length), kept beside the others."""

        def traced() -> Specialisation:
            full = (*args, *self.captures.values())
            _, key = flatten_args(self._name, full, self.captures.hidden, self._skip)
            with self._lock:
                return self._specialise(key, full)

        return self._adopting(lambda: self._swapped(traced))

    def numba_of(self, spec: Specialisation, key: tuple) -> Callable:
        """The Numba function of ``spec`` (see ``numba``), made once. Its arguments
        are those of ``key``: the hidden inputs' values, if any, last."""
        return spec.compiled.numba


# names generated code uses besides the arguments: an argument of the same name is


class ShowsLast:
    """``.source`` and ``.explanation`` of the transform the last call ran (``_last``),
    for what calls one of several transforms (``vmap``, static arguments, a compiled
    loss with integer labels)."""

    _last: Any

    @property
    def source(self) -> str:
        """The generated source the last call ran."""
        return self._last.source

    @property
    def explanation(self) -> str:
        """Why the last call's code has the form it has."""
        return self._last.explanation
