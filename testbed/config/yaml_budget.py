"""YAML parsing with a budget: a spec may not expand into more than a spec's worth of data.

PyYAML's aliases (``*name`` refers to the node anchored ``&name``) are shared, not copied,
when a document is composed, so a few lines that refer to each other ten times per level
(the "billion laughs") load in no time and then become gigabytes the moment anything walks
them: the ``--set`` copy, pydantic's validation, the manifest's JSON. An alias to a node that
contains it makes a cycle that nothing can walk at all. So each document's node graph is
measured before it is turned into Python objects: its size with every alias expanded must
stay within ``MAX_YAML_NODES``, and no alias may refer to a node that holds it.

Pure: PyYAML and the standard library.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_YAML_NODES", "MAX_SPEC_BYTES", "YamlTooLarge", "safe_load"]

# Far above any real spec (a sweep of a thousand seeds is about a thousand nodes), far below
# what would take memory or time to expand.
MAX_YAML_NODES = 100_000

# The largest spec file read at all (checked before reading it).
MAX_SPEC_BYTES = 2**20


class YamlTooLarge(ValueError):
    """The document would expand beyond the budget, or an alias refers to a node that holds it."""


class _BudgetLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that measures each composed document before constructing it."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _check_expanded_size(node)
        return node


def _check_expanded_size(root: yaml.Node) -> None:
    """Raise ``YamlTooLarge`` when ``root`` expands to more than ``MAX_YAML_NODES`` nodes or
    holds a cycle. Each distinct node is visited once (its expanded size is remembered), so
    the check costs as much as the document as written, not as expanded."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [part for pair in node.value for part in pair]
        return []

    # Iterative post-order walk: a deep document must not hit Python's recursion limit.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        key = id(node)
        if expanded:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children(node))
            if sizes[key] > MAX_YAML_NODES:
                raise YamlTooLarge(
                    f"the document expands to more than {MAX_YAML_NODES} YAML nodes (its aliases, *name, repeat "
                    f"what &name anchors); at most {MAX_YAML_NODES} are allowed: write the values out, or use "
                    f"fewer aliases")
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            mark = node.start_mark
            raise YamlTooLarge(f"an alias refers to itself: the node anchored at line {mark.line + 1} holds an "
                               f"alias to it; an alias may only repeat a node that does not contain it")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children(node)) if id(child) not in sizes)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` within the budget; raises ``yaml.YAMLError`` for bad syntax and
    ``YamlTooLarge`` for a document that expands too far or refers to itself."""
    return yaml.load(text, Loader=_BudgetLoader)  # noqa: S506 - a SafeLoader subclass
