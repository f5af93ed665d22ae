"""Syntax highlighting for the kernel views: source text -> one HTML fragment per line.

The views put every line in its own table cell (side-by-side IR, changed-line marks), so the highlighter
works per line and styles with inline `style` attributes only: the HTML must render the same on GitHub,
nbconvert and Sphinx, where no stylesheet of ours is loaded. Tokens come from Pygments (already a dependency
of IPython); the colours are a small fixed palette so the output is byte-for-byte deterministic. Without
Pygments the lines are only escaped.
"""
from __future__ import annotations

import html

__all__ = ["LANGUAGES", "escape", "highlight_lines"]

#: Languages the views know; the value is the Pygments lexer name (None: plain text).
LANGUAGES = {"python": "python", "cuda": "cuda", "ptx": "ptx", "text": None}

# Token type (as Pygments names it, most specific first) -> inline CSS. A light palette close to GitHub's.
_PALETTE = (
    ("Comment", "color:#6e7781;font-style:italic"),
    ("Keyword.Type", "color:#953800"),
    ("Keyword", "color:#cf222e"),
    ("Name.Decorator", "color:#8250df"),
    ("Name.Function", "color:#8250df"),
    ("Name.Class", "color:#8250df"),
    ("Name.Builtin", "color:#0550ae"),
    ("Name.Variable", "color:#953800"),
    ("Literal.String", "color:#0a3069"),
    ("Literal.Number", "color:#0550ae"),
    ("Operator.Word", "color:#cf222e"),
)


def escape(text: str) -> str:
    """HTML-escape `text` (quotes included), the same way everywhere in the views."""
    return html.escape(text, quote=True)


def _style_for(token_type) -> str | None:
    name = str(token_type).removeprefix("Token.")
    for prefix, style in _PALETTE:
        if name == prefix or name.startswith(prefix + "."):
            return style
    return None


def _lexer(language: str):
    lexer_name = LANGUAGES.get(language)
    if lexer_name is None:
        return None
    try:
        from pygments.lexers import get_lexer_by_name
    except ImportError:  # Pygments comes with IPython; plain text is the graceful fallback
        return None
    # ensurenl: a last line without "\n" must still end its line comment (newer Pygments match `//.*\n`).
    return get_lexer_by_name(lexer_name, stripnl=False, ensurenl=True, tabsize=4)


def _join_blanks(runs: list[list]) -> list[list]:
    """Move an unstyled run of only spaces into the token after it: `    <span>for</span>`
    would be a text node of only whitespace, which nbconvert's HTML export collapses to one
    space (the IR's indentation lost)."""
    joined: list[list] = []
    for style, piece in runs:
        if joined and joined[-1][0] is None and not joined[-1][1].strip():
            piece = joined.pop()[1] + piece
        joined.append([style, piece])
    return joined


def highlight_lines(text: str, language: str = "text") -> list[str]:
    """Highlight `text` and return one HTML fragment per line (no trailing newline, no wrapping element).

    `language` is one of `LANGUAGES` ("python" for TVMScript, "cuda", "ptx",
    "text"); unknown names are plain text.

    >>> highlight_lines("x = 1", "text")
    ['x = 1']
    """
    lines = text.split("\n")
    lexer = _lexer(language)
    if lexer is None:
        return [escape(line) for line in lines]
    # Per line, runs of (style, text); neighbouring tokens of one style share a span (`"float16"` is one).
    out: list[list[list]] = [[]]
    for token_type, value in lexer.get_tokens(text):
        style = _style_for(token_type)
        for i, piece in enumerate(value.split("\n")):
            if i:
                out.append([])
            if not piece:
                continue
            if out[-1] and out[-1][-1][0] == style:
                out[-1][-1][1] += piece
            else:
                out[-1].append([style, piece])
    fragments = ["".join(f'<span style="{style}">{escape(piece)}</span>' if style else escape(piece)
                         for style, piece in _join_blanks(runs)) for runs in out]
    # Pygments keeps every character, so the line structure matches; pad defensively all the same.
    fragments += [""] * (len(lines) - len(fragments))
    return fragments[: len(lines)]
