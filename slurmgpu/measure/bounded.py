"""Limits on what one summary may cost to read: decompressed size, file size, nesting.

A summary is a few kilobytes (a 64-node, 512-GPU jobstats summary is about 60 KiB of JSON).
A `JS1:`/`SG1:` token or spool file that inflates past `MAX_SUMMARY_BYTES` is a gzip bomb or
garbage: it is refused (`ValueError`) after at most that many bytes were produced, never
inflated whole.
"""

from __future__ import annotations

import json
import zlib

MAX_SUMMARY_BYTES = 4 << 20  # decompressed JSON of one summary
MAX_TOKEN_CHARS = 8 << 20  # the encoded token or spool file itself


def gunzip(data: bytes, limit: int = MAX_SUMMARY_BYTES) -> bytes:
    """The gzip member in `data`, at most `limit` bytes; ValueError when longer or corrupt."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"not gzip: {exc}") from exc
    if len(out) > limit:
        raise ValueError(f"decompresses to more than {limit} bytes (a gzip bomb?)")
    if not inflater.eof:
        raise ValueError("gzip data cut short")
    return out


def loads(text: bytes | str) -> object:
    """json.loads that says ValueError for input nested too deeply (RecursionError)."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc
