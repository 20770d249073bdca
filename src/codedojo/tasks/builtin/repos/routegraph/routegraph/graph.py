"""The graph type."""

from __future__ import annotations


class GraphError(ValueError):
    """Invalid graph operation."""


class Graph:
    def __init__(self, *, directed: bool = False) -> None:
        self.directed = directed
        self.adjacency: dict[str, dict[str, float]] = {}

    def add_node(self, node: str) -> None:
        self.adjacency.setdefault(node, {})

    def add_edge(self, a: str, b: str, weight: float = 1.0) -> None:
        if weight < 0:
            raise GraphError(f"negative weight {weight} on {a}-{b}")
        self.add_node(a)
        self.add_node(b)
        self.adjacency[a][b] = weight
        if not self.directed:
            self.adjacency[b][a] = weight

    def remove_edge(self, a: str, b: str) -> None:
        if b not in self.adjacency.get(a, {}):
            raise GraphError(f"no edge {a}-{b}")
        del self.adjacency[a][b]
        if not self.directed:
            del self.adjacency[b][a]

    def nodes(self) -> list[str]:
        return sorted(self.adjacency)

    def neighbors(self, node: str) -> list[str]:
        if node not in self.adjacency:
            raise GraphError(f"unknown node {node!r}")
        return sorted(self.adjacency[node])

    def edges(self) -> list[tuple[str, str, float]]:
        """Each edge once (for undirected graphs, with the smaller name first)."""
        out = []
        for a in self.nodes():
            for b, w in sorted(self.adjacency[a].items()):
                if self.directed or a <= b:
                    out.append((a, b, w))
        return out

    def degree(self, node: str) -> int:
        return len(self.neighbors(node))

    def in_degree(self, node: str) -> int:
        return sum(1 for a in self.adjacency if node in self.adjacency[a])

    @classmethod
    def from_edges(cls, edges: list[tuple], *, directed: bool = False) -> Graph:
        graph = cls(directed=directed)
        for edge in edges:
            graph.add_edge(*edge)
        return graph
