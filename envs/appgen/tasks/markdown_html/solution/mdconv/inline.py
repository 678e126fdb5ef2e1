"""Inline Markdown: code spans, links, strong, emphasis, escaping."""

import html


def escape(text):
    return html.escape(text, quote=True).replace("&#x27;", "'")


def _find_link(text, i):
    """If a link starts at text[i] ('['), return (label, url, end index), else None."""
    close = text.find("]", i + 1)
    if close < 0 or close + 1 >= len(text) or text[close + 1] != "(":
        return None
    end = text.find(")", close + 2)
    if end < 0:
        return None
    return text[i + 1 : close], text[close + 2 : end], end + 1


def render_inline(text, links=True):
    out = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "`":
            end = text.find("`", i + 1)
            if end > i:
                out.append(f"<code>{escape(text[i + 1 : end])}</code>")
                i = end + 1
                continue
        elif ch == "[" and links:
            found = _find_link(text, i)
            if found:
                label, url, i = found
                out.append(f'<a href="{escape(url)}">{render_inline(label, links=False)}</a>')
                continue
        elif text.startswith("**", i):
            end = text.find("**", i + 2)
            if end > i + 2:
                out.append(f"<strong>{render_inline(text[i + 2 : end], links)}</strong>")
                i = end + 2
                continue
        elif ch in "*_":
            end = text.find(ch, i + 1)
            if ch == "*":
                while end > 0 and text.startswith("**", end):
                    inner_end = text.find("**", end + 2)
                    if inner_end < 0:
                        break
                    end = text.find("*", inner_end + 2)
            if end > i + 1:
                out.append(f"<em>{render_inline(text[i + 1 : end], links)}</em>")
                i = end + 1
                continue
        out.append(escape(ch))
        i += 1
    return "".join(out)
