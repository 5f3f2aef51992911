"""The ``adcompile`` command line: ``adcompile demo`` and friends.

A subcommand is one ``cmd_*`` function taking the parsed arguments and
returning the exit status, plus a few lines in ``build_parser``. Heavy
imports happen inside the commands so that ``adcompile --help`` starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line on stderr (and exit status 2)."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _whole_number(least: int, example: int, why: str = "") -> Callable[[str], int]:
    """An argparse ``type=``: a whole number of at least ``least`` (``why`` explains it)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number, such as {example}; got {text!r}"
            ) from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more{why}, got {value}")
        return value

    return whole_number


#: The picture formats ``--out`` may name (matplotlib writes each without extras).
IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _picture_path(text: str) -> str:
    """An argparse ``type=`` for ``demo --out``: '' or an image file in a folder that exists."""
    if text == "":
        return text
    path = Path(text).expanduser()
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an image file name; end it with "
            f"{', '.join(IMAGE_SUFFIXES[:-2])} or {IMAGE_SUFFIXES[-2]} (or give --out '' for "
            "no picture)"
        )
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text!r} is a folder; name a file in it, such as {str(path / 'demo.png')!r}"
        )
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(
            f"there is no folder {str(folder)!r} to write {path.name!r} into; create it first "
            "(or give --out '' for no picture)"
        )
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write into the folder {str(folder)!r}; name a file in a folder of yours "
            "(or give --out '' for no picture)"
        )
    return str(path)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = ArgumentParser(
        prog="adcompile",
        description="Scalar Python code in, fast and verified derivative code out.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="subcommands")

    p = sub.add_parser("demo", help="train a small network on two moons", description=DEMO_DOC)
    p.add_argument(
        "--points",
        type=_whole_number(2, 100, " (a point for each moon)"),
        default=100,
        help="data points, at least 2 (default 100)",
    )
    p.add_argument(
        "--steps",
        "--epochs",
        dest="steps",
        type=_whole_number(1, 100),
        default=100,
        help="training steps, each on all the points (default 100; --epochs is another name)",
    )
    p.add_argument(
        "--seed",
        type=_whole_number(0, 1),
        default=1,
        help="seed for data and weights, 0 or more (default 1)",
    )
    p.add_argument(
        "--out",
        type=_picture_path,
        default="adcompile-demo.png",
        help="picture of the decision boundary, a .png, .svg, .pdf or .jpg file in a folder "
        "that exists (default adcompile-demo.png; '' for none)",
    )
    p.add_argument(
        "--eager", action="store_true", help="build a Value graph every step (slow, to compare)"
    )
    p.add_argument(
        "--workers",
        type=_whole_number(1, 2),
        default=None,
        help="train data-parallel on a local Dask cluster of this many worker processes "
        '(needs pip install "adcompile[distributed]")',
    )
    p.set_defaults(run=cmd_demo)

    p = sub.add_parser("cache", help="the on-disk cache of generated code")
    p.add_argument("action", choices=["clear", "path"], help="clear it, or print where it is")
    p.set_defaults(run=cmd_cache)

    p = sub.add_parser(
        "bench",
        help="benchmark against micrograd, torch, jax and hand-written Numba (needs a "
        "checkout of the repository)",
        add_help=False,  # every argument, --help too, goes to the benchmark programs
    )
    p.set_defaults(run=cmd_bench)

    from .formula import add_check_parser, add_export_parser, add_grad_parser

    for add in (add_check_parser, add_grad_parser, add_export_parser):
        p = add(sub)
        p.set_defaults(run=p.get_default("func"))
    return parser


def cmd_cache(args: argparse.Namespace) -> int:
    """Clear the cache of generated code, or print its directory; a directory that
    cannot be used is one line on stderr and exit status 2."""
    from ..backend.jit import CacheDirError, cache_dir, clear_cache

    try:
        if args.action == "clear":
            n = clear_cache()
            print(f"removed {n} files from {cache_dir()}")
        else:
            print(cache_dir())
    except CacheDirError as e:
        print(f"adcompile cache: error: {e}", file=sys.stderr)
        return 2
    return 0


#: What ``adcompile bench`` says outside a checkout of the repository.
NO_CHECKOUT = (
    "adcompile bench: error: the benchmarks are not part of the installed package; they "
    "need a checkout of the adcompile repository: clone it with git, then in it run "
    "pip install -e '.[bench]' and adcompile bench --quick"
)

#: ``adcompile bench --help`` outside a checkout (in one, the benchmarks' own help).
BENCH_HELP = (
    "usage: adcompile bench [PROGRAM] [OPTIONS ...]\n\n"
    "Benchmark adcompile against micrograd, torch, jax and hand-written Numba, or run one "
    "of the programs first-call, call-overhead, eager, transforms, distributed, arrays.\n\n"
    "The benchmarks are not part of the installed package: they need a checkout of the "
    "adcompile repository. Clone it with git, then in it run pip install -e '.[bench]' and "
    "adcompile bench --help for the options."
)

#: The arguments that ask ``adcompile bench`` (or one of its programs) for help.
HELP_FLAGS = ("-h", "--help", "--help-bench")


def _bench_roots() -> list[Path]:
    """Where ``cmd_bench`` looks for a checkout: the one this package was installed from
    (``pip install -e``), then the current directory."""
    return [Path(__file__).resolve().parent.parent, Path.cwd()]


def cmd_bench(args: argparse.Namespace) -> int:
    """Run ``benchmarks.run`` from the checkout this package is in, or the current directory,
    with every argument after ``bench`` (``--help`` too: the program named first answers it)."""
    import importlib

    rest = list(args.rest)
    for root in _bench_roots():
        if (root / "benchmarks" / "systems" / "adcompile_compiled.py").is_file():
            break
    else:
        if any(a in HELP_FLAGS for a in rest):
            print(BENCH_HELP)
            return 0
        print(NO_CHECKOUT, file=sys.stderr)
        return 2
    if str(root) in sys.path:  # first, so that no other package named benchmarks shadows it
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    loaded = sys.modules.get("benchmarks")
    where = getattr(loaded, "__file__", None) or "."
    if loaded is not None and Path(where).resolve().parent.parent != root.resolve():
        print(
            f"adcompile bench: error: another package named benchmarks is already imported "
            f"({loaded.__file__}); run adcompile bench in a fresh process",
            file=sys.stderr,
        )
        return 2
    try:
        run = importlib.import_module("benchmarks.run")
    except ImportError as e:
        print(
            f"adcompile bench: error: cannot import the benchmarks of {root} ({e}); "
            "install their requirements there with pip install -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    rest = ["--help" if a == "--help-bench" else a for a in rest]  # (its older name)
    return run.main(rest, prog="adcompile bench")


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "run", None) is cmd_bench:
        args.rest = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command is None:
        parser.print_help()
        return 2
    with _warnings_in_one_line():
        return args.run(args)


@contextlib.contextmanager
def _warnings_in_one_line() -> Iterator[None]:
    """While a command runs, adcompile's own warnings (``adcompile: ...``) are one line
    on stderr, without the file and line of the library code that gave them."""
    import warnings

    show = warnings.showwarning

    def showwarning(message: Any, category: type, *args: Any, **kw: Any) -> None:
        text = str(message)
        if text.startswith("adcompile: "):
            print(f"adcompile: warning: {text.removeprefix('adcompile: ')}", file=sys.stderr)
        else:
            show(message, category, *args, **kw)

    with warnings.catch_warnings():
        warnings.showwarning = showwarning
        yield


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("adcompile")
    except PackageNotFoundError:
        return "unknown"


# ---------------------------------------------------------------- progress bar


class Progress:
    """A one-line progress bar on stderr (a line per tenth when it is not a terminal)."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total, self.width = max(total, 1), width
        self.stream = sys.stderr if stream is None else stream
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()
        self.shown = 0

    def update(self, done: int, **info: Any) -> None:
        """Show ``done`` of ``total`` steps and ``info`` (floats with 4 decimals)."""
        if not self.tty and done != self.total and done % max(self.total // 10, 1):
            return
        filled = self.width * done // self.total
        bar = "#" * filled + "-" * (self.width - filled)
        stats = " ".join(
            f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in info.items()
        )
        line = f"[{bar}] {done}/{self.total} {stats} {time.perf_counter() - self.start:.1f}s"
        self.stream.write(f"\r{line:<{self.shown}}" if self.tty else line + "\n")
        self.shown = max(self.shown, len(line))  # pad over a longer earlier line
        if self.tty and done == self.total:
            self.stream.write("\n")
        self.stream.flush()


# ---------------------------------------------------------------- demo

DEMO_DOC = (
    "Train micrograd's MLP(2, [16, 16, 1]) on the two-moons data set with the "
    "max-margin (hinge) loss plus 1e-4 L2 and SGD with a decaying learning rate, "
    "as in micrograd's demo notebook; print the accuracy and the decision boundary."
)


def _report(model: Any, X: Any, y: Any, args: argparse.Namespace) -> int:
    """The trained model's decision boundary, accuracy and picture (the demo's end)."""
    import numpy as np

    predict = _mlp_scores(model)
    accuracy = float(np.mean((predict(X) > 0) == (y > 0)))
    print(ascii_boundary(predict, X, y))
    print(f"final training accuracy: {100 * accuracy:.1f}% ({args.points} points)")
    if args.out and not _plot(predict, X, y, args.out, accuracy):
        return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Train an MLP on two moons with compiled gradients and show the decision boundary."""
    import numpy as np

    from ..api.events import summary
    from ..api.step import compile_loss
    from ..datasets import make_moons
    from ..nn import MLP, HingeLoss
    from ..optim import SGD
    from ..trace.mode import gc_paused

    X, y = make_moons(args.points, noise=0.1, seed=args.seed)
    random.seed(args.seed)
    model = MLP(2, [16, 16, 1])
    params = model.parameters()
    if getattr(args, "workers", None):
        if args.eager:
            print(
                "adcompile demo: error: --eager and --workers do not go together", file=sys.stderr
            )
            return 2
        return _demo_workers(args, X, y, model)
    opt = SGD(params, lr=1.0)
    hinge = HingeLoss()
    rows, labels = X.tolist(), y.tolist()
    print(
        f"training {model.__class__.__name__}(2, [16, 16, 1]) ({len(params)} parameters) "
        f"on {args.points} points for {args.steps} steps",
        file=sys.stderr,
    )

    def loss_fn(Xb: Any, yb: Any) -> Any:
        return hinge([model(r) for r in Xb], yb) + 1e-4 * sum(p * p for p in params)

    with gc_paused():
        step = None if args.eager else compile_loss(loss_fn, params)
        if step is not None:  # stage 1: the first call traces and compiles
            print("compiling the loss and its gradient ...", file=sys.stderr, flush=True)
            start = time.perf_counter()
            quiet = os.environ.get("ADCOMPILE_QUIET")
            os.environ["ADCOMPILE_QUIET"] = "1"  # (this stage says it itself)
            try:
                step.value_and_grad(X, y)
            finally:
                if quiet is None:
                    del os.environ["ADCOMPILE_QUIET"]
                else:
                    os.environ["ADCOMPILE_QUIET"] = quiet
            print(
                f"compiled in {time.perf_counter() - start:.1f} s ({summary(step.facts)})",
                file=sys.stderr,
            )
        bar = Progress(args.steps)  # stage 2: training
        start = time.perf_counter()
        for k in range(args.steps):
            loss = loss_fn(rows, labels) if step is None else step(X, y)
            acc = float(np.mean((_mlp_scores(model)(X) > 0) == (y > 0)))
            opt.zero_grad()
            loss.backward()
            opt.lr = 1.0 - 0.9 * k / args.steps
            opt.step()
            bar.update(k + 1, loss=loss.data, acc=f"{acc:.0%}")
    mode = "eager Values" if step is None else "compiled gradients"
    print(
        f"{args.steps} steps with {mode} in {time.perf_counter() - start:.1f} s", file=sys.stderr
    )

    return _report(model, X, y, args)


def _demo_workers(args: argparse.Namespace, X: Any, y: Any, model: Any) -> int:
    """``demo --workers N``: the same training, each step's loss and gradient computed
    data-parallel on a local Dask cluster of N worker processes."""
    import numpy as np

    from ..api.events import summary

    try:
        from .. import distributed as dd

        dd.dask_distributed()
        from distributed import Client, LocalCluster
    except ImportError as e:
        print(f"adcompile demo: error: {e}", file=sys.stderr)
        return 1
    params = model.parameters()
    shape = [(len(layer.neurons[0].w), len(layer.neurons), layer.neurons[0].nonlin)
             for layer in model.layers]  # fmt: skip
    print(
        f"training {model.__class__.__name__}(2, [16, 16, 1]) ({len(params)} parameters) "
        f"on {args.points} points for {args.steps} steps, data-parallel on "
        f"{args.workers} Dask worker processes",
        file=sys.stderr,
    )
    cluster = LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = Client(cluster)
    try:
        print(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr)
        vg = dd.value_and_grad(_flat_mlp_loss(shape), client=client)
        theta = np.array([p.data for p in params])
        print("compiling the loss and its gradient ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        quiet = os.environ.get("ADCOMPILE_QUIET")
        os.environ["ADCOMPILE_QUIET"] = "1"  # (this stage says it itself)
        try:
            vg(theta, X, y)
        finally:
            if quiet is None:
                del os.environ["ADCOMPILE_QUIET"]
            else:
                os.environ["ADCOMPILE_QUIET"] = quiet
        how = summary(vg.local.facts) if vg.local.last is not None else vg.last_program
        print(
            f"compiled in {time.perf_counter() - start:.1f} s ({how}; the workers run "
            f"{'its source' if vg.last_program == 'source' else 'the function'})",
            file=sys.stderr,
        )
        bar = Progress(args.steps)
        start = time.perf_counter()
        for k in range(args.steps):
            loss, g = vg(theta, X, y)
            acc = float(np.mean((_mlp_scores(model)(X) > 0) == (y > 0)))
            theta -= (1.0 - 0.9 * k / args.steps) * g  # the SGD step of the demo
            for p, v in zip(params, theta.tolist()):
                p.data = v
            bar.update(k + 1, loss=loss, acc=f"{acc:.0%}")
        print(
            f"{args.steps} steps with compiled gradients on {args.workers} workers in "
            f"{time.perf_counter() - start:.1f} s",
            file=sys.stderr,
        )
    finally:
        client.close()
        cluster.close()
    return _report(model, X, y, args)


def _flat_mlp_loss(shape: list[tuple[int, int, bool]]) -> Callable[..., Any]:
    """The demo's loss as a function of its parameters in one flat array, in the
    order of micrograd's ``MLP.parameters()`` (per neuron: weights, then bias)."""
    import numpy as np

    def mlp_hinge_loss(theta: Any, X: Any, y: Any) -> Any:
        h, start = X, 0
        for nin, nout, relu in shape:
            block = theta[start : start + nout * (nin + 1)].reshape(nout, nin + 1)
            start += nout * (nin + 1)
            h = h @ block[:, :nin].T + block[:, nin]
            if relu:
                h = np.maximum(h, 0.0)
        return np.mean(np.maximum(1.0 - y * h[:, 0], 0.0)) + 1e-4 * np.sum(theta * theta)

    return mlp_hinge_loss


def _mlp_scores(model: Any) -> Callable[[Any], Any]:
    """The trained MLP as a NumPy function of an (n, 2) float array (fast, no graph)."""
    import numpy as np

    layers = [
        (
            np.array([[w.data for w in n.w] for n in layer.neurons]),
            np.array([n.b.data for n in layer.neurons]),
            layer.neurons[0].nonlin,
        )
        for layer in model.layers
    ]

    def predict(P: Any) -> Any:
        h = np.asarray(P, dtype=float)
        for W, b, relu in layers:
            h = h @ W.T + b
            if relu:
                h = np.maximum(h, 0.0)
        return h[:, 0]

    return predict


def ascii_boundary(
    predict: Callable[[Any], Any], X: Any, y: Any, cols: int = 64, rows: int = 22
) -> str:
    """An ASCII picture: '.' where the model says +1, 'o'/'x' for +1/-1 data points."""
    import numpy as np

    lo, hi = X.min(axis=0) - 0.25, X.max(axis=0) + 0.25
    xs = lo[0] + (np.arange(cols) + 0.5) * (hi[0] - lo[0]) / cols
    ys = hi[1] - (np.arange(rows) + 0.5) * (hi[1] - lo[1]) / rows
    gx, gy = np.meshgrid(xs, ys)
    region = predict(np.column_stack([gx.ravel(), gy.ravel()])).reshape(rows, cols) > 0
    grid = [["." if r else " " for r in row] for row in region]
    cx = ((X[:, 0] - lo[0]) / (hi[0] - lo[0]) * cols).astype(int).clip(0, cols - 1)
    cy = ((hi[1] - X[:, 1]) / (hi[1] - lo[1]) * rows).astype(int).clip(0, rows - 1)
    for i, j, label in zip(cy, cx, y):
        grid[i][j] = "o" if label > 0 else "x"
    border = "+" + "-" * cols + "+"
    return "\n".join([border, *("|" + "".join(r) + "|" for r in grid), border])


def _plot(
    predict: Callable[[Any], Any], X: Any, y: Any, path: str, accuracy: float | None = None
) -> bool:
    """Save a picture of the decision boundary to ``path``; False if it cannot be written.

    The shaded regions (where the model says +1 or -1), the boundary between
    them and the training points of each class are all in the legend, which
    sits outside the axes, right of them, so that it hides no data and no
    boundary.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        print("matplotlib is not installed, so no PNG (pip install matplotlib)")
        return True
    import numpy as np

    lo, hi = X.min(axis=0) - 1.0, X.max(axis=0) + 1.0
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], 300), np.linspace(lo[1], hi[1], 300))
    score = predict(np.column_stack([gx.ravel(), gy.ravel()])).reshape(gx.shape)
    fig, ax = plt.subplots(figsize=(8, 5))
    style = dict(cmap=plt.cm.Spectral, vmin=-1.0, vmax=1.0)
    shade = ax.contourf(gx, gy, np.sign(score), levels=[-1.5, 0.0, 1.5], alpha=0.5, **style)
    regions, _ = shade.legend_elements()  # a patch in each band's colour: -1, then +1
    handles = []
    for label, name in ((1.0, "class +1 points"), (-1.0, "class -1 points")):
        on = y == label
        handles.append(
            ax.scatter(X[on, 0], X[on, 1], c=y[on], s=30, edgecolors="k", label=name, **style)
        )
    regions[1].set_label("model says +1 (shaded)")
    regions[0].set_label("model says -1 (shaded)")
    handles += [regions[1], regions[0]]
    if score.min() < 0.0 < score.max():  # (a model that says one class everywhere has none)
        ax.contour(gx, gy, score, levels=[0.0], colors="k", linewidths=1.0)
        handles.append(Line2D([], [], color="k", linewidth=1.0, label="decision boundary"))
    ax.set_xlabel("x0 (first feature)")
    ax.set_ylabel("x1 (second feature)")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    title = "adcompile demo: MLP(2, [16, 16, 1]) on two moons"
    if accuracy is not None:
        title += f"\ntraining accuracy {100 * accuracy:.1f}%"
    ax.set_title(title)
    try:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    except OSError as e:
        print(f"adcompile demo: error: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return False
    finally:
        plt.close(fig)
    print(f"wrote {path}")
    return True


if __name__ == "__main__":
    sys.exit(main())
