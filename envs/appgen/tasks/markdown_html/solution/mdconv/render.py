"""Blocks to HTML."""

from mdconv.blocks import parse_blocks
from mdconv.inline import escape, render_inline


def render_block(block):
    if block.kind == "heading":
        return f"<h{block.level}>{render_inline(block.text)}</h{block.level}>"
    if block.kind == "code":
        cls = f' class="language-{escape(block.lang)}"' if block.lang else ""
        body = "".join(escape(line) + "\n" for line in block.lines)
        return f"<pre><code{cls}>{body}</code></pre>"
    if block.kind == "rule":
        return "<hr />"
    if block.kind == "quote":
        inner = "\n".join(render_block(b) for b in block.children)
        return f"<blockquote>\n{inner}\n</blockquote>"
    if block.kind == "list":
        tag = "ol" if block.ordered else "ul"
        opening = (
            f'<ol start="{block.start}">' if block.ordered and block.start != 1 else f"<{tag}>"
        )
        items = [f"<li>{render_inline(item)}</li>" for item in block.items]
        return "\n".join([opening, *items, f"</{tag}>"])
    return f"<p>{render_inline(block.text)}</p>"


def to_html(text):
    blocks = parse_blocks(text)
    if not blocks:
        return ""
    return "\n".join(render_block(b) for b in blocks) + "\n"
