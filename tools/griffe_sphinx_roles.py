"""A griffe extension of the API reference (mkdocs.yml): Sphinx roles in docstrings become links.

jobchain's docstrings cross-reference with Sphinx roles (:class:`Client`,
:meth:`~jobchain.Client.start_chain`), which mkdocstrings, rendering Markdown, would show as
``:class:`` followed by code. Each role becomes an optional autorefs cross-reference instead:
a link to the object's heading when the site documents it, the name in code otherwise, so an
object left out of the reference never fails ``mkdocs build --strict``. The name is resolved
where the docstring is, as Python would (members, imports, then the enclosing scopes), and
``~`` shows only the last component, as in Sphinx.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from functools import partial
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`(?P<body>[^`]+)`")
EXPLICIT_TITLE = re.compile(r"(?P<title>.+?)\s*<(?P<target>[^<>]+)>")


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is not None and ":`" in docstring.value:
                docstring.value = ROLE.sub(partial(_role, obj), docstring.value)


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if isinstance(member, griffe.Object):  # aliases are documented where they point
            yield from _objects(member)


def _role(obj: griffe.Object, match: re.Match[str]) -> str:
    body = match["body"]
    explicit = EXPLICIT_TITLE.fullmatch(body)
    if explicit is not None:
        title, target = explicit["title"], explicit["target"]
    else:
        target = body.removeprefix("~")
        title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
    target = target.lstrip(".")
    code = f"<code>{html.escape(title)}</code>"
    return f'<autoref identifier="{html.escape(_resolve(obj, target))}" optional>{code}</autoref>'


def _resolve(obj: griffe.Object, target: str) -> str:
    """``target``'s full path, seen from ``obj``; ``target`` itself when it is not a name there."""
    head, dot, rest = target.partition(".")
    try:
        return obj.resolve(head) + dot + rest
    except griffe.NameResolutionError:
        return target
