"""adcompile.viz: DOT text of Value graphs and tapes, summaries, and draw's errors."""

from __future__ import annotations

import re
import shutil
import sys

import pytest

from adcompile import viz
from adcompile.ir.ops import OPS
from adcompile.ir.tape import CONST, INPUT, Node, Tape
from adcompile.trace.value import Value, topological_order

NODE = re.compile(r"^\s*(\w+) \[(.*)\];$")
EDGE = re.compile(r"^\s*(\w+) -> (\w+)( \[.*\])?;$")


def parse(dot: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Node ids with their attributes, and the edges; fails on any line it cannot read."""
    lines = dot.strip().splitlines()
    assert lines[0] == "digraph G {" and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[1:-1]:
        if m := EDGE.match(line):
            edges.append((m[1], m[2]))
        elif (m := NODE.match(line)) and m[1] not in ("node", "graph", "edge"):
            nodes[m[1]] = m[2]
        else:
            assert re.match(r"^\s*(rankdir=\w+|node \[.*\]);$", line), line
    for a, b in edges:
        assert a in nodes and b in nodes, (a, b)
    return nodes, edges


def small_graph():
    a = Value(2.0, label="a")
    b = Value(-3.0, label="b")
    c = a * b
    c.label = "c"
    d = c + 10.0
    d.label = "d"
    e = d.tanh()
    e.label = "out"
    e.backward()
    return a, b, c, d, e


def test_dot_names_every_value_and_op():
    a, b, c, d, e = small_graph()
    nodes, edges = parse(viz.to_dot(e))
    values = topological_order([e])
    assert len(values) == 6  # a, b, c, the constant 10, d, e
    records = {k: v for k, v in nodes.items() if "shape=record" in v}
    ops = {k: v for k, v in nodes.items() if k.endswith("_op")}
    assert len(records) == 6 and len(ops) == 3
    assert sorted(v.split('"')[1] for v in ops.values()) == ["*", "+", "tanh"]
    # each op: its output gets one edge from the op node, and one edge per operand
    assert len(edges) == 3 + 2 + 2 + 1
    text = " ".join(records.values())
    for v in (a, b, c, d, e):
        assert f"{{ {v.label} | data {v.data:.4g} | grad {v.grad:.4g} }}" in text
    assert "data 10 | grad" in text
    assert "penwidth=2" in nodes[max(records, key=lambda k: int(k[1:]))]  # the output


def test_record_characters_are_escaped():
    v = Value(1.0, label='x|{y}<z>"w"')
    nodes, _ = parse(viz.to_dot(v))
    assert r"x\|\{y\}\<z\>\"w\"" in next(iter(nodes.values()))


def test_dot_of_a_tape_names_slots_and_ops():
    nodes_ = [Node(INPUT), Node(INPUT), Node(CONST, (), 2.5)]
    nodes_ += [Node(OPS["mul"], (0, 1)), Node(OPS["sin"], (3,)), Node(OPS["add"], (4, 2))]
    tape = Tape(nodes_, [0, 1], [5], names=["x", "y"])
    nodes, edges = parse(viz.to_dot(tape))
    labels = " ".join(nodes.values())
    for i in range(6):
        assert f"v{i}" in labels
    assert "input x" in labels and "input y" in labels and "2.5" in labels
    assert sorted(v.split('"')[1] for k, v in nodes.items() if k.endswith("_op")) == [
        "add", "mul", "sin",
    ]  # fmt: skip
    assert ("n3", "n4_op") in edges and ("n2", "n5_op") in edges


def test_large_graph_is_summarised():
    x = Value(0.3)
    for _ in range(1000):
        x = x.sin() + 0.5 * x
    dot = viz.to_dot(x, max_nodes=500, keep=40)
    nodes, edges = parse(dot)
    assert len([k for k in nodes if not k.endswith("_op")]) <= 40 + 1  # + the summary
    summary = nodes["summary"]
    total = len(topological_order([x]))
    assert f"{total} nodes" in summary
    for op in ("sin: 1000", "*: 1000", "+: 1000"):
        assert op in summary
    assert any(a == "summary" for a, _ in edges)
    # the output is among the drawn nodes
    assert any("penwidth=2" in attrs for attrs in nodes.values())
    assert len(dot) < 20_000


def test_small_graph_is_not_summarised():
    *_, e = small_graph()
    assert "summary" not in viz.to_dot(e, max_nodes=6)
    assert "summary" in viz.to_dot(e, max_nodes=5, keep=2)


def test_to_dot_rejects_other_things():
    with pytest.raises(TypeError, match="Value"):
        viz.to_dot(3.0)


def test_draw_without_the_graphviz_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz now fails
    with pytest.raises(viz.GraphvizMissing) as err:
        viz.draw(Value(1.0), tmp_path / "g.png")
    assert "pip install graphviz" in str(err.value)
    assert "apt-get install graphviz" in str(err.value)


def test_draw_without_dot_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(viz.GraphvizMissing, match="apt-get install graphviz"):
        viz.draw(Value(1.0), tmp_path / "g.svg")


def test_draw_rejects_unknown_formats(tmp_path):
    with pytest.raises(ValueError, match="png"):
        viz.draw(Value(1.0), tmp_path / "g.txt")


def test_draw_renders_svg_when_graphviz_is_installed(tmp_path):
    pytest.importorskip("graphviz")
    if shutil.which("dot") is None:
        pytest.skip("the Graphviz 'dot' program is not installed")
    *_, e = small_graph()
    path = viz.draw(e, tmp_path / "g.svg")
    text = open(path).read()
    assert "<svg" in text and "tanh" in text
