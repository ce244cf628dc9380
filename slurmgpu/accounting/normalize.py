"""The loader's normalize stage: one chunk of sacct columns (text) -> a typed allocation table
and the step rows' usage, into an `Accumulator` that also keeps the rejection ledger.

Each field is parsed with pyarrow compute on the rows that use it (steps: id, Start, usage;
allocations: the rest); a bad value rejects its row with file:line:reason, the first reason
found winning. `load.py` reads text into columns; `finish.py` joins the chunks into the frame.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from slurmgpu.accounting import fields, tres

MAX_REJECTED_KEPT = 100
# Few distinct values over millions of rows: stored dictionary-encoded (pyarrow dictionary
# dtype), so the per-run frame costs a 4-byte index per value instead of the string.
DICTIONARY_COLUMNS = (
    "cluster", "partition", "qos", "account", "user", "state", "kind", "tag_tier",
    "mig_profile", "gpu_type", "npu_type",
)  # fmt: skip
# job_submit.lua writes `slurmgpu tier=P1 kind=finetune` into AdminComment (the wrapper into
# Comment); tokens are separated by whitespace, `;` or `,`.
_TAG = r"(?:^|[\s;,]){}=(?P<v>[A-Za-z0-9_.-]+)"


@dataclass(frozen=True)
class Rejected:
    """One row that could not be analyzed."""

    file: str
    line: int
    reason: str


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


class Accumulator:
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

    def child(self) -> Accumulator:
        """An empty accumulator for one chunk (filled on a worker thread, merged in order)."""
        kid = Accumulator(self.options)
        kid.files = self.files  # read-only on workers: file_index() is called first here
        kid.end_window = self.end_window
        return kid

    def merge(self, kid: Accumulator) -> None:
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


def normalize_chunk(
    acc: Accumulator, columns: Mapping[str, pa.Array], lines: np.ndarray, file: str
) -> None:
    """Parse one chunk of rows (columns of equal length) into the accumulator.

    Rows are split into allocation rows and step rows first; each field is then parsed only on
    the rows that use it (steps: id, Start, usage; allocations: the rest), so the ~2/3 of a
    dump that are steps cost little. The stages run in this order because a row's first
    reason wins: ids, steps' usage, allocations' fields; then the bad rows are rejected and
    the good allocation rows become one typed table.
    """
    if len(lines) == 0:
        return
    if acc.end_window is not None:
        columns, lines = _own_window_rows(acc, columns, lines)
        if len(lines) == 0:
            return
    acc.rows_read += len(lines)
    chunk = _Chunk(acc, columns, lines)
    _step_usage(chunk)
    parsed = _parse_allocations(chunk) if len(chunk.alloc_rows) else None
    bad_rows = _reject_bad_rows(chunk, file)
    if parsed is None:
        return
    keep = ~bad_rows[chunk.alloc_rows]
    if keep.any():
        acc.allocs.append(_allocation_table(chunk, parsed, keep, file))


class _Chunk:
    """One chunk being normalized: its columns, line numbers, job ids, the split into step
    and allocation rows, and the first reason found against each bad row (`errors`)."""

    def __init__(self, acc: Accumulator, columns: Mapping[str, pa.Array], lines: np.ndarray):
        self.acc, self.opts = acc, acc.options
        self.columns, self.lines = columns, lines
        n = self.n = len(lines)
        self.errors: dict[int, str] = {}
        everything = np.arange(n)
        self.jid, jraw = columns.get("JobID"), columns.get("JobIDRaw")
        ids = self.ids = fields.JobIds(self.jid, jraw)
        for i in np.flatnonzero(ids.too_big).tolist():
            self.errors.setdefault(int(everything[i]), fields.JOB_ID_RANGE_REASON)
        self.flag(ids.bad, "JobID/JobIDRaw", self.jid if self.jid is not None else jraw, everything)
        is_step = ids.is_step & ~ids.bad
        alloc = ~ids.is_step & ~ids.bad
        self.step_rows = np.flatnonzero(is_step)
        self.alloc_rows = np.flatnonzero(alloc)
        self.step_m, self.alloc_m = pa.array(is_step), pa.array(alloc)
        cluster_all = columns.get("Cluster")
        if cluster_all is None:
            cluster_all = pa.repeat(pa.scalar(self.opts.cluster, pa.string()), n)
        self.cluster_all = pc.fill_null(cluster_all, self.opts.cluster)

    def flag(self, mask: np.ndarray, what: str, raw: pa.Array, rows: np.ndarray) -> None:
        """Record a reason for each bad value; `rows` maps the parsed subset to chunk rows."""
        for i in np.flatnonzero(mask).tolist():
            self.errors.setdefault(int(rows[i]), f"bad {what} {raw[i].as_py()!r}")

    def sub(self, name: str, mask: pa.Array) -> pa.Array:
        """Column `name` on the rows of `mask` (nulls when the column is absent)."""
        arr = self.columns.get(name)
        return arr.filter(mask) if arr is not None else pa.nulls(int(mask.true_count), pa.string())


def _step_usage(chunk: _Chunk) -> None:
    """Step rows: only their usage matters; `.extern` is never counted (adopted processes,
    near-zero usage, `gres/gpuutil=0` placeholders)."""
    acc, opts, columns, step_rows = chunk.acc, chunk.opts, chunk.columns, chunk.step_rows
    if not len(step_rows):
        return
    s_start, bad = fields.parse_times(chunk.sub("Start", chunk.step_m), timezone=opts.timezone)
    chunk.flag(bad, "Start time", chunk.sub("Start", chunk.step_m), step_rows)
    k = len(step_rows)
    util = np.full(k, np.nan)
    mem = np.full(k, np.nan)
    step_gpus = np.full(k, np.nan)
    if any(c in columns for c in ("TRESUsageInMax", "TRESUsageInAve")):
        acc.has_usage = True
        for name in ("TRESUsageInAve", "TRESUsageInMax"):  # Max overrides Ave
            if name in columns:
                _usage_of(chunk, name, util, mem)
        acc.usage_over_100 += int((np.nan_to_num(util) > 100).sum())
        has = np.flatnonzero(~(np.isnan(util) & np.isnan(mem)))
        if opts.usage_sums_gpus and len(has) and "AllocTRES" in columns:
            # the step's own GPU count (Slurm prints AllocTRES on step rows)
            st = tres.parse_alloc_tres(chunk.sub("AllocTRES", chunk.step_m).take(pa.array(has)))
            step_gpus[has] = st.gpu_count
    errors = chunk.errors
    ok = ~np.isin(step_rows, np.fromiter(errors, dtype=np.int64, count=len(errors)))
    acc.step_rows += int(ok.sum())
    keep = ok & ~chunk.ids.is_extern[step_rows] & ~(np.isnan(util) & np.isnan(mem))
    if keep.any():
        km = pa.array(keep)
        acc.steps.append(
            pa.table(
                {
                    "cluster": chunk.cluster_all.filter(chunk.step_m).filter(km),
                    "job_id_raw": pa.array(chunk.ids.raw[step_rows][keep]).cast(pa.int64()),
                    "step_start": pa.array(s_start[keep]),
                    "step_gpu_util_pct": pa.array(util[keep]),
                    "step_gpu_mem_mib": pa.array(mem[keep]),
                    "step_gpus": pa.array(step_gpus[keep]),
                }
            )
        )


def _usage_of(chunk: _Chunk, name: str, util: np.ndarray, mem: np.ndarray) -> None:
    """The steps' gres/gpuutil and gres/gpumem from usage column `name`, into `util`/`mem`
    where it has them."""
    col = chunk.sub(name, chunk.step_m)
    # most usage strings carry no GPU keys (Slurm < 23.02, CPU jobs): skip them
    gpu = pc.match_substring(pc.fill_null(col, ""), "gres/gpu").to_numpy(zero_copy_only=False)
    if not gpu.any():
        return
    sel = np.flatnonzero(gpu)
    u = tres.parse_usage_tres(col.take(pa.array(sel)), bare_mem_unit=chunk.opts.bare_gpumem_unit)
    util[sel] = np.where(np.isnan(u.gpu_util_pct), util[sel], u.gpu_util_pct)
    mem[sel] = np.where(np.isnan(u.gpu_mem_mib), mem[sel], u.gpu_mem_mib)
    for i, reason in u.errors.items():
        chunk.errors.setdefault(int(chunk.step_rows[sel[i]]), reason)


@dataclass
class _Allocations:
    """The allocation rows' parsed fields (one entry per allocation row of the chunk)."""

    state: pa.Array
    cancelled_by: np.ndarray
    times: dict[str, np.ndarray]  # Submit, Start, End
    elapsed: np.ndarray
    timelimit: np.ndarray
    alloc: tres.AllocTres
    req_gpus: np.ndarray


def _parse_allocations(chunk: _Chunk) -> _Allocations:
    """Allocation rows: state, times, durations and TRES parsed, each bad value flagged."""
    state, cancelled_by, times = _states_and_times(chunk)
    elapsed, timelimit = _durations(chunk, state, times)
    at, req_gpus = _tres_of(chunk)
    return _Allocations(state, cancelled_by, times, elapsed, timelimit, at, req_gpus)


def _states_and_times(chunk: _Chunk) -> tuple[pa.Array, np.ndarray, dict[str, np.ndarray]]:
    a, alloc_m, opts, errors = chunk.alloc_rows, chunk.alloc_m, chunk.opts, chunk.errors
    state, cancelled_by, bad = fields.parse_states(chunk.sub("State", alloc_m))
    chunk.flag(bad, "State", chunk.sub("State", alloc_m), a)
    unknown_state = ~bad & ~pc.is_in(state, fields.JOB_STATES_ARRAY).to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(unknown_state).tolist():
        raw_state = chunk.sub("State", alloc_m)[i].as_py()
        errors.setdefault(int(a[i]), f"unknown job state {raw_state!r}")
    times = {}
    for name in ("Submit", "Start", "End"):
        raw_t = chunk.sub(name, alloc_m)
        times[name], bad = fields.parse_times(raw_t, timezone=opts.timezone)
        for i in np.flatnonzero(bad).tolist():
            reason = fields.time_reason(name, raw_t[i].as_py(), opts.timezone)
            errors.setdefault(int(a[i]), reason)
    for later, earlier in (("End", "Start"), ("Start", "Submit")):
        t1, t0 = times[later], times[earlier]
        wrong = ~np.isnat(t1) & ~np.isnat(t0) & (t1 < t0)
        for i in np.flatnonzero(wrong).tolist():
            errors.setdefault(int(a[i]), f"{later} {_iso(t1[i])} is before {earlier} {_iso(t0[i])}")
    ranges = chunk.ids.array_range[a]
    for i in np.flatnonzero(pd.notna(ranges)).tolist():
        problem = fields.array_range_problem(ranges[i])
        if problem:
            errors.setdefault(int(a[i]), problem)
    return state, cancelled_by, times


def _durations(
    chunk: _Chunk, state: pa.Array, times: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Elapsed and time limit (seconds); a run that ran without a Start time is flagged."""
    a, alloc_m, columns = chunk.alloc_rows, chunk.alloc_m, chunk.columns
    if "ElapsedRaw" in columns:
        elapsed, bad = fields.parse_int(chunk.sub("ElapsedRaw", alloc_m))
        chunk.flag(bad, "ElapsedRaw", chunk.sub("ElapsedRaw", alloc_m), a)
    else:
        elapsed, _unl, bad = fields.parse_durations(chunk.sub("Elapsed", alloc_m))
        chunk.flag(bad, "Elapsed", chunk.sub("Elapsed", alloc_m), a)
    # ran for a while (a state only a started job has, and an elapsed time) yet no Start:
    # its GPU-hours cannot be placed in time (an array's pending range may say TIMEOUT
    # with no Start and no elapsed time: that one is fine)
    ran = pc.is_in(state, _RAN_STATES).to_numpy(zero_copy_only=False)
    ran &= np.nan_to_num(np.asarray(elapsed, dtype=float)) > 0
    for i in np.flatnonzero(ran & np.isnat(times["Start"])).tolist():
        raw_start = chunk.sub("Start", alloc_m)[i].as_py()
        chunk.errors.setdefault(
            int(a[i]),
            f"State {state[i].as_py()} for {int(elapsed[i])} s but no Start time ({raw_start!r})",
        )
    if "TimelimitRaw" in columns:
        tl_min, bad = fields.parse_int(chunk.sub("TimelimitRaw", alloc_m), unlimited_ok=True)
        chunk.flag(bad, "TimelimitRaw", chunk.sub("TimelimitRaw", alloc_m), a)
        timelimit = tl_min * 60
    elif "Timelimit" in columns:
        timelimit, _unl, bad = fields.parse_durations(chunk.sub("Timelimit", alloc_m))
        chunk.flag(bad, "Timelimit", chunk.sub("Timelimit", alloc_m), a)
    else:
        timelimit = np.full(len(a), np.nan)
    return elapsed, timelimit


def _tres_of(chunk: _Chunk) -> tuple[tres.AllocTres, np.ndarray]:
    """AllocTRES, and the GPUs requested (ReqTRES) of rows that were allocated nothing."""
    a, alloc_m, errors = chunk.alloc_rows, chunk.alloc_m, chunk.errors
    alloc_tres = chunk.sub("AllocTRES", alloc_m)
    at = tres.parse_alloc_tres(alloc_tres)
    for i, reason in at.errors.items():
        errors.setdefault(int(a[i]), f"AllocTRES: {reason}")
    req_gpus = np.full(len(a), np.nan)
    if "ReqTRES" in chunk.columns:
        # requested GPUs matter only where nothing was allocated (pending, never started)
        empty = pc.equal(pc.fill_null(alloc_tres, ""), "").to_numpy(zero_copy_only=False)
        if empty.any():
            sel = np.flatnonzero(empty)
            rt = tres.parse_alloc_tres(chunk.sub("ReqTRES", alloc_m).take(pa.array(sel)))
            req_gpus[sel] = rt.gpu_equiv
            for i, reason in rt.errors.items():
                errors.setdefault(int(a[sel[i]]), f"ReqTRES: {reason}")
    return at, req_gpus


def _reject_bad_rows(chunk: _Chunk, file: str) -> np.ndarray:
    """Reject every row with a reason (in line order); a mask of the bad chunk rows."""
    bad_rows = np.zeros(chunk.n, dtype=bool)
    errors = chunk.errors
    if errors:
        idx = np.fromiter(errors.keys(), dtype=np.int64, count=len(errors))
        bad_rows[idx] = True
        order = np.argsort(idx)
        chunk.acc.reject(file, chunk.lines[idx[order]], [errors[int(i)] for i in idx[order]])
    return bad_rows


def _allocation_table(chunk: _Chunk, p: _Allocations, keep: np.ndarray, file: str) -> pa.Table:
    """The good allocation rows (`keep`) as one typed table, few-valued columns dictionary
    encoded."""
    columns, ids, alloc_m = chunk.columns, chunk.ids, chunk.alloc_m
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
    rows = chunk.alloc_rows[keep]
    no_array = np.isnan(ids.array_task[rows]) & ~ids.array_range[rows].astype(bool)
    at = p.alloc
    table = pa.table(
        {
            "cluster": chunk.cluster_all.filter(alloc_m).filter(km),
            "job_id": text("JobID") if chunk.jid is not None else _id_text(ids.raw[rows]),
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
            "state": p.state.filter(km),
            "cancelled_by_uid": _fa(p.cancelled_by[keep]),
            "submit": _fa(p.times["Submit"][keep]),
            "start": _fa(p.times["Start"][keep]),
            "end": _fa(p.times["End"][keep]),
            "elapsed_s": _fa(p.elapsed[keep]),
            "timelimit_s": _fa(p.timelimit[keep]),
            "gpu_count": _fa(at.gpu_count[keep]),
            "gpu_equiv": _fa(at.gpu_equiv[keep]),
            "mig_slices": _fa(at.mig_slices[keep]),
            "mig_profile": _fa(at.mig_profile[keep], pa.string()),
            "gpu_type": _fa(at.gpu_type[keep], pa.string()),
            "shards": _fa(at.shards[keep]),
            "npus": _fa(at.npu_count[keep]),
            "npu_type": _fa(at.npu_type[keep], pa.string()),
            "req_gpus": _fa(p.req_gpus[keep]),
            "billing": _fa(at.billing[keep]),
            "cpus": _fa(at.cpus[keep]),
            "mem_mib": _fa(at.mem_mib[keep]),
            "node_list": text("NodeList"),
            "tag_tier": tag_tier,
            "kind": pc.if_else(pc.equal(tag_kind, ""), "unknown", tag_kind),
            **({"admin_comment": admin} if chunk.opts.keep_admin_comment else {}),
            **({"sluid": text("SLUID")} if "SLUID" in columns else {}),  # sacct --json 26.05+
            **_slurm_energy(columns, alloc_m, km),
            "file_index": pa.repeat(pa.scalar(chunk.acc.file_index(file), pa.int32()), k),
            "line": _fa(chunk.lines[rows]),
        }
    )
    for name in DICTIONARY_COLUMNS:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.dictionary_encode(table.column(name)))
    return table


# joules as sacct prints them: digits (NO_VAL64 and larger are "not set")
_JOULES = r"^[0-9]{1,19}$"
_ENERGY_TRES = r"(?:^|,)energy=(?P<v>[0-9]{1,19})(?:,|$)"
_NOT_SET_J = 2.0**63


def _slurm_energy(columns: Mapping[str, pa.Array], alloc_m: pa.Array, km: pa.Array) -> dict:
    """`energy_j`: Slurm's own energy of each run (`acct_gather_energy`), joules; null where
    not recorded. sacct's ConsumedEnergyRaw of the allocation row, else the `energy` TRES
    of its TRESUsageInTot. 0 is "not recorded" (what sacct prints without an energy plugin),
    as are NO_VAL64 and text that is not a number. No column, no `energy_j` column."""
    found = []
    for name, pattern in (("ConsumedEnergyRaw", None), ("TRESUsageInTot", _ENERGY_TRES)):
        arr = columns.get(name)
        if arr is None:
            continue
        text = pc.fill_null(arr.filter(alloc_m).filter(km), "")
        if pattern is not None:
            text = pc.struct_field(
                fields.fill_struct(pc.extract_regex(text, pattern), {"v": ""}), "v"
            )
        ok = pc.match_substring_regex(text, _JOULES)
        joules = pc.cast(pc.if_else(ok, text, "0"), pa.float64())
        good = pc.and_(pc.greater(joules, 0.0), pc.less(joules, _NOT_SET_J))
        found.append(pc.if_else(good, joules, pa.scalar(None, pa.float64())))
    if not found:
        return {}
    out = found[0] if len(found) == 1 else pc.coalesce(*found)
    return {"energy_j": out}


def _own_window_rows(
    acc: Accumulator, columns: Mapping[str, pa.Array], lines: np.ndarray
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
