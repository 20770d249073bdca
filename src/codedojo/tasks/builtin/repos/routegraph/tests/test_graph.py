import pytest

from routegraph.graph import Graph, GraphError


def test_undirected_edges_both_ways():
    g = Graph.from_edges([("a", "b", 2)])
    assert g.neighbors("a") == ["b"]
    assert g.neighbors("b") == ["a"]


def test_directed_edges_one_way():
    g = Graph.from_edges([("a", "b")], directed=True)
    assert g.neighbors("a") == ["b"]
    assert g.neighbors("b") == []


def test_negative_weight_rejected():
    with pytest.raises(GraphError):
        Graph().add_edge("a", "b", -1)


def test_edges_listed_once():
    g = Graph.from_edges([("b", "a", 1), ("b", "c", 2)])
    assert g.edges() == [("a", "b", 1), ("b", "c", 2)]


def test_directed_edges_listing():
    g = Graph.from_edges([("b", "a", 1), ("a", "b", 3)], directed=True)
    assert g.edges() == [("a", "b", 3), ("b", "a", 1)]


def test_remove_edge():
    g = Graph.from_edges([("a", "b"), ("b", "c")])
    g.remove_edge("b", "a")
    assert g.neighbors("a") == []
    assert g.neighbors("b") == ["c"]
    with pytest.raises(GraphError):
        g.remove_edge("a", "b")


def test_degrees():
    g = Graph.from_edges([("a", "b"), ("c", "b"), ("b", "d")], directed=True)
    assert g.degree("b") == 1
    assert g.in_degree("b") == 2
    assert g.in_degree("a") == 0


def test_unknown_node():
    with pytest.raises(GraphError):
        Graph().neighbors("x")


def test_isolated_node():
    g = Graph()
    g.add_node("solo")
    assert g.nodes() == ["solo"]
    assert g.degree("solo") == 0
