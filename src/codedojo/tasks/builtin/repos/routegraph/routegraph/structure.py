"""Ordering, cycles, components and spanning trees."""

from __future__ import annotations

from routegraph.graph import Graph, GraphError


def topological_order(graph: Graph) -> list[str]:
    """Kahn's algorithm, smallest available name first. Raises GraphError on a cycle."""
    if not graph.directed:
        raise GraphError("topological order needs a directed graph")
    indegree = {n: graph.in_degree(n) for n in graph.nodes()}
    ready = sorted(n for n, d in indegree.items() if d == 0)
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for nxt in graph.neighbors(node):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
                ready.sort()
    if len(order) != len(indegree):
        raise GraphError("graph has a cycle")
    return order


def has_cycle(graph: Graph) -> bool:
    if graph.directed:
        try:
            topological_order(graph)
        except GraphError:
            return True
        return False
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for a, b, _ in graph.edges():
        ra, rb = find(a), find(b)
        if ra == rb:
            return True
        parent[ra] = rb
    return False


def components(graph: Graph) -> list[list[str]]:
    """Connected components of an undirected graph, each sorted, ordered by first member."""
    seen: set[str] = set()
    out = []
    for start in graph.nodes():
        if start in seen:
            continue
        stack = [start]
        group = []
        seen.add(start)
        while stack:
            node = stack.pop()
            group.append(node)
            for nxt in graph.neighbors(node):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        out.append(sorted(group))
    return out


def minimum_spanning_tree(graph: Graph) -> tuple[float, list[tuple[str, str, float]]]:
    """Kruskal: (total weight, edges sorted by weight then names)."""
    if graph.directed:
        raise GraphError("spanning trees need an undirected graph")
    parent = {n: n for n in graph.nodes()}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    chosen = []
    total = 0.0
    for a, b, w in sorted(graph.edges(), key=lambda e: (e[2], e[0], e[1])):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
            chosen.append((a, b, w))
            total += w
    return total, chosen
