"""Cross-check derivatives symbolically: SymPy, the compiled adjoint, finite differences.

    python examples/check_derivatives.py

``ad.check_grad`` puts every way adcompile computes a gradient side by side
and raises ``ad.GradientMismatch`` when they disagree. A primitive of your
own with a wrong derivative rule is caught the same way.
"""

import math

import numpy as np

import adcompile as ad


def f(x, y):
    return ad.sin(x) * y + ad.exp(x / y)


print("f(x, y) =", ad.to_sympy(f, 1.0, 2.0))
print(ad.check_grad(f, 1.0, 2.0, argnums=(0, 1)))


def softmax_entropy(z):
    e = np.exp(z - 1.0)
    p = e / np.sum(e)
    return -np.sum(p * np.log(p))


print(ad.check_grad(softmax_entropy, np.array([0.3, -1.2, 2.0])))

# A primitive of our own: erf with a derivative rule (the right one) ...
erf = ad.primitive(
    math.erf,
    vjp=lambda g, out, x: g * 2 / math.sqrt(math.pi) * ad.exp(-x * x),
    code="math.erf({0})",
    sympy="erf",
    name="my_erf",
)
print(ad.check_grad(lambda x: erf(x) ** 2, 0.7))

# ... and one whose rule is wrong by a factor of two: check_grad says so.
bad_erf = ad.primitive(
    math.erf,
    vjp=lambda g, out, x: g * 4 / math.sqrt(math.pi) * ad.exp(-x * x),
    code="math.erf({0})",
    sympy="erf",
    name="bad_erf",
)
try:
    ad.check_grad(lambda x: bad_erf(x), 0.7)
except ad.GradientMismatch as e:
    print("caught the wrong rule:", str(e).splitlines()[0])
else:
    raise SystemExit("check_grad did not catch the wrong derivative rule")
