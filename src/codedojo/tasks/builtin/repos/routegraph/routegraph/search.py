"""Traversal and shortest paths."""

from __future__ import annotations

import heapq
from collections import deque

from routegraph.graph import Graph, GraphError


def bfs_order(graph: Graph, start: str) -> list[str]:
    """Nodes in breadth-first order from `start`, neighbours visited alphabetically."""
    seen = {start}
    order = []
    queue = deque([start])
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in graph.neighbors(node):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return order


def hop_path(graph: Graph, start: str, goal: str) -> list[str] | None:
    """Fewest-edges path, or None."""
    parents: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = []
            current: str | None = node
            while current is not None:
                path.append(current)
                current = parents[current]
            return path[::-1]
        for nxt in graph.neighbors(node):
            if nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    return None


def shortest_path(graph: Graph, start: str, goal: str) -> tuple[float, list[str]]:
    """Dijkstra: (total weight, path). Raises GraphError when `goal` is unreachable."""
    if start not in graph.adjacency or goal not in graph.adjacency:
        raise GraphError(f"unknown node in {start!r} -> {goal!r}")
    best = {start: 0.0}
    parents: dict[str, str] = {}
    heap = [(0.0, start)]
    done = set()
    while heap:
        dist, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        if node == goal:
            break
        for nxt, weight in graph.adjacency[node].items():
            candidate = dist + weight
            if candidate < best.get(nxt, float("inf")):
                best[nxt] = candidate
                parents[nxt] = node
                heapq.heappush(heap, (candidate, nxt))
    if goal not in done:
        raise GraphError(f"{goal!r} is not reachable from {start!r}")
    path = [goal]
    while path[-1] != start:
        path.append(parents[path[-1]])
    return best[goal], path[::-1]


def eccentricity(graph: Graph, node: str) -> int:
    """Largest number of hops from `node` to any reachable node."""
    depth = {node: 0}
    queue = deque([node])
    while queue:
        current = queue.popleft()
        for nxt in graph.neighbors(current):
            if nxt not in depth:
                depth[nxt] = depth[current] + 1
                queue.append(nxt)
    return max(depth.values())
