"""Quoting site strings for Lua source: the one filter every Lua template uses (`|lua`)."""

from __future__ import annotations

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def lua_string(value: object) -> str:
    """A double-quoted Lua string literal whose value is exactly `str(value)`.

    Only printable ASCII passes through; quotes, backslashes, control characters and every
    non-ASCII byte (UTF-8 encoded) become escapes (`\\ddd` decimal, valid in Lua 5.1 and
    later). So a tier name containing `"`, `]]` or a newline can never end the literal or
    inject code.
    """
    out = ['"']
    for byte in str(value).encode("utf-8"):
        ch = chr(byte)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)
