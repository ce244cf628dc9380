"""Accounting sources -> ONE normalized per-allocation pandas frame (pyarrow-backed dtypes).

Input is `sacct --parsable2` (`-P`) or `--parsable` (`-p`, trailing `|`) text with its header
line, in any column order and subset that has the required columns, optionally gzipped
(detected by magic bytes), from one or many files or from a live sacct call. Records from
`sacct --json` or pyslurm enter through `load_records` and the same normalizer.

Streaming: text is read in blocks of about `chunk_bytes`; each block is split by pyarrow's CSV
parser (every line's number kept) and parsed with pyarrow compute (no Python loop per row),
its allocation rows become a small typed table and its step rows are reduced to the few
usage numbers that are folded into their allocation at the end.
So memory is one chunk of text plus ~100 bytes per allocation, never the whole file.

Nothing is dropped silently: every rejected row keeps (file, line, reason), and
`rows_read == rows_analyzed + rows_rejected` is asserted.

The loader's stages, one module each: reading text into columns (this module: headers,
blocks, the CSV fast path and the row-by-row rule, the entry points), normalizing columns into
typed tables (`normalize.py`), finishing the chunks into one frame (`finish.py`).
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from slurmgpu.accounting.finish import LoadResult, derive_columns, finish
from slurmgpu.accounting.normalize import Accumulator, Options, Rejected, normalize_chunk
from slurmgpu.errors import SacctParseError

# Canonical sacct column names (as sacct prints them in the header); lookup is case-insensitive.
KNOWN_COLUMNS = (
    "JobIDRaw", "JobID", "Cluster", "Partition", "QOS", "Account", "User", "Group",
    "Submit", "Eligible", "Start", "End", "Elapsed", "ElapsedRaw", "Timelimit",
    "TimelimitRaw", "State", "ExitCode", "NNodes", "NCPUS", "ReqTRES", "AllocTRES",
    "NodeList", "Restarts", "Flags", "Reason", "JobName", "AdminComment", "Comment",
    "SystemComment", "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot", "NTasks",
    "ConsumedEnergyRaw",
)  # fmt: skip
# One of each tuple must be present. Account, Cluster, ReqTRES, Timelimit, NodeList, the
# comments and TRESUsageIn* are optional (their metrics are then "unknown").
REQUIRED_COLUMNS: tuple[tuple[str, ...], ...] = (
    ("JobIDRaw", "JobID"),
    ("State",),
    ("Partition",),
    ("QOS",),
    ("User",),
    ("Submit",),
    ("Start",),
    ("End",),
    ("AllocTRES",),
    ("ElapsedRaw", "Elapsed"),
)
# Free text that may itself contain `|`. When exactly ONE of these is in the header, the extra
# fields of a too-long line are joined back into it (fields left of it taken from the left,
# right of it from the right): unambiguous. With none or several present, a too-long line is
# rejected (which column held the extra delimiter cannot be known).
FREE_TEXT_COLUMNS = ("JobName", "AdminComment", "Comment", "SystemComment", "Reason")
# text per chunk: 8 MiB is ~25k sacct lines; peak memory is a small multiple of it, and
# larger chunks measured slower (1M lines: 8 MiB 7.2 s / 0.39 GiB, 32 MiB 8.2 s / 0.65 GiB)
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
# a sacct line is at most a few KB (long NodeLists, comments); one without end is not a dump
MAX_LINE_BYTES = 64 * 1024 * 1024
# chunks normalized at once (pyarrow compute releases the GIL); at least 1
WORKERS = max(1, min(4, os.cpu_count() or 1))
_GZIP_MAGIC = b"\x1f\x8b"


# ------------------------------------------------------------------------------- reading text


def open_binary(path: str | os.PathLike[str]) -> io.BufferedIOBase:
    """Open a sacct dump as bytes, gunzipping when it starts with the gzip magic bytes. Only
    a regular file: a dump is read more than once, and `/dev/zero` or a FIFO without a writer
    would be read (or waited on) without end."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SacctParseError(f"{path}: not a regular file (a device, FIFO or socket)")
        with open(path, "rb") as probe:
            magic = probe.read(2)
        if magic == _GZIP_MAGIC:
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")
    except OSError as exc:
        raise SacctParseError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _read_block(stream: io.BufferedIOBase, size: int, file: str, offset: int) -> bytes:
    """One block of bytes; a damaged or truncated gzip stream is one clear error."""
    try:
        return stream.read(size)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise SacctParseError(
            f"{file}: gzip data is truncated or corrupt after {offset} bytes of text "
            f"({exc}); re-copy or re-create the dump"
        ) from None
    except OSError as exc:
        raise SacctParseError(f"{file}: cannot read: {exc.strerror or exc}") from None


def _canonical(name: str) -> str:
    lookup = {c.lower(): c for c in KNOWN_COLUMNS}
    return lookup.get(name.strip().lower(), name.strip())


@dataclass
class _Header:
    columns: list[str]
    trailing_pipe: bool
    line: int
    free_text_index: int | None
    delimiter: str = "|"
    free_text: list[int] = field(default_factory=list)


def _looks_like(header: str, delimiter: str) -> str:
    """What a header that is not sacct's looks like instead, as advice ("" when nothing)."""
    head = header.lstrip("\ufeff").lstrip()
    if head.startswith(("{", "[")):
        return "(this looks like JSON, e.g. `sacct --json`: save `sacct -P` text instead)"
    if "\x00" in header or header.startswith(("\ufffe", "\xff\xfe", "\xfe\xff")):
        return "(this looks like UTF-16 text: convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8)"
    if "\r" in header:
        return "(lines end with a lone CR: convert them, e.g. tr '\\r' '\\n')"
    if delimiter not in header and ("," in header or "\t" in header):
        return "(no `|` in the header: save `sacct -P` (or --parsable2) output)"
    return ""


def _parse_header(text: str, line: int, source: str, delimiter: str = "|") -> _Header:
    trailing = text.endswith(delimiter)
    body = text[: -len(delimiter)] if trailing else text
    names = [_canonical(c) for c in body.split(delimiter)]
    present = set(names)
    looks = _looks_like(text, delimiter)
    for options in REQUIRED_COLUMNS:
        if not present.intersection(options):
            wanted = " or ".join(options)
            raise SacctParseError(
                f"{source}: line {line}: required column {wanted} missing from the header "
                + (
                    looks
                    or "(save sacct output with its header, e.g. sacct -P -o JobIDRaw,State,...)"
                )
            )
    dup = [c for c, k in Counter(names).items() if k > 1]
    if dup:
        raise SacctParseError(
            f"{source}: line {line}: column {dup[0]} appears twice in the header"
            + (f" {looks}" if looks else "")
        )
    free = [i for i, c in enumerate(names) if c in FREE_TEXT_COLUMNS]
    # a too-long line is repaired only when ONE free-text column could hold the extra `|`
    return _Header(names, trailing, line, free[0] if len(free) == 1 else None, delimiter, free)


def _decode_lines(raw: pa.Array, acc: Accumulator | None) -> pa.Array:
    """Binary lines -> UTF-8 strings. Lines that are not valid UTF-8 are decoded as Latin-1.

    Latin-1 maps every byte to one character, so distinct names stay distinct (`m\xfcller` and
    `m\xf6ller` become `müller` and `möller`), which replacing bad bytes by U+FFFD would merge.
    The number of such lines is reported (`rows_latin1_decoded`).
    """
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        pass
    out, fallback = [], 0
    for b in raw.to_pylist():  # rare path: only blocks holding a non-UTF-8 line
        try:
            out.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(b.decode("latin-1"))
            fallback += 1
    if acc is not None:
        acc.latin1_lines += fallback
    return pa.array(out, pa.string())


def _blocks(stream: io.BufferedIOBase, chunk_bytes: int, file: str = "") -> Iterator[bytes]:
    """Yield blocks of about `chunk_bytes` bytes that end at a line end (the file's last line
    may lack one); a partial last line is carried into the next block."""
    carry = b""
    offset = 0
    while True:
        block = _read_block(stream, chunk_bytes, file, offset)
        offset += len(block)
        if not block:
            if carry:
                yield carry
            return
        data = carry + block if carry else block
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) > MAX_LINE_BYTES:
                raise SacctParseError(
                    f"{file}: a line longer than {MAX_LINE_BYTES >> 20} MiB after {offset} "
                    "bytes: not sacct output"
                )
            carry = data
            continue
        carry = data[cut + 1 :]
        yield data[: cut + 1]


def _line_count(block: bytes) -> int:
    return block.count(b"\n") + (0 if block.endswith(b"\n") else 1)


def _block_lines(block: bytes, acc: Accumulator | None) -> pa.Array:
    """A block's lines as a pyarrow string array (`\r` of CRLF ends removed)."""
    body = block[:-1] if block.endswith(b"\n") else block
    raw = pc.list_flatten(pc.split_pattern(pa.array([body], pa.binary()), b"\n"))
    return pc.utf8_rtrim(_decode_lines(raw, acc), characters="\r")


def _line_fields(header: _Header, text: str) -> list[str] | str:
    """One line's fields (a `|` in the one free-text column joined back), or why it cannot
    be split: the row-by-row rule, used for the few lines the vectorized split leaves over."""
    d = header.delimiter
    if header.trailing_pipe and text.endswith(d):
        # `-p` ends every line with `|`; strip exactly one so an empty last field survives
        text = text[: -len(d)]
    ncols = len(header.columns)
    tokens = text.split(d)
    extra = len(tokens) - ncols
    if extra == 0:
        return tokens
    k = header.free_text_index
    if extra > 0 and k is not None:
        return [*tokens[:k], d.join(tokens[k : k + extra + 1]), *tokens[k + extra + 1 :]]
    why = f"wrong column count: {len(tokens)} fields, header has {ncols}"
    if extra > 0 and len(header.free_text) > 1:
        names = ", ".join(header.columns[j] for j in header.free_text)
        why += f" (a '{d}' in one of {names}: ambiguous, not repaired)"
    return why


def _normalize_split(
    acc: Accumulator,
    header: _Header,
    columns: dict[str, pa.Array],
    nums: np.ndarray,
    leftover: list[tuple[int, str]],
    file: str,
) -> None:
    """Normalize rows already split into `columns` (line numbers `nums`) plus `leftover`
    (line number, text) lines, which are split one by one: repaired, rejected or blank."""
    fixed_cols: list[list[str]] = []
    fixed_lines: list[int] = []
    rej_lines: list[int] = []
    rej_reasons: list[str] = []
    leftover = sorted(leftover)
    # blank as the vectorized split judges it (Arrow's idea of whitespace, not Python's)
    texts = pa.array([text for _, text in leftover], pa.string())
    blank = pc.equal(pc.utf8_trim_whitespace(texts), "").to_pylist()
    for (line, text), is_blank in zip(leftover, blank, strict=True):  # rare: odd lines only
        if is_blank:
            acc.blank_lines += 1
            continue
        got = _line_fields(header, text)
        if isinstance(got, str):
            rej_lines.append(line)
            rej_reasons.append(got)
        else:
            fixed_cols.append(got)
            fixed_lines.append(line)
    if rej_lines:
        acc.rows_read += len(rej_lines)
        acc.reject(file, np.array(rej_lines), rej_reasons)
    if fixed_cols:
        for j, name in enumerate(header.columns):
            if name in columns:
                extra = pa.array([r[j] for r in fixed_cols], pa.string())
                columns[name] = pa.concat_arrays([columns[name], extra])
        nums = np.concatenate([nums, np.array(fixed_lines, dtype=np.int64)])
        # back in line order, so "first" (duplicates) means first in the file
        order = np.argsort(nums, kind="stable")
        columns = {k: v.take(pa.array(order)) for k, v in columns.items()}
        nums = nums[order]
    normalize_chunk(acc, columns, nums, file)


def _split_lines(
    acc: Accumulator, header: _Header, first_line: int, arr: pa.Array, file: str
) -> None:
    """Split one chunk of text lines into columns and normalize them (the general path: any
    delimiter, any line ends, lines that are not UTF-8)."""
    nums = np.arange(first_line, first_line + len(arr), dtype=np.int64)
    nonblank = pc.not_equal(pc.utf8_trim_whitespace(arr), "").to_numpy(zero_copy_only=False)
    acc.blank_lines += int((~nonblank).sum())
    arr, nums = arr.filter(pa.array(nonblank)), nums[nonblank]
    whole = arr
    if header.trailing_pipe:
        d = header.delimiter
        arr = pc.if_else(pc.ends_with(arr, d), pc.utf8_slice_codeunits(arr, 0, -len(d)), arr)
    ncols = len(header.columns)
    parts = pc.split_pattern(arr, header.delimiter)
    counts = pc.list_value_length(parts).to_numpy()
    good = counts == ncols
    leftover = [(int(nums[i]), whole[i].as_py()) for i in np.flatnonzero(~good).tolist()]
    flat = pc.list_flatten(parts.filter(pa.array(good)))
    ngood = int(good.sum())
    columns: dict[str, pa.Array] = {}
    for j, name in enumerate(header.columns):
        if name in KNOWN_COLUMNS:  # columns slurmgpu does not use are never materialized
            columns[name] = flat.take(pa.array(np.arange(j, ngood * ncols, ncols, dtype=np.int64)))
    _normalize_split(acc, header, columns, nums[good], leftover, file)


_TRAILING = "\x00trailing"  # name of the empty field after a `-p` line's last `|`


def _csv_block(
    acc: Accumulator, header: _Header, first_line: int, block: bytes, n: int, file: str
) -> bool:
    """Split a block with pyarrow's C++ CSV parser (the fast path); False if it cannot.

    The parser is told to quote nothing and to keep empty lines, so every physical line is
    either one parsed row or one "invalid row" with its line number; the line number of each
    row is therefore known. Lines it cannot take (wrong field count, whitespace, a `-p` line
    without its last `|`) go through the row-by-row rule. Blocks with a lone `\r` (a line
    end for the parser, not for sacct) or bytes that are not UTF-8 take the general path.

    Why it is long: most of it is the one `read_csv` call's configuration (each option is a
    decision about sacct's text) and the line-number bookkeeping that must follow that call's
    own row numbering; apart, the bookkeeping would refer to a parser setup it cannot see.
    """
    d = header.delimiter
    if len(d) != 1 or d in "\r\n" or len(d.encode()) != 1:
        return False
    if b"\r" in block and block.count(b"\r") != block.count(b"\r\n"):
        return False
    if not _is_utf8(block):
        return False
    names = [*header.columns, *([_TRAILING] if header.trailing_pipe else [])]
    wanted = [c for c in header.columns if c in KNOWN_COLUMNS]
    invalid: list[tuple[int | None, str]] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append((row.number, row.text))
        return "skip"

    try:
        table = pacsv.read_csv(
            pa.py_buffer(block),
            read_options=pacsv.ReadOptions(
                column_names=names, use_threads=False, block_size=len(block) + 1
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=d,
                quote_char=False,
                double_quote=False,
                escape_char=False,
                newlines_in_values=False,
                ignore_empty_lines=False,
                invalid_row_handler=on_invalid,
            ),
            convert_options=pacsv.ConvertOptions(
                include_columns=wanted + ([_TRAILING] if header.trailing_pipe else []),
                column_types={c: pa.string() for c in names},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
                check_utf8=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    if any(number is None or not 1 <= number <= n for number, _ in invalid):
        return False
    valid = np.ones(n, dtype=bool)
    valid[[number - 1 for number, _ in invalid]] = False
    if int(valid.sum()) != table.num_rows:
        return False  # not one row per line: let the general path split it
    nums = np.flatnonzero(valid).astype(np.int64) + first_line
    leftover = [(first_line + number - 1, text) for number, text in invalid]
    # rows to split by hand: a possibly empty line (the parser gives it as a row of empty
    # fields; one empty field marks the candidates, their text decides) and, for `-p`, a line
    # whose last field was not empty (a `|` in free text)
    odd = pc.equal(table.column(wanted[0]), "") if wanted else None
    if header.trailing_pipe:
        extra = pc.not_equal(table.column(_TRAILING), "")
        odd = extra if odd is None else pc.or_(odd, extra)
    if odd is not None and pc.any(odd).as_py():
        rows = np.flatnonzero(odd.to_numpy(zero_copy_only=False))
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
        starts = np.concatenate([[0], ends + 1])
        ends = np.concatenate([ends, [len(block)]])
        for r in rows.tolist():
            i = int(nums[r] - first_line)
            text = block[starts[i] : ends[i]].decode("utf-8").rstrip("\r")
            leftover.append((int(nums[r]), text))
        keep = np.ones(len(nums), dtype=bool)
        keep[rows] = False
        table = table.filter(pa.array(keep))
        nums = nums[keep]
    columns = {c: table.column(c).combine_chunks() for c in wanted}
    _normalize_split(acc, header, columns, nums, leftover, file)
    return True


def _is_utf8(block: bytes) -> bool:
    """Whether the bytes are valid UTF-8 (checked by Arrow in place: no copy, no GIL)."""
    offsets = pa.array([0, len(block)], pa.int64()).buffers()[1]
    text = pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, pa.py_buffer(block)])
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


BOM = "\ufeff"


def _header_of(
    acc: Accumulator, block: bytes, first: int, file: str, delimiter: str
) -> tuple[_Header | None, bytes, int]:
    """Find the header (the first non-blank line); returns it, the rest of the block and the
    number of the rest's first line. Blank lines before it are counted."""
    pos = 0
    while pos < len(block):
        nl = block.find(b"\n", pos)
        end = nl if nl >= 0 else len(block)
        line = block[pos:end]
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            text = line.decode("latin-1")
            acc.latin1_lines += 1
        text = text.rstrip("\r")
        if first == 1 and pos == 0:
            text = text.removeprefix(BOM)  # an editor's UTF-8 byte order mark (`utf-8-sig`)
        pos = end + 1
        if not text.strip():
            acc.blank_lines += 1
            first += 1
            continue
        return _parse_header(text, first, file, delimiter), block[pos:], first + 1
    return None, b"", first


def _read_stream(
    acc: Accumulator,
    stream: io.BufferedIOBase,
    file: str,
    chunk_bytes: int,
    delimiter: str = "|",
) -> None:
    """Read one stream: the header, then blocks of lines, each split and normalized.

    pyarrow's CSV parser and compute functions release the GIL, so blocks are split and
    normalized on WORKERS threads while the next block is read; each block fills its own
    accumulator and they are merged in file order, so results (and the first rejections
    kept) are those of a sequential read. At most 2 x WORKERS blocks are in flight, which
    bounds memory.
    """
    header: _Header | None = None
    acc.file_index(file)
    pending: deque[Future[Accumulator]] = deque()
    first = 1
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for block in _blocks(stream, chunk_bytes, file):
            if header is None:
                header, block, first = _header_of(acc, block, first, file, delimiter)
            if header is None or not block:
                continue
            n = _line_count(block)
            pending.append(pool.submit(_chunk, acc.child(), header, first, block, n, file))
            first += n
            while len(pending) > 2 * WORKERS:
                acc.merge(pending.popleft().result())
        while pending:
            acc.merge(pending.popleft().result())
    if header is None:
        raise SacctParseError(f"{file}: no header line (empty input)")


def _chunk(
    kid: Accumulator, header: _Header, first: int, block: bytes, n: int, file: str
) -> Accumulator:
    """Split and normalize one block (`n` lines from line `first`) on a worker thread."""
    if not _csv_block(kid, header, first, block, n, file):
        _split_lines(kid, header, first, _block_lines(block, kid), file)
    return kid


# ------------------------------------------------------------------------------- entry points


# A dump whose header holds the unit separator was made with sacct's own --delimiter=$'\x1f'
# (as the live query does); JSON (`sacct --json > dump.json`) starts with `{`.
UNIT_SEPARATOR = "\x1f"
JsonReader = Callable[[bytes, str], Iterable[Mapping[str, str]]]


def sniff_dump(head: bytes) -> str:
    """`json`, `unit-separator` or `pipe`: what the first bytes of a dump say it is."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith((b"{", b"[")):
        return "json"
    first_line = head.split(b"\n", 1)[0]
    return "unit-separator" if b"\x1f" in first_line else "pipe"


def load_files(
    paths: Sequence[str | os.PathLike[str]],
    *,
    options: Options | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    json_reader: JsonReader | None = None,
    derive: bool = True,
) -> LoadResult:
    """Load saved sacct dumps (plain or gzipped): `sacct -P` text with its header line, `|`
    or `\x1f` delimited (told by the header), or a `sacct --json` document when
    `json_reader` (bytes, name -> sacct-column records) is given. `derive=False` stops
    before the derived columns (`derive_columns`), as the accounting store keeps it."""
    acc = Accumulator(options or Options())
    names = [os.fspath(p) for p in paths]
    for name in names:
        with open_binary(name) as stream:
            kind = sniff_dump(_read_block(stream, 65536, name, 0))
        with open_binary(name) as stream:
            if kind == "json" and json_reader is not None:
                data = _read_block(stream, -1, name, 0)
                _feed_records(acc, json_reader(data, name), name)
                del data
                continue
            delimiter = UNIT_SEPARATOR if kind == "unit-separator" else "|"
            _read_stream(acc, stream, name, chunk_bytes, delimiter)
    return finish(acc, names, derive)


def load_text(
    text: str,
    *,
    name: str = "sacct",
    options: Options | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    delimiter: str = "|",
) -> LoadResult:
    """Load sacct output held in memory (e.g. a live call; `delimiter` as given to sacct)."""
    acc = Accumulator(options or Options())
    _read_stream(acc, io.BytesIO(text.encode("utf-8")), name, chunk_bytes, delimiter)
    return finish(acc, [name])


def load_windows(
    bounds: Sequence[tuple[datetime, datetime]],
    fetch: Callable[[datetime, datetime], str],
    *,
    name: str = "sacct",
    options: Options | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    delimiter: str = "|",
    derive: bool = True,
) -> LoadResult:
    """Load consecutive sub-windows of a live query, one sacct call each (bounded memory).

    `sacct -S a -E b` returns every job active in [a, b], so a job spanning sub-windows is
    returned by each: a row is kept only in the sub-window its End falls in (rows without an
    End, i.e. running or pending, in the last one). The repeats are counted in
    `rows_overlap`, outside `rows_read`, since they are an artefact of the splitting.
    """
    acc = Accumulator(options or Options())
    for i, (since, until) in enumerate(bounds):
        lo = np.datetime64(_naive_utc(since), "s") if i else np.datetime64("0001-01-01", "s")
        last = i == len(bounds) - 1
        hi = np.datetime64("9999-12-31", "s") if last else np.datetime64(_naive_utc(until), "s")
        acc.end_window = (lo, hi)
        data = fetch(since, until).encode("utf-8", "surrogateescape")
        _read_stream(acc, io.BytesIO(data), name, chunk_bytes, delimiter)
        del data
    acc.end_window = None
    result = finish(acc, [name], derive)
    result.rows_overlap = acc.rows_overlap
    return result


def _naive_utc(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def load_records(
    records: Iterable[Mapping[str, str]],
    *,
    name: str,
    options: Options | None = None,
    chunk_rows: int = 100_000,
) -> LoadResult:
    """Load rows given as {sacct column: text} (from `sacct --json` or pyslurm)."""
    acc = Accumulator(options or Options())
    _feed_records(acc, records, name, chunk_rows)
    return finish(acc, [name])


def _feed_records(
    acc: Accumulator,
    records: Iterable[Mapping[str, str]],
    name: str,
    chunk_rows: int = 100_000,
) -> None:
    """Normalize records into `acc` in batches of `chunk_rows` (record numbers as lines)."""
    batch: list[Mapping[str, str]] = []
    first = 1

    def flush() -> None:
        nonlocal first, batch
        if not batch:
            return
        names = sorted({k for r in batch for k in r})
        cols = {k: pa.array([r.get(k) for r in batch], pa.string()) for k in names}
        normalize_chunk(acc, cols, np.arange(first, first + len(batch)), name)
        first += len(batch)
        batch = []

    for record in records:
        batch.append(record)
        if len(batch) >= chunk_rows:
            flush()
    flush()


__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "KNOWN_COLUMNS",
    "REQUIRED_COLUMNS",
    "LoadResult",
    "Options",
    "Rejected",
    "derive_columns",
    "load_files",
    "load_records",
    "load_text",
    "load_windows",
    "open_binary",
]
