import pytest

from routegraph.graph import Graph, GraphError
from routegraph.search import bfs_order, eccentricity, hop_path, shortest_path

ROADS = Graph.from_edges(
    [("a", "b", 4), ("a", "c", 1), ("c", "b", 2), ("b", "d", 1), ("c", "d", 5), ("d", "e", 3)]
)


def test_bfs_order():
    assert bfs_order(ROADS, "a") == ["a", "b", "c", "d", "e"]


def test_bfs_order_directed():
    g = Graph.from_edges([("x", "z"), ("x", "y"), ("y", "w")], directed=True)
    assert bfs_order(g, "x") == ["x", "y", "z", "w"]
    assert bfs_order(g, "w") == ["w"]


def test_hop_path():
    assert hop_path(ROADS, "a", "e") == ["a", "b", "d", "e"]
    assert hop_path(ROADS, "a", "a") == ["a"]


def test_hop_path_unreachable():
    g = Graph.from_edges([("a", "b"), ("c", "d")])
    assert hop_path(g, "a", "d") is None


def test_shortest_path_prefers_lighter_route():
    assert shortest_path(ROADS, "a", "e") == (7, ["a", "c", "b", "d", "e"])


def test_shortest_path_to_self():
    assert shortest_path(ROADS, "b", "b") == (0, ["b"])


def test_shortest_path_directed_unreachable():
    g = Graph.from_edges([("a", "b", 1)], directed=True)
    with pytest.raises(GraphError):
        shortest_path(g, "b", "a")


def test_shortest_path_unknown_node():
    with pytest.raises(GraphError):
        shortest_path(ROADS, "a", "zz")


def test_eccentricity():
    assert eccentricity(ROADS, "a") == 3
    assert eccentricity(ROADS, "d") == 2
