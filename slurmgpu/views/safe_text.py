"""Site strings made harmless in text and HTML: bidirectional controls shown, never obeyed.

A job name, account or node name may hold U+202E (RIGHT-TO-LEFT OVERRIDE) and its kin; a
terminal or a browser then shows the rest of the line reversed or reordered ("Trojan
Source"), so a report can be made to read other than it says. The views pass their whole
text and HTML output through `neutralise`, which writes each such character as a visible
`<U+202E>` instead (no view writes one on purpose), and the other Unicode line and
paragraph separators the same way, so one value can never start a new line in a terminal.
"""

from __future__ import annotations

import re

# U+061C ARABIC LETTER MARK, U+200E/F LRM/RLM, U+202A-E embeddings and overrides,
# U+2066-9 isolates; U+0085 NEL, U+2028/9 line and paragraph separators
_INVISIBLE = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u0085\u2028\u2029]")


def neutralise(text: str) -> str:
    """`text` with every bidi control and Unicode line separator written as `<U+XXXX>`."""
    return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)
