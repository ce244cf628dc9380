"""The loader's finish stage: the chunks' allocation tables -> ONE per-run frame. Duplicate
runs rejected, steps' usage folded into their run (`_fold_steps`), derived columns (tier, GPU
share of shards, GPU-hours, waits; `_derive`), and the row accounting checked (`LoadResult`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from slurmgpu.accounting import columns as columns_mod
from slurmgpu.accounting import fields
from slurmgpu.accounting.normalize import (
    MAX_REJECTED_KEPT,
    Accumulator,
    Options,
    Rejected,
    normalize_chunk,
)


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


def finish(acc: Accumulator, files: list[str], derive: bool = True) -> LoadResult:
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
    acc = Accumulator(Options())
    epoch = pa.array(["1000000000"])
    cols = {"JobIDRaw": pa.array(["1"]), "State": pa.array(["COMPLETED"])}
    cols.update(Submit=epoch, Start=epoch, End=epoch, ElapsedRaw=pa.array(["0"]))
    normalize_chunk(acc, cols, np.array([0]), "")
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


def _range_size(text: str) -> float:
    size = fields.array_range_size(text)
    return np.nan if size is None else float(size)


def derive_columns(frame: pd.DataFrame, options: Options) -> pd.DataFrame:
    """The derived columns (tier, shard fractions, GPU-hours, wait, run end) of a frame
    loaded with `derive=False`: what the accounting store reads back (`store.py`). Tier and
    shard fractions depend on analysis options, so the store keeps the frame before them."""
    return _derive(frame, options)
