"""The lineage graph around a dataset, from the list rows' inputs."""

from __future__ import annotations

from node.web.graph import MAX_DEPTH, MAX_PER_COLUMN, lineage_graph
from node.web.lineage import lineage_svg
from node.web.rows import DatasetRow


def row(name: str, *inputs: str) -> DatasetRow:
    return DatasetRow(name, f"did:{name}", inputs=tuple(f"did:{i}" for i in inputs))


def columns(graph: object) -> dict[str, int]:
    return {n.label: n.column for n in graph.nodes}  # type: ignore[attr-defined]


def test_diamond_upstream_and_downstream() -> None:
    rows = [row("a"), row("b", "a"), row("c", "a"), row("d", "b", "c"), row("e", "d"), row("x")]
    graph = lineage_graph("did:d", rows)
    assert columns(graph) == {"a": -2, "b": -1, "c": -1, "d": 0, "e": 1}
    assert sorted(graph.edges) == [
        ("did:a", "did:b"),
        ("did:a", "did:c"),
        ("did:b", "did:d"),
        ("did:c", "did:d"),
        ("did:d", "did:e"),
    ]
    svg = lineage_svg(graph, "d")
    assert svg.count('class="lin-edge"') == 5 and svg.count("<a href=") == 4


def test_an_input_not_held_is_a_dashed_box_without_link() -> None:
    graph = lineage_graph("did:b", [row("b", "gone")])
    node = next(n for n in graph.nodes if n.column == -1)
    assert node.label == "did:gone" and not node.held
    svg = lineage_svg(graph, "b")
    assert "lin-missing" in svg and "<a href=" not in svg


def test_depth_and_width_are_capped() -> None:
    chain = [row("n0")] + [row(f"n{i}", f"n{i - 1}") for i in range(1, 10)]
    assert max(columns(lineage_graph("did:n0", chain)).values()) == MAX_DEPTH
    wide = [row("src")] + [row(f"r{i:02d}", "src") for i in range(40)]
    cols = columns(lineage_graph("did:src", wide))
    assert sum(1 for c in cols.values() if c == 1) == MAX_PER_COLUMN


def test_a_cycle_does_not_loop() -> None:
    graph = lineage_graph("did:a", [row("a", "b"), row("b", "a")])
    assert columns(graph) == {"a": 0, "b": -1}
