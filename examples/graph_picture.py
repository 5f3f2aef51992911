"""A picture of a small expression's graph, as micrograd's draw_dot shows it.

    python examples/graph_picture.py [--out graph.svg]

``ad.to_dot`` returns Graphviz DOT text (no dependency); ``ad.draw`` renders
it when the ``graphviz`` package and the system's ``dot`` are installed.
"""

import argparse

import adcompile as ad

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--out", default="graph.svg")
args = ap.parse_args()

x1, x2 = ad.Value(2.0, label="x1"), ad.Value(0.0, label="x2")
w1, w2 = ad.Value(-3.0, label="w1"), ad.Value(1.0, label="w2")
b = ad.Value(6.8813735870195432, label="b")
n = x1 * w1 + x2 * w2 + b
n.label = "n"
o = n.tanh()
o.label = "o"
o.backward()

print(ad.to_dot(o))
try:
    print("wrote", ad.draw(o, args.out))
except ad.GraphvizMissing as e:
    print(e)
