"""adcompile eager: ``ad.Value`` graphs and ``backward()``, as a micrograd user writes them."""

from __future__ import annotations

from . import Skip
from .scalar import ScalarValueSystem


class AdcompileEager(ScalarValueSystem):
    name = "adcompile-eager"
    description = "adcompile.Value graph + backward() (the eager interpreter)"
    modules = ("adcompile",)

    def load(self) -> None:
        import adcompile

        if not hasattr(adcompile, "Value"):
            raise Skip("adcompile.Value not available")
        self.Value = adcompile.Value

    def version(self) -> str:
        import adcompile

        return f"adcompile {getattr(adcompile, '__version__', '?')}"
