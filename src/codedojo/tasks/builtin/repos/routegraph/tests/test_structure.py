import pytest

from routegraph.graph import Graph, GraphError
from routegraph.structure import components, has_cycle, minimum_spanning_tree, topological_order


def test_topological_order():
    g = Graph.from_edges([("shirt", "tie"), ("tie", "jacket"), ("pants", "shoes"), ("pants", "belt"),
                          ("belt", "jacket"), ("shirt", "belt")], directed=True)
    assert topological_order(g) == ["pants", "shirt", "belt", "shoes", "tie", "jacket"]


def test_topological_order_cycle():
    g = Graph.from_edges([("a", "b"), ("b", "c"), ("c", "a")], directed=True)
    with pytest.raises(GraphError):
        topological_order(g)


def test_topological_order_needs_directed():
    with pytest.raises(GraphError):
        topological_order(Graph.from_edges([("a", "b")]))


def test_has_cycle_directed():
    assert has_cycle(Graph.from_edges([("a", "b"), ("b", "a")], directed=True))
    assert not has_cycle(Graph.from_edges([("a", "b"), ("a", "c"), ("b", "c")], directed=True))


def test_has_cycle_undirected():
    assert has_cycle(Graph.from_edges([("a", "b"), ("b", "c"), ("c", "a")]))
    assert not has_cycle(Graph.from_edges([("a", "b"), ("b", "c"), ("c", "d")]))


def test_components():
    g = Graph.from_edges([("d", "e"), ("a", "b"), ("b", "c")])
    g.add_node("z")
    assert components(g) == [["a", "b", "c"], ["d", "e"], ["z"]]


def test_minimum_spanning_tree():
    g = Graph.from_edges([("a", "b", 4), ("a", "c", 1), ("b", "c", 2), ("b", "d", 5), ("c", "d", 8)])
    assert minimum_spanning_tree(g) == (8, [("a", "c", 1), ("b", "c", 2), ("b", "d", 5)])


def test_minimum_spanning_tree_ties_and_forest():
    g = Graph.from_edges([("a", "b", 1), ("b", "c", 1), ("a", "c", 1), ("x", "y", 2)])
    total, edges = minimum_spanning_tree(g)
    assert total == 4
    assert edges == [("a", "b", 1), ("a", "c", 1), ("x", "y", 2)]


def test_minimum_spanning_tree_needs_undirected():
    with pytest.raises(GraphError):
        minimum_spanning_tree(Graph.from_edges([("a", "b")], directed=True))
