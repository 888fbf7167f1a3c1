"""A task's instruction, markdown written by whoever wrote the task, as HTML safe to put in a page.

Two locks: markdown-it renders with raw HTML off (an `<iframe>` or `<script>` in the source stays text), then
nh3 (ammonia) keeps only the tags and attributes of plain prose, links to http(s) and mailto only, so
`javascript:` links and event handlers cannot survive either layer.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

_RENDERER = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li", "ol",
    "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
ATTRIBUTES = {"a": {"href", "title"}, "code": {"class"}, "th": {"align"}, "td": {"align"}}
SCHEMES = {"http", "https", "mailto"}


def instruction_html(source: str) -> Markup:
    rendered = _RENDERER.render(source)
    return Markup(
        nh3.clean(
            rendered,
            tags=TAGS,
            attributes=ATTRIBUTES,
            url_schemes=SCHEMES,
            link_rel="noopener noreferrer nofollow",
        )
    )
