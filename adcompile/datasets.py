"""Small data sets generated in code (no download, no scikit-learn)."""

from __future__ import annotations

import numpy as np


def make_moons(
    n: int = 100,
    noise: float = 0.1,
    seed: int = 1,
    *,
    n_samples: int | None = None,
    random_state: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaving half circles as scikit-learn makes them; labels -1 (outer) and
    +1, as the micrograd demo makes them of scikit-learn's (``y * 2 - 1``: leave that
    out). ``n_samples`` and ``random_state`` are scikit-learn's names for ``n`` and
    ``seed``."""
    n = n if n_samples is None else n_samples
    seed = seed if random_state is None else random_state
    if n < 2:
        raise ValueError(f"make_moons needs at least 2 points, not {n}")
    rng = np.random.default_rng(seed)
    n_out = n // 2
    n_in = n - n_out
    t_out = np.linspace(0.0, np.pi, n_out)
    t_in = np.linspace(0.0, np.pi, n_in)
    X = np.vstack(
        [
            np.append(np.cos(t_out), 1.0 - np.cos(t_in)),
            np.append(np.sin(t_out), 1.0 - np.sin(t_in) - 0.5),
        ]
    ).T
    y = np.hstack([-np.ones(n_out), np.ones(n_in)])
    order = rng.permutation(n)
    X, y = X[order], y[order]
    X += rng.normal(scale=noise, size=X.shape)
    return X, y
