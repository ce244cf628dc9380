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
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from slurmgpu.accounting import columns as columns_mod
from slurmgpu.accounting import fields, tres
from slurmgpu.errors import SacctParseError

# Canonical sacct column names (as sacct prints them in the header); lookup is case-insensitive.
KNOWN_COLUMNS = (
    "JobIDRaw", "JobID", "Cluster", "Partition", "QOS", "Account", "User", "Group",
    "Submit", "Eligible", "Start", "End", "Elapsed", "ElapsedRaw", "Timelimit",
    "TimelimitRaw", "State", "ExitCode", "NNodes", "NCPUS", "ReqTRES", "AllocTRES",
    "NodeList", "Restarts", "Flags", "Reason", "JobName", "AdminComment", "Comment",
    "SystemComment", "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot", "NTasks",
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
MAX_REJECTED_KEPT = 100
# Few distinct values over millions of rows: stored dictionary-encoded (pyarrow dictionary
# dtype), so the per-run frame costs a 4-byte index per value instead of the string.
DICTIONARY_COLUMNS = (
    "cluster", "partition", "qos", "account", "user", "state", "kind", "tag_tier",
    "mig_profile", "gpu_type",
)  # fmt: skip
# text per chunk: 8 MiB is ~25k sacct lines; peak memory is a small multiple of it, and
# larger chunks measured slower (1M lines: 8 MiB 7.2 s / 0.39 GiB, 32 MiB 8.2 s / 0.65 GiB)
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
# chunks normalized at once (pyarrow compute releases the GIL); at least 1
WORKERS = max(1, min(4, os.cpu_count() or 1))
# job_submit.lua writes `slurmgpu tier=P1 kind=finetune` into AdminComment (the wrapper into
# Comment); tokens are separated by whitespace, `;` or `,`.
_TAG = r"(?:^|[\s;,]){}=(?P<v>[A-Za-z0-9_.-]+)"
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Rejected:
    """One row that could not be analyzed."""

    file: str
    line: int
    reason: str


@dataclass
class LoadResult:
    """The normalized allocation frame plus the row accounting that must reconcile."""

    frame: pd.DataFrame
    files: list[str]
    rows_read: int = 0
    rows_analyzed: int = 0
    rows_rejected: int = 0
    step_rows: int = 0
    blank_lines: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    rejected_reasons: Counter = field(default_factory=Counter)
    has_usage: bool = False
    rows_overlap: int = 0  # live sub-window repeats (not rows read; see load_windows)
    latin1_lines: int = 0  # lines that were not UTF-8, decoded as Latin-1
    usage_over_100: int = 0  # steps whose gres/gpuutil was above 100

    def check(self) -> None:
        """Assert the row accounting reconciles (a bug in slurmgpu if it does not)."""
        assert self.rows_read == self.rows_analyzed + self.rows_rejected, (
            self.rows_read,
            self.rows_analyzed,
            self.rows_rejected,
        )


# ------------------------------------------------------------------------------- reading text


def open_binary(path: str | os.PathLike[str]) -> io.BufferedIOBase:
    """Open a sacct dump as bytes, gunzipping when it starts with the gzip magic bytes."""
    try:
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


def _decode_lines(raw: pa.Array, acc: _Accumulator | None) -> pa.Array:
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
            carry = data
            continue
        carry = data[cut + 1 :]
        yield data[: cut + 1]


def _line_count(block: bytes) -> int:
    return block.count(b"\n") + (0 if block.endswith(b"\n") else 1)


def _block_lines(block: bytes, acc: _Accumulator | None) -> pa.Array:
    """A block's lines as a pyarrow string array (`\r` of CRLF ends removed)."""
    body = block[:-1] if block.endswith(b"\n") else block
    raw = pc.list_flatten(pc.split_pattern(pa.array([body], pa.binary()), b"\n"))
    return pc.utf8_rtrim(_decode_lines(raw, acc), characters="\r")


# -------------------------------------------------------------------------------- normalizing


@dataclass
class Options:
    """How to read rows; all optional."""

    timezone: str = "UTC"  # zone of ISO times in the text (live sacct runs with TZ=UTC)
    tier_for_qos: Callable[[str], str | None] | None = None
    shards_per_gpu: Mapping[str, float] = field(default_factory=dict)  # partition or "*" -> N
    cluster: str = ""  # used when the input has no Cluster column
    bare_gpumem_unit: str = "B"  # sacct --noconvert prints bytes; otherwise `38888M`
    # Slurm >= 24.05: a step's gres/gpuutil and gres/gpumem are sums over its GPUs; they are
    # divided by the step's GPU count (its AllocTRES, else its run's) when folded
    usage_sums_gpus: bool = False
    keep_admin_comment: bool = False  # measure sources read jobstats summaries there


class _Accumulator:
    """Collects typed allocation tables, step usage tables and the rejection ledger."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.allocs: list[pa.Table] = []
        self.steps: list[pa.Table] = []
        self.rows_read = 0
        self.rows_rejected = 0
        self.step_rows = 0
        self.blank_lines = 0
        self.rejected: list[Rejected] = []
        self.reasons: Counter = Counter()
        self.has_usage = False
        self.files: list[str] = []
        # live queries split into sub-windows: keep a row only in the sub-window its End (or,
        # without one, the last sub-window) falls in; see load_windows
        self.end_window: tuple[np.datetime64, np.datetime64] | None = None
        self.rows_overlap = 0
        self.latin1_lines = 0
        self.usage_over_100 = 0  # step gpuutil values above 100 (a sum over GPUs)

    def file_index(self, file: str) -> int:
        """Small integer for a file name (the frame stores it dictionary-encoded)."""
        if file not in self.files:
            self.files.append(file)
        return self.files.index(file)

    def child(self) -> _Accumulator:
        """An empty accumulator for one chunk (filled on a worker thread, merged in order)."""
        kid = _Accumulator(self.options)
        kid.files = self.files  # read-only on workers: file_index() is called first here
        kid.end_window = self.end_window
        return kid

    def merge(self, kid: _Accumulator) -> None:
        """Add one chunk's results (chunks are merged in file order)."""
        self.allocs += kid.allocs
        self.steps += kid.steps
        for name in ("rows_read", "rows_rejected", "step_rows", "blank_lines", "rows_overlap",
                     "usage_over_100", "latin1_lines"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(kid, name))
        self.reasons.update(kid.reasons)
        self.has_usage |= kid.has_usage
        room = MAX_REJECTED_KEPT - len(self.rejected)
        self.rejected += kid.rejected[: max(room, 0)]

    def reject(self, file: str, lines: np.ndarray, reasons: Sequence[str]) -> None:
        self.rows_rejected += len(lines)
        for reason in reasons:
            self.reasons[reason.split(" '")[0].split(":")[0]] += 1
        room = MAX_REJECTED_KEPT - len(self.rejected)
        for line, reason in list(zip(lines.tolist(), reasons, strict=True))[: max(room, 0)]:
            self.rejected.append(Rejected(file, int(line), reason))


# states only a job that started can be in (a COMPLETED row without Start is corrupt; FAILED,
# CANCELLED and NODE_FAIL can happen before a job starts)
_RAN_STATES = pa.array(["COMPLETED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED", "RUNNING",
                        "SUSPENDED", "COMPLETING"])  # fmt: skip


def _col(columns: Mapping[str, pa.Array], name: str, n: int) -> pa.Array:
    arr = columns.get(name)
    return arr if arr is not None else pa.nulls(n, pa.string())


def _tag(values: pa.Array, key: str) -> pa.Array:
    m = pc.extract_regex(pc.fill_null(values, ""), _TAG.format(key))
    return pc.struct_field(fields.fill_struct(m, {"v": ""}), "v")


def _normalize_chunk(
    acc: _Accumulator, columns: Mapping[str, pa.Array], lines: np.ndarray, file: str
) -> None:
    """Parse one chunk of rows (columns of equal length) into the accumulator.

    Rows are split into allocation rows and step rows first; each field is then parsed only on
    the rows that use it (steps: id, Start, usage; allocations: the rest), so the ~2/3 of a
    dump that are steps cost little.
    """
    n = len(lines)
    if n == 0:
        return
    opts = acc.options
    if acc.end_window is not None:
        columns, lines = _own_window_rows(acc, columns, lines)
        n = len(lines)
        if n == 0:
            return
    acc.rows_read += n
    errors: dict[int, str] = {}

    def flag(mask: np.ndarray, what: str, raw: pa.Array, rows: np.ndarray) -> None:
        """Record a reason for each bad value; `rows` maps the parsed subset to chunk rows."""
        for i in np.flatnonzero(mask).tolist():
            errors.setdefault(int(rows[i]), f"bad {what} {raw[i].as_py()!r}")

    everything = np.arange(n)
    jid, jraw = columns.get("JobID"), columns.get("JobIDRaw")
    ids = fields.JobIds(jid, jraw)
    for i in np.flatnonzero(ids.too_big).tolist():
        errors.setdefault(int(everything[i]), fields.JOB_ID_RANGE_REASON)
    flag(ids.bad, "JobID/JobIDRaw", jid if jid is not None else jraw, everything)
    is_step = ids.is_step & ~ids.bad
    alloc = ~ids.is_step & ~ids.bad
    step_rows = np.flatnonzero(is_step)
    alloc_rows = np.flatnonzero(alloc)
    step_m, alloc_m = pa.array(is_step), pa.array(alloc)

    def sub(name: str, mask: pa.Array) -> pa.Array:
        arr = columns.get(name)
        return arr.filter(mask) if arr is not None else pa.nulls(int(mask.true_count), pa.string())

    cluster_all = columns.get("Cluster")
    if cluster_all is None:
        cluster_all = pa.repeat(pa.scalar(opts.cluster, pa.string()), n)
    cluster_all = pc.fill_null(cluster_all, opts.cluster)

    # ---- step rows: only their usage matters; `.extern` is never counted (adopted processes,
    # near-zero usage, `gres/gpuutil=0` placeholders)
    have_usage = any(c in columns for c in ("TRESUsageInMax", "TRESUsageInAve"))
    if len(step_rows):
        s_start, bad = fields.parse_times(sub("Start", step_m), timezone=opts.timezone)
        flag(bad, "Start time", sub("Start", step_m), step_rows)
        k = len(step_rows)
        util = np.full(k, np.nan)
        mem = np.full(k, np.nan)
        step_gpus = np.full(k, np.nan)
        if have_usage:
            acc.has_usage = True
            for name in ("TRESUsageInAve", "TRESUsageInMax"):  # Max overrides Ave
                if name not in columns:
                    continue
                col = sub(name, step_m)
                # most usage strings carry no GPU keys (Slurm < 23.02, CPU jobs): skip them
                gpu = pc.match_substring(pc.fill_null(col, ""), "gres/gpu").to_numpy(
                    zero_copy_only=False
                )
                if not gpu.any():
                    continue
                sel = np.flatnonzero(gpu)
                u = tres.parse_usage_tres(
                    col.take(pa.array(sel)), bare_mem_unit=opts.bare_gpumem_unit
                )
                util[sel] = np.where(np.isnan(u.gpu_util_pct), util[sel], u.gpu_util_pct)
                mem[sel] = np.where(np.isnan(u.gpu_mem_mib), mem[sel], u.gpu_mem_mib)
                for i, reason in u.errors.items():
                    errors.setdefault(int(step_rows[sel[i]]), reason)
            acc.usage_over_100 += int((np.nan_to_num(util) > 100).sum())
            has = np.flatnonzero(~(np.isnan(util) & np.isnan(mem)))
            if opts.usage_sums_gpus and len(has) and "AllocTRES" in columns:
                # the step's own GPU count (Slurm prints AllocTRES on step rows)
                st = tres.parse_alloc_tres(sub("AllocTRES", step_m).take(pa.array(has)))
                step_gpus[has] = st.gpu_count
        ok = ~np.isin(step_rows, np.fromiter(errors, dtype=np.int64, count=len(errors)))
        acc.step_rows += int(ok.sum())
        keep = ok & ~ids.is_extern[step_rows] & ~(np.isnan(util) & np.isnan(mem))
        if keep.any():
            km = pa.array(keep)
            acc.steps.append(
                pa.table(
                    {
                        "cluster": cluster_all.filter(step_m).filter(km),
                        "job_id_raw": pa.array(ids.raw[step_rows][keep]).cast(pa.int64()),
                        "step_start": pa.array(s_start[keep]),
                        "step_gpu_util_pct": pa.array(util[keep]),
                        "step_gpu_mem_mib": pa.array(mem[keep]),
                        "step_gpus": pa.array(step_gpus[keep]),
                    }
                )
            )

    # ---- allocation rows
    m = len(alloc_rows)
    if m:
        a = alloc_rows
        state, cancelled_by, bad = fields.parse_states(sub("State", alloc_m))
        flag(bad, "State", sub("State", alloc_m), a)
        unknown_state = ~bad & ~pc.is_in(state, fields.JOB_STATES_ARRAY).to_numpy(
            zero_copy_only=False
        )
        for i in np.flatnonzero(unknown_state).tolist():
            raw_state = sub("State", alloc_m)[i].as_py()
            errors.setdefault(int(a[i]), f"unknown job state {raw_state!r}")
        times = {}
        for name in ("Submit", "Start", "End"):
            raw_t = sub(name, alloc_m)
            times[name], bad = fields.parse_times(raw_t, timezone=opts.timezone)
            for i in np.flatnonzero(bad).tolist():
                reason = fields.time_reason(name, raw_t[i].as_py(), opts.timezone)
                errors.setdefault(int(a[i]), reason)
        for later, earlier in (("End", "Start"), ("Start", "Submit")):
            t1, t0 = times[later], times[earlier]
            wrong = ~np.isnat(t1) & ~np.isnat(t0) & (t1 < t0)
            for i in np.flatnonzero(wrong).tolist():
                errors.setdefault(
                    int(a[i]), f"{later} {_iso(t1[i])} is before {earlier} {_iso(t0[i])}"
                )
        ranges = ids.array_range[a]
        for i in np.flatnonzero(pd.notna(ranges)).tolist():
            problem = fields.array_range_problem(ranges[i])
            if problem:
                errors.setdefault(int(a[i]), problem)
        if "ElapsedRaw" in columns:
            elapsed, bad = fields.parse_int(sub("ElapsedRaw", alloc_m))
            flag(bad, "ElapsedRaw", sub("ElapsedRaw", alloc_m), a)
        else:
            elapsed, _unl, bad = fields.parse_durations(sub("Elapsed", alloc_m))
            flag(bad, "Elapsed", sub("Elapsed", alloc_m), a)
        # ran for a while (a state only a started job has, and an elapsed time) yet no Start:
        # its GPU-hours cannot be placed in time (an array's pending range may say TIMEOUT
        # with no Start and no elapsed time: that one is fine)
        ran = pc.is_in(state, _RAN_STATES).to_numpy(zero_copy_only=False)
        ran &= np.nan_to_num(np.asarray(elapsed, dtype=float)) > 0
        for i in np.flatnonzero(ran & np.isnat(times["Start"])).tolist():
            raw_start = sub("Start", alloc_m)[i].as_py()
            errors.setdefault(
                int(a[i]),
                f"State {state[i].as_py()} for {int(elapsed[i])} s but no Start time "
                f"({raw_start!r})",
            )
        if "TimelimitRaw" in columns:
            tl_min, bad = fields.parse_int(sub("TimelimitRaw", alloc_m), unlimited_ok=True)
            flag(bad, "TimelimitRaw", sub("TimelimitRaw", alloc_m), a)
            timelimit = tl_min * 60
        elif "Timelimit" in columns:
            timelimit, _unl, bad = fields.parse_durations(sub("Timelimit", alloc_m))
            flag(bad, "Timelimit", sub("Timelimit", alloc_m), a)
        else:
            timelimit = np.full(m, np.nan)
        alloc_tres = sub("AllocTRES", alloc_m)
        at = tres.parse_alloc_tres(alloc_tres)
        for i, reason in at.errors.items():
            errors.setdefault(int(a[i]), f"AllocTRES: {reason}")
        req_gpus = np.full(m, np.nan)
        if "ReqTRES" in columns:
            # requested GPUs matter only where nothing was allocated (pending, never started)
            empty = pc.equal(pc.fill_null(alloc_tres, ""), "").to_numpy(zero_copy_only=False)
            if empty.any():
                sel = np.flatnonzero(empty)
                rt = tres.parse_alloc_tres(sub("ReqTRES", alloc_m).take(pa.array(sel)))
                req_gpus[sel] = rt.gpu_equiv
                for i, reason in rt.errors.items():
                    errors.setdefault(int(a[sel[i]]), f"ReqTRES: {reason}")

    bad_rows = np.zeros(n, dtype=bool)
    if errors:
        idx = np.fromiter(errors.keys(), dtype=np.int64, count=len(errors))
        bad_rows[idx] = True
        order = np.argsort(idx)
        acc.reject(file, lines[idx[order]], [errors[int(i)] for i in idx[order]])
    if not m:
        return
    keep = ~bad_rows[alloc_rows]
    if not keep.any():
        return
    km = pa.array(keep)
    k = int(keep.sum())

    def text(name: str, default: str = "") -> pa.Array:
        arr = columns.get(name)
        if arr is None:
            return pa.repeat(pa.scalar(default, pa.string()), k)
        return pc.fill_null(arr.filter(alloc_m).filter(km), default)

    admin, comment = text("AdminComment"), text("Comment")

    def tag(key: str) -> pa.Array:
        """A `key=value` tag from AdminComment, else Comment (absent columns cost nothing)."""
        found = [
            _tag(c, key) for n, c in (("AdminComment", admin), ("Comment", comment)) if n in columns
        ]
        if not found:
            return pa.repeat(pa.scalar("", pa.string()), k)
        if len(found) == 1:
            return found[0]
        return pc.if_else(pc.not_equal(found[0], ""), found[0], found[1])

    tag_tier, tag_kind = tag("tier"), tag("kind")
    rows = alloc_rows[keep]
    no_array = np.isnan(ids.array_task[rows]) & ~ids.array_range[rows].astype(bool)
    table = pa.table(
        {
            "cluster": cluster_all.filter(alloc_m).filter(km),
            "job_id": text("JobID") if jid is not None else _id_text(ids.raw[rows]),
            "job_id_raw": _fa(ids.raw[rows]).cast(pa.int64()),
            "array_job_id": _fa(np.where(no_array, np.nan, ids.base_job[rows])),
            "array_task_id": _fa(ids.array_task[rows]),
            "array_range": _fa(ids.array_range[rows], pa.string()),
            "het_job_id": _fa(np.where(np.isnan(ids.het_offset[rows]), np.nan, ids.base_job[rows])),
            "het_offset": _fa(ids.het_offset[rows]),
            "partition": text("Partition"),
            "qos": text("QOS"),
            "account": text("Account"),
            "user": text("User"),
            "job_name": text("JobName"),
            "state": state.filter(km),
            "cancelled_by_uid": _fa(cancelled_by[keep]),
            "submit": _fa(times["Submit"][keep]),
            "start": _fa(times["Start"][keep]),
            "end": _fa(times["End"][keep]),
            "elapsed_s": _fa(elapsed[keep]),
            "timelimit_s": _fa(timelimit[keep]),
            "gpu_count": _fa(at.gpu_count[keep]),
            "gpu_equiv": _fa(at.gpu_equiv[keep]),
            "mig_slices": _fa(at.mig_slices[keep]),
            "mig_profile": _fa(at.mig_profile[keep], pa.string()),
            "gpu_type": _fa(at.gpu_type[keep], pa.string()),
            "shards": _fa(at.shards[keep]),
            "req_gpus": _fa(req_gpus[keep]),
            "billing": _fa(at.billing[keep]),
            "cpus": _fa(at.cpus[keep]),
            "mem_mib": _fa(at.mem_mib[keep]),
            "node_list": text("NodeList"),
            "tag_tier": tag_tier,
            "kind": pc.if_else(pc.equal(tag_kind, ""), "unknown", tag_kind),
            **({"admin_comment": admin} if opts.keep_admin_comment else {}),
            "file_index": pa.repeat(pa.scalar(acc.file_index(file), pa.int32()), k),
            "line": _fa(lines[rows]),
        }
    )
    for name in DICTIONARY_COLUMNS:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.dictionary_encode(table.column(name)))
    acc.allocs.append(table)


def _own_window_rows(
    acc: _Accumulator, columns: Mapping[str, pa.Array], lines: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray]:
    """Rows whose End falls in this sub-window (no End: the last one); the rest are the
    overlap every other sub-window also returns (sacct selects by activity in the window)."""
    lo, hi = acc.end_window
    end, bad = fields.parse_times(_col(columns, "End", len(lines)), timezone=acc.options.timezone)
    end = np.where(np.isnat(end), np.datetime64("9999-01-01T00:00:00", "s"), end)
    keep = bad | ((end >= lo) & (end < hi))  # a bad End is kept, to be rejected once
    acc.rows_overlap += int((~keep).sum())
    if keep.all():
        return dict(columns), lines
    mask = pa.array(keep)
    return {k: v.filter(mask) for k, v in columns.items()}, lines[keep]


def _iso(t: np.datetime64) -> str:
    return str(t.astype("datetime64[s]")).replace(" ", "T")


def _fa(values, type: pa.DataType | None = None) -> pa.Array:
    """numpy -> arrow with NaN/None as null (so "unknown" stays null, never a number)."""
    return pa.array(values, type=type, from_pandas=True)


def _id_text(raw: np.ndarray) -> pa.Array:
    return pc.cast(pc.cast(pa.array(raw), pa.int64()), pa.string())


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
    acc: _Accumulator,
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
    _normalize_chunk(acc, columns, nums, file)


def _split_lines(
    acc: _Accumulator, header: _Header, first_line: int, arr: pa.Array, file: str
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
    acc: _Accumulator, header: _Header, first_line: int, block: bytes, n: int, file: str
) -> bool:
    """Split a block with pyarrow's C++ CSV parser (the fast path); False if it cannot.

    The parser is told to quote nothing and to keep empty lines, so every physical line is
    either one parsed row or one "invalid row" with its line number; the line number of each
    row is therefore known. Lines it cannot take (wrong field count, whitespace, a `-p` line
    without its last `|`) go through the row-by-row rule. Blocks with a lone `\r` (a line
    end for the parser, not for sacct) or bytes that are not UTF-8 take the general path.
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


def _header_of(
    acc: _Accumulator, block: bytes, first: int, file: str, delimiter: str
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
        pos = end + 1
        if not text.strip():
            acc.blank_lines += 1
            first += 1
            continue
        return _parse_header(text, first, file, delimiter), block[pos:], first + 1
    return None, b"", first


def _read_stream(
    acc: _Accumulator,
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
    pending: deque[Future[_Accumulator]] = deque()
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
    kid: _Accumulator, header: _Header, first: int, block: bytes, n: int, file: str
) -> _Accumulator:
    """Split and normalize one block (`n` lines from line `first`) on a worker thread."""
    if not _csv_block(kid, header, first, block, n, file):
        _split_lines(kid, header, first, _block_lines(block, kid), file)
    return kid


# --------------------------------------------------------------------------------- finishing


def _finish(acc: _Accumulator, files: list[str], derive: bool = True) -> LoadResult:
    schema_src = acc.allocs
    if schema_src:
        table = pa.concat_tables(schema_src, promote_options="permissive").unify_dictionaries()
        frame = _with_file_names(table, acc.files).to_pandas(types_mapper=pd.ArrowDtype)
    else:
        frame = _empty_frame()
    # -D returns every run of a requeued job and overlapping dumps repeat rows: the key of a run
    # is (Cluster, JobIDRaw, Submit) (+Start, for versions that keep Submit on requeue).
    key = ["cluster", "job_id_raw", "job_id", "submit", "start"]
    dup = columns_mod.duplicated(frame, key, keep="first")
    if dup.any():
        d = frame[dup]
        for name, group in d.groupby("file", sort=False):
            acc.reject(
                str(name),
                group["line"].to_numpy(dtype=np.int64),
                [
                    # "reason: detail": the count by reason is one key, not one per job
                    f"duplicate allocation row (same Cluster, JobIDRaw, Submit, Start): job {j}"
                    for j in group["job_id"].tolist()
                ],
            )
        frame = frame[~dup].reset_index(drop=True)
    frame = _fold_steps(frame, acc.steps, acc.options.usage_sums_gpus)
    if derive:  # (the accounting store keeps the frame before this step)
        frame = _derive(frame, acc.options)
    result = LoadResult(
        frame=frame,
        files=files,
        rows_read=acc.rows_read,
        rows_analyzed=acc.rows_read - acc.rows_rejected,
        rows_rejected=acc.rows_rejected,
        step_rows=acc.step_rows,
        blank_lines=acc.blank_lines,
        rejected=sorted(acc.rejected, key=lambda r: (r.file, r.line))[:MAX_REJECTED_KEPT],
        rejected_reasons=acc.reasons,
        has_usage=acc.has_usage,
        latin1_lines=acc.latin1_lines,
        usage_over_100=acc.usage_over_100,
    )
    assert len(frame) + result.step_rows == result.rows_analyzed, (
        len(frame),
        result.step_rows,
        result.rows_analyzed,
    )
    result.check()
    return result


def _empty_frame() -> pd.DataFrame:
    """A zero-row frame with the normalized schema (when no allocation row survived)."""
    acc = _Accumulator(Options())
    epoch = pa.array(["1000000000"])
    cols = {"JobIDRaw": pa.array(["1"]), "State": pa.array(["COMPLETED"])}
    cols.update(Submit=epoch, Start=epoch, End=epoch, ElapsedRaw=pa.array(["0"]))
    _normalize_chunk(acc, cols, np.array([0]), "")
    return _with_file_names(acc.allocs[0].slice(0, 0), [""]).to_pandas(types_mapper=pd.ArrowDtype)


def _with_file_names(table: pa.Table, files: list[str]) -> pa.Table:
    """Replace `file_index` by a dictionary-encoded `file` column (one copy of each name)."""
    idx = table.column("file_index").combine_chunks()
    file_col = pa.DictionaryArray.from_arrays(idx, pa.array(files or [""], pa.string()))
    pos = table.schema.get_field_index("file_index")
    return table.set_column(pos, "file", file_col)


def _fold_steps(frame: pd.DataFrame, steps: list[pa.Table], sums: bool = False) -> pd.DataFrame:
    """Attach each step's usage to the run (allocation row) it belongs to.

    A requeued job has several runs under one JobIDRaw, so a step belongs to the latest run of
    its job that started at or before the step (merge_asof by (cluster, JobIDRaw) on start).
    Per run: the highest gpuutil and gpumem over its steps (`.extern` excluded upstream).
    """
    # (new columns are assigned in place: the frame is ours, a copy would double the peak)
    frame["gpu_util_pct"] = pd.Series(np.nan, index=frame.index, dtype=pd.ArrowDtype(pa.float64()))
    frame["gpu_mem_used_mib"] = frame["gpu_util_pct"].copy()
    if not steps or frame.empty:
        return frame
    st = pa.concat_tables(steps)
    # one integer key per (cluster, JobIDRaw), shared by both sides: cluster names are
    # coded through the two dictionaries (a null cluster codes -1 on both sides)
    f_idx, f_names = columns_mod.dictionary_indices(frame, "cluster")
    s_enc = pc.dictionary_encode(st.column("cluster")).combine_chunks()
    s_idx = s_enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    names = {n: i for i, n in enumerate(dict.fromkeys(f_names + s_enc.dictionary.to_pylist()))}
    f_code = np.array([names[n] for n in f_names] + [-1], dtype=np.int64)[f_idx]
    s_code = np.array([names[n] for n in s_enc.dictionary.to_pylist()] + [-1], np.int64)[s_idx]
    codes = np.concatenate([f_code, s_code])
    raw = np.concatenate(
        [
            frame["job_id_raw"].to_numpy(dtype=float, na_value=-1),
            st.column("job_id_raw").to_numpy().astype(float),
        ]
    )
    key = codes.astype(np.int64) * (1 << 40) + raw.astype(np.int64)
    never = np.datetime64("1970-01-01T00:00:00", "s")
    runs = pd.DataFrame(
        {
            "key": key[: len(frame)],
            "run_start": frame["start"]
            .to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
            .astype("datetime64[ns]"),
            "row": np.arange(len(frame)),
            "run_gpus": frame["gpu_count"].to_numpy(dtype=float, na_value=np.nan),
        }
    )
    runs["run_start"] = runs["run_start"].fillna(pd.Timestamp(never))
    steps_df = pd.DataFrame(
        {
            "key": key[len(frame) :],
            "step_start": st.column("step_start").to_numpy().astype("datetime64[ns]"),
            "util": st.column("step_gpu_util_pct").to_numpy().astype(float),
            "mem": st.column("step_gpu_mem_mib").to_numpy().astype(float),
            "step_gpus": st.column("step_gpus").to_numpy().astype(float),
        }
    )
    # a step without a start time belongs to the latest run of its job
    steps_df["step_start"] = steps_df["step_start"].fillna(pd.Timestamp("2262-01-01"))
    joined = pd.merge_asof(
        steps_df.sort_values("step_start"),
        runs.sort_values("run_start"),
        left_on="step_start",
        right_on="run_start",
        by="key",
        direction="backward",
    )
    joined = joined.dropna(subset=["row"])
    if sums:  # Slurm >= 24.05: sums over the step's GPUs -> per-GPU means
        gpus = joined["step_gpus"].fillna(joined["run_gpus"]).to_numpy(float)
        gpus = np.where(np.nan_to_num(gpus) >= 1, gpus, 1.0)
        joined["util"] = joined["util"].to_numpy(float) / gpus
        joined["mem"] = joined["mem"].to_numpy(float) / gpus
    agg = joined.groupby("row").agg(util=("util", "max"), mem=("mem", "max"))
    rows = agg.index.to_numpy(dtype=np.int64)
    util = np.full(len(frame), np.nan)
    mem = np.full(len(frame), np.nan)
    util[rows] = agg["util"].to_numpy(dtype=float)
    mem[rows] = agg["mem"].to_numpy(dtype=float)
    frame["gpu_util_pct"] = pd.array(util, dtype=pd.ArrowDtype(pa.float64()))
    frame["gpu_mem_used_mib"] = pd.array(mem, dtype=pd.ArrowDtype(pa.float64()))
    return frame


def _derive(frame: pd.DataFrame, opts: Options) -> pd.DataFrame:
    """Columns computed from the parsed ones: tier, shard fractions, GPU-hours, wait."""
    f = frame
    float_t = pd.ArrowDtype(pa.float64())
    # tier: the policy's mapping of the QOS, else the QOS name itself (the tier= tag the
    # job_submit plugin wrote is kept as `tag_tier`, for checking the two agree)
    policy = opts.tier_for_qos

    def tier_of(qos: str) -> str:
        tier = policy(qos) if policy is not None else None
        return qos if tier is None or pd.isna(tier) else tier

    tier = columns_mod.text_per_value(f, "qos", tier_of)  # once per distinct QOS
    f["tier"] = pd.arrays.ArrowExtensionArray(tier)
    f["tag_tier"] = f["tag_tier"].where(f["tag_tier"] != "", None)
    # shards -> GPU share, by partition's shards per GPU (or the "*" default); unknown -> NaN
    shards = f["shards"].to_numpy(dtype=float, na_value=np.nan)
    gpu_equiv = f["gpu_equiv"].to_numpy(dtype=float, na_value=np.nan)
    parts = columns_mod.objects(f, "partition", "")
    default = opts.shards_per_gpu.get("*", np.nan)
    per_gpu = np.full(len(f), default, dtype=float)
    for part, value in opts.shards_per_gpu.items():  # one pass per configured partition
        if part != "*":
            per_gpu[parts == part] = value
    shard_only = ~np.isnan(shards) & np.isnan(gpu_equiv)
    gpu_equiv = np.where(shard_only, shards / per_gpu, gpu_equiv)
    f["shard_fraction_known"] = pd.array(
        np.where(np.isnan(shards), True, ~np.isnan(per_gpu)), dtype=pd.ArrowDtype(pa.bool_())
    )
    f["gpu_equiv"] = pd.array(gpu_equiv, dtype=float_t)
    elapsed = f["elapsed_s"].to_numpy(dtype=float, na_value=np.nan)
    start = f["start"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    end = f["end"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    # no Elapsed for a row? End - Start is the same quantity
    derived = (end - start).astype("timedelta64[s]").astype(float)
    derived[np.isnat(end) | np.isnat(start)] = np.nan
    elapsed = np.where(np.isnan(elapsed), derived, elapsed)
    f["elapsed_s"] = pd.array(elapsed, dtype=float_t)
    started = ~np.isnat(start)
    f["gpu_job"] = pd.array(
        (np.nan_to_num(f["gpu_count"].to_numpy(dtype=float, na_value=np.nan)) > 0)
        | (np.nan_to_num(shards) > 0),
        dtype=pd.ArrowDtype(pa.bool_()),
    )
    gh = np.nan_to_num(gpu_equiv) * np.nan_to_num(elapsed) / 3600.0
    f["gpu_hours"] = pd.array(np.where(started, gh, 0.0), dtype=float_t)
    submit = f["submit"].to_numpy(dtype="datetime64[s]", na_value=np.datetime64("NaT"))
    wait = (start - submit).astype("timedelta64[s]").astype(float)
    wait[np.isnat(start) | np.isnat(submit)] = np.nan
    f["wait_s"] = pd.array(wait, dtype=float_t)
    # run end for time splitting: End, else Start + Elapsed (running jobs)
    run_end = np.where(np.isnat(end), start + np.nan_to_num(elapsed).astype("timedelta64[s]"), end)
    f["run_end"] = pd.array(run_end.astype("datetime64[s]"), dtype=pd.ArrowDtype(pa.timestamp("s")))
    # one job per het job (components +1.. belong to the +0 leader)
    het = f["het_offset"].to_numpy(dtype=float, na_value=np.nan)
    f["counts_as_job"] = pd.array(np.isnan(het) | (het == 0), dtype=pd.ArrowDtype(pa.bool_()))
    # a pending array range `123_[5-9,11%2]` stands for its tasks
    tasks = columns_mod.per_value(
        f, "array_range", lambda r: np.nan if r is None else _range_size(r), None
    )
    f["array_pending_tasks"] = pd.array(tasks.astype(float), dtype=float_t)
    # MIG devices never report gpuutil/gpumem (NVML limitation, gres.shtml): unknown, not 0
    mig = f["mig_slices"].to_numpy(dtype=float, na_value=0) > 0
    for c in ("gpu_util_pct", "gpu_mem_used_mib"):
        vals = f[c].to_numpy(dtype=float, na_value=np.nan).copy()
        vals[mig] = np.nan
        f[c] = pd.array(vals, dtype=float_t)
    return f


def derive_columns(frame: pd.DataFrame, options: Options) -> pd.DataFrame:
    """The derived columns (tier, shard fractions, GPU-hours, wait, run end) of a frame
    loaded with `derive=False`: what the accounting store reads back (`store.py`). Tier and
    shard fractions depend on analysis options, so the store keeps the frame before them."""
    return _derive(frame, options)


def _range_size(text: str) -> float:
    size = fields.array_range_size(text)
    return np.nan if size is None else float(size)


# ------------------------------------------------------------------------------- entry points


def load_files(
    paths: Sequence[str | os.PathLike[str]],
    *,
    options: Options | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    derive: bool = True,
) -> LoadResult:
    """Load saved sacct dumps (plain or gzipped, each with its header line); `derive=False`
    stops before the derived columns (`derive_columns`), as the accounting store keeps it."""
    acc = _Accumulator(options or Options())
    names = [os.fspath(p) for p in paths]
    for name in names:
        with open_binary(name) as stream:
            _read_stream(acc, stream, name, chunk_bytes)
    return _finish(acc, names, derive)


def load_text(
    text: str,
    *,
    name: str = "sacct",
    options: Options | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    delimiter: str = "|",
) -> LoadResult:
    """Load sacct output held in memory (e.g. a live call; `delimiter` as given to sacct)."""
    acc = _Accumulator(options or Options())
    _read_stream(acc, io.BytesIO(text.encode("utf-8")), name, chunk_bytes, delimiter)
    return _finish(acc, [name])


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
    acc = _Accumulator(options or Options())
    for i, (since, until) in enumerate(bounds):
        lo = np.datetime64(_naive_utc(since), "s") if i else np.datetime64("0001-01-01", "s")
        last = i == len(bounds) - 1
        hi = np.datetime64("9999-12-31", "s") if last else np.datetime64(_naive_utc(until), "s")
        acc.end_window = (lo, hi)
        data = fetch(since, until).encode("utf-8", "surrogateescape")
        _read_stream(acc, io.BytesIO(data), name, chunk_bytes, delimiter)
        del data
    acc.end_window = None
    result = _finish(acc, [name], derive)
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
    acc = _Accumulator(options or Options())
    batch: list[Mapping[str, str]] = []
    first = 1

    def flush() -> None:
        nonlocal first, batch
        if not batch:
            return
        names = sorted({k for r in batch for k in r})
        cols = {k: pa.array([r.get(k) for r in batch], pa.string()) for k in names}
        _normalize_chunk(acc, cols, np.arange(first, first + len(batch)), name)
        first += len(batch)
        batch = []

    for record in records:
        batch.append(record)
        if len(batch) >= chunk_rows:
            flush()
    flush()
    return _finish(acc, [name])
