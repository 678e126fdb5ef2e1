"""mdconv: convert a Markdown subset to HTML."""

from mdconv.render import to_html

__all__ = ["to_html"]
