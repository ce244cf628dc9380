"""The accounting store: normalized runs in Parquet, partitioned by cluster and month.

`ingest()` reads sacct dumps through the normalizer (`load.load_files(derive=False)`: typed
columns, steps folded into their run, requeued runs apart, bad rows rejected) and keeps that
frame, before the derived columns (tier, shard fractions, GPU-hours), which depend on the
analysis' options and are computed again on reading (`load.derive_columns`). So an analysis
of the store is the analysis of the text (`read_store()` is a row source, `read.StoreSource`).

Layout (Hive-style folders, readable by pyarrow, DuckDB, Spark or Trino)::

    STORE/manifest.json                                   what the store holds (the truth)
    STORE/cluster=CLUSTER/month=YYYY-MM/part-ID.parquet   one file per partition version

A run lands in the month of its Submit (stable while a job goes pending -> running -> ended,
so a later row of the same run replaces it in the same partition). The key of a run is the
normalizer's (cluster, JobIDRaw, JobID, Submit, Start). Merging keeps, per key, an ended row
over a running one, else the later ingest's row; a never-started row (no Start, no End) is
dropped once another ingest has that job (same JobIDRaw and Submit) started.

Crash safety: an ingest writes new partition files under names no manifest lists (temp name,
fsync, rename), then swaps the manifest atomically (`write_atomic`); only then are files no
manifest lists removed. Killed at any point, the store is the old manifest's (or the new
one's); stray files are removed by the next ingest. One ingest at a time (a lock file).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurmgpu.accounting import load as load_mod
from slurmgpu.accounting import normalize as normalize_mod
from slurmgpu.errors import SacctParseError, StoreError

MANIFEST = "_manifest.json"  # ("_": dataset readers skip it)
FORMAT = "slurmgpu-store-1"
LOCK = ".ingest.lock"
NULL_CLUSTER = "__HIVE_DEFAULT_PARTITION__"  # Hive's folder name for a null value
SEQ = "ingest_seq"  # which ingested file a stored row came from (merging order)
# tests only: seconds to sleep after each partition file written (to kill an ingest mid-way)
SLEEP_ENV = "SLURMGPU_STORE_TEST_SLEEP"


@dataclass(frozen=True)
class IngestSummary:
    """What one ingest did."""

    store: str
    files_read: tuple[str, ...]
    files_skipped: tuple[str, ...]  # already in the store (same sha256 and cluster)
    runs_read: int
    runs_superseded: int  # stored or read rows replaced by another row of the same run
    runs_stored: int  # runs in the store afterwards
    partitions_written: tuple[str, ...]

    def text(self) -> str:
        lines = [
            f"store {self.store}: {len(self.files_read)} file(s) ingested, "
            f"{len(self.files_skipped)} already in the store",
            f"  runs read {self.runs_read}, superseded {self.runs_superseded}, "
            f"stored {self.runs_stored}",
        ]
        lines += [f"  skipped (already ingested): {f}" for f in self.files_skipped]
        lines += [f"  wrote {p}" for p in self.partitions_written]
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ the manifest


def _empty_manifest() -> dict[str, Any]:
    return {"format": FORMAT, "next_seq": 0, "runs_superseded": 0, "files": [], "partitions": []}


def read_manifest(store: str | os.PathLike[str]) -> dict[str, Any]:
    """The store's manifest (an empty one for a new, empty or missing directory)."""
    root = Path(store)
    if root.exists() and not root.is_dir():
        raise StoreError(f"{root}: not a directory (a store is a directory)")
    path = root / MANIFEST
    if not path.exists():
        if root.is_dir() and any(p.name not in (LOCK,) for p in root.iterdir()):
            raise StoreError(
                f"{root}: not an accounting store (no {MANIFEST}, and the directory is not empty)"
            )
        return _empty_manifest()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path}: cannot read the store manifest: {exc}") from None
    ok = isinstance(data, dict) and data.get("format") == FORMAT
    ok = ok and isinstance(data.get("files"), list) and isinstance(data.get("partitions"), list)
    ok = ok and all(isinstance(p, dict) and {"cluster", "month", "path"} <= set(p)
                    for p in data["partitions"])  # fmt: skip
    if not ok:
        raise StoreError(f"{path}: not a {FORMAT} manifest (corrupt or another version)")
    return data


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / LOCK, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StoreError(f"{root}: another ingest is running (lock {LOCK})") from None
        yield


def _sha256(path: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        raise SacctParseError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest(), size


def _folder(cluster: str, month: str) -> str:
    name = urllib.parse.quote(cluster, safe="") if cluster else NULL_CLUSTER
    return f"cluster={name}/month={month}"


# ---------------------------------------------------------------------------------- ingesting


@dataclass(frozen=True)
class LiveWindow:
    """A live `sacct` query to ingest: [since, until), one call per `chunk_hours`."""

    since: datetime
    until: datetime
    env: Mapping[str, str] | None = None
    chunk_hours: float = 24.0


def ingest(
    store: str | os.PathLike[str],
    files: Sequence[str | os.PathLike[str]] = (),
    *,
    live: LiveWindow | None = None,
    cluster: str = "",
    timezone: str = "UTC",
    usage_sums_gpus: bool = False,
    slurm_version: str | None = None,
    now: datetime | None = None,
) -> IngestSummary:
    """Add sacct dumps (or one live sacct window) to the store (created when missing);
    idempotent, crash-safe."""
    root = Path(store)
    manifest = read_manifest(root)  # (checks the path before anything is created)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{root}: cannot create the store: {exc.strerror or exc}") from None
    with _locked(root):
        manifest = read_manifest(root)
        _remove_unlisted(root, manifest)  # leftovers of a killed ingest
        stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        known = {(f["sha256"], f.get("cluster_option", "")) for f in manifest["files"]}
        parts = {(p["cluster"], p["month"]): p for p in manifest["partitions"]}
        changed: dict[tuple[str, str], list[Any]] = {}  # the new rows of each partition
        read, skipped, runs_read = [], [], 0
        options = load_mod.Options(
            timezone=timezone,
            cluster=cluster,
            usage_sums_gpus=usage_sums_gpus,
            keep_admin_comment=True,
        )
        inputs: list[tuple[str, str, int]] = [(os.fspath(f), *_sha256(os.fspath(f))) for f in files]
        if live is not None:
            inputs.append((_live_name(live), "", 0))  # (a live query is never skipped)
        for name, sha, size in inputs:
            if sha and (sha, cluster) in known:
                skipped.append(name)
                continue
            known.add((sha, cluster))
            seq = int(manifest["next_seq"])
            manifest["next_seq"] = seq + 1
            if sha:
                from slurmgpu.sources.sacct import json_dump_records

                loaded = load_mod.load_files(
                    [name], options=options, derive=False, json_reader=json_dump_records
                )
            else:
                loaded = _load_live(live, options, cluster)
            table = _to_table(loaded.frame, seq)
            runs_read += table.num_rows
            for key, rows in _split(table).items():
                changed.setdefault(key, []).append(rows)
            entry = _file_entry(name, sha, size, seq, stamp, loaded, options)
            manifest["files"].append({**entry, "slurm_version": slurm_version})
            read.append(name)
        written, superseded = _merge_partitions(root, changed, parts)
        manifest["runs_superseded"] = int(manifest["runs_superseded"]) + superseded
        manifest["partitions"] = [parts[k] for k in sorted(parts)]
        if read:
            manifest["columns"] = _columns_of(manifest.get("columns") or [], changed)
            _write_manifest(root, manifest)
        _remove_unlisted(root, manifest)
    return IngestSummary(
        store=os.fspath(root),
        files_read=tuple(read),
        files_skipped=tuple(skipped),
        runs_read=runs_read,
        runs_superseded=superseded,
        runs_stored=sum(int(p["rows"]) for p in manifest["partitions"]),
        partitions_written=tuple(written),
    )


MERGE_COLUMNS = ("job_id_raw", "job_id", "submit", "start", "end", SEQ)  # (+ sluid if stored)


def part_files(part: Mapping[str, Any]) -> list[str]:
    """A partition's files: its base file, then the deltas ingests appended."""
    return [part["path"], *(d["path"] for d in part.get("deltas", ()))]


def _merge_partitions(
    root: Path, changed: dict[tuple[str, str], list[Any]], parts: dict
) -> tuple[list[str], int]:
    """Merge each changed partition's new rows into the store under new file names (the
    manifest still names the old ones until it is swapped); `parts` updated. When no stored
    row is superseded (found from the key columns alone), only the new rows are written, as
    a delta file beside the stored ones (`store compact` merges them); else the partition is
    rewritten as one file. The paths written and the rows superseded."""
    import pyarrow as pa

    written, superseded = [], 0
    ingest_id = uuid.uuid4().hex[:12]
    pause = float(os.environ.get(SLEEP_ENV, "0") or 0)
    for (cl, month), tables in sorted(changed.items()):
        new = pa.concat_tables(tables, promote_options="permissive")
        part = parts.get((cl, month))
        delta = False
        if part is None:
            table, dropped = merge_runs(None, new)
        else:
            keys = [*MERGE_COLUMNS, "sluid"]
            old = _read_part(root, part, columns=keys)
            mine = new.select([c for c in keys if c in new.column_names])
            probe = pa.concat_tables([old, mine], promote_options="permissive")
            keep, sluids = kept_rows(probe)
            n_old = old.num_rows
            delta = int((keep < n_old).sum()) == n_old
            if delta:
                table = new.take(pa.array(keep[keep >= n_old] - n_old))
                if sluids is not None and "sluid" in table.column_names:
                    table = _with_sluids(table, sluids[keep >= n_old])
                dropped = probe.num_rows - len(keep)
            else:
                table, dropped = merge_runs(_read_part(root, part), new)
        superseded += dropped
        if delta and not table.num_rows:
            continue  # every new row already stored
        rel = f"{_folder(cl, month)}/part-{ingest_id}.parquet"
        _write_parquet(root / rel, table)
        if delta:
            deltas = [*part.get("deltas", ()), {"path": rel, "rows": table.num_rows}]
            parts[(cl, month)] = {**part, "rows": int(part["rows"]) + table.num_rows,
                                  "deltas": deltas}  # fmt: skip
        else:
            parts[(cl, month)] = {"cluster": cl, "month": month, "path": rel,
                                  "rows": table.num_rows}  # fmt: skip
        written.append(rel)
        if pause:
            time.sleep(pause)
    return written, superseded


def _live_name(live: LiveWindow) -> str:
    def stamp(t: datetime) -> str:
        return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    return f"sacct {stamp(live.since)}..{stamp(live.until)}"


def _load_live(live: LiveWindow, options: load_mod.Options, cluster: str) -> Any:
    """One live window read as the analysis reads it (`when.sacct_calls`, `load_windows`)."""
    from functools import partial

    from slurmgpu.accounting.when import sacct_calls
    from slurmgpu.sources import sacct

    if not live.until > live.since:
        raise StoreError(f"live window {_live_name(live)}: its end is not after its start")
    fetch = partial(sacct.sacct_text, env=live.env, clusters=[cluster] if cluster else ())
    return load_mod.load_windows(
        sacct_calls(live.since, live.until, live.chunk_hours)[0],
        fetch,
        name=_live_name(live),
        options=options,
        delimiter=sacct.DELIMITER,
        derive=False,
    )


def _columns_of(known: list[str], tables: dict[tuple[str, str], list[Any]]) -> list[str]:
    """The stored columns in the normalizer's order: the known ones, then any new one (a
    `sluid` once a `sacct --json` dump with SLUIDs is ingested)."""
    out = list(known) or ["cluster"]
    for group in tables.values():
        for t in group:
            out += [n for n in t.column_names if n != SEQ and n not in out]
    return out


def _file_entry(
    name: str, sha: str, size: int, seq: int, stamp: str, loaded: Any, options: Any
) -> dict[str, Any]:
    """What the manifest keeps of one ingested file: identity and the row ledger."""
    return {
        "path": name,
        "sha256": sha,
        "bytes": size,
        "seq": seq,
        "ingested_at": stamp,
        "cluster_option": options.cluster,
        "timezone": options.timezone,
        "usage_sums_gpus": options.usage_sums_gpus,
        "runs": len(loaded.frame),
        "clusters": sorted({str(c) for c in loaded.frame["cluster"].astype(str).unique()}),
        "rows_read": loaded.rows_read,
        "rows_rejected": loaded.rows_rejected,
        "step_rows": loaded.step_rows,
        "blank_lines": loaded.blank_lines,
        "rows_overlap": loaded.rows_overlap,
        "latin1_lines": loaded.latin1_lines,
        "usage_over_100": loaded.usage_over_100,
        "has_usage": loaded.has_usage,
        "rejected_reasons": dict(loaded.rejected_reasons),
        "rejected": [[r.file, r.line, r.reason] for r in loaded.rejected],
    }


def _to_table(frame: Any, seq: int) -> Any:
    """The normalizer's frame as a plain Arrow table (text undictionaried) + the ingest seq."""
    import pyarrow as pa

    table = pa.Table.from_pandas(frame, preserve_index=False)
    cols = []
    for col in table.columns:
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols.append(col)
    table = pa.table(dict(zip(table.column_names, cols, strict=True)))
    return table.append_column(SEQ, pa.array([seq] * table.num_rows, pa.int32()))


def _month(table: Any) -> Any:
    """YYYY-MM of each run's Submit (else Start, else End; "unknown" without any)."""
    import pyarrow.compute as pc

    t = pc.coalesce(table.column("submit"), table.column("start"), table.column("end"))
    return pc.fill_null(pc.strftime(t, format="%Y-%m"), "unknown")


def _split(table: Any) -> dict[tuple[str, str], Any]:
    """Rows by (cluster, month); the cluster column is the folder's."""
    import pyarrow.compute as pc

    months = _month(table)
    clusters = pc.fill_null(table.column("cluster"), "")
    out = {}
    keys = set(zip(clusters.to_pylist(), months.to_pylist(), strict=True))
    for cl, month in sorted(keys):
        mask = pc.and_(pc.equal(clusters, cl), pc.equal(months, month))
        out[(cl, month)] = table.filter(mask).drop_columns(["cluster"])
    return out


def merge_runs(old: Any, new: Any) -> tuple[Any, int]:
    """One partition's stored rows and new rows -> one row per run, and how many dropped.

    Per key (JobIDRaw, JobID, Submit, Start): an ended row beats a running one, else the
    later ingest wins. A row that never started (no Start, no End) goes when a row of another
    ingest has the same job (JobIDRaw, Submit) started: the job left the queue.
    """
    import pyarrow as pa

    table = new if old is None else pa.concat_tables([old, new], promote_options="permissive")
    keep, sluids = kept_rows(table)
    return _with_sluids(table.take(pa.array(keep)), sluids), table.num_rows - len(keep)


def _with_sluids(table: Any, sluids: Any) -> Any:
    """The kept rows with the SLUID their run has in any row (None: no SLUID stored)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if sluids is None:
        return table
    col = pa.array(sluids, pa.string())
    col = pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), col)
    return table.set_column(table.schema.get_field_index("sluid"), "sluid", col)


def kept_rows(table: Any) -> tuple[Any, Any]:
    """The rows `merge_runs` keeps (sorted positions), from the `MERGE_COLUMNS` alone, and
    their runs' SLUIDs ("" none; None without a sluid column)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    n = table.num_rows

    def ints(name: str) -> np.ndarray:
        col = table.column(name).cast(pa.int64())
        return col.fill_null(-(1 << 62)).to_numpy()

    start, end = table.column("start"), table.column("end")
    df = pd.DataFrame(
        {
            "raw": ints("job_id_raw"),
            "jid": table.column("job_id").fill_null("").to_numpy(zero_copy_only=False),
            "submit": ints("submit"),
            "start": ints("start"),
            "ended": end.is_valid().to_numpy(zero_copy_only=False),
            "started": start.is_valid().to_numpy(zero_copy_only=False),
            "seq": table.column(SEQ).to_numpy(),
            "row": np.arange(n),
        }
    )
    key = ["raw", "jid", "submit", "start"]
    if "sluid" in table.column_names:  # SLUIDs where present: a row without one is any run's
        sluid = table.column("sluid").fill_null("").to_numpy(zero_copy_only=False)
        df["sluid"] = pd.Series(sluid).where(sluid != "", None)
        df["sluid"] = df.groupby(key, dropna=False)["sluid"].transform("max").fillna("")
        df["sluid"] = np.where(sluid != "", sluid, df["sluid"])
        key.append("sluid")
    df = df.sort_values([*key, "ended", "seq"], kind="stable")
    df = df[~df.duplicated(key, keep="last")]
    waiting = df[~df["started"] & ~df["ended"]]
    if len(waiting):
        ran = df[df["started"]][["raw", "submit", "seq"]].drop_duplicates()
        pair = waiting.merge(ran, on=["raw", "submit"], suffixes=("", "_ran"))
        gone = pair.loc[pair["seq"] != pair["seq_ran"], "row"].unique()
        df = df[~df["row"].isin(gone)]
    df = df.sort_values("row")
    return df["row"].to_numpy(), df["sluid"].to_numpy() if "sluid" in df else None


def _read_part(
    root: Path, part: Mapping[str, Any], filters: Any = None, columns: list[str] | None = None
) -> Any:
    """A partition's rows: its files concatenated (`filters`, `columns`: pyarrow's)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for rel in part_files(part):
        path = root / rel
        try:
            cols = columns
            if columns is not None:  # (a file written before a column existed lacks it)
                names = set(pq.read_schema(path).names)
                cols = [c for c in columns if c in names]
            tables.append(pq.read_table(path, filters=filters, columns=cols))
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(f"{path}: cannot read a store partition: {exc}") from None
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def _write_parquet(path: Path, table: Any) -> None:
    """A new partition file: temp name, fsync, rename (no reader sees a partial file)."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StoreError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    from slurmgpu.errors import OutputError
    from slurmgpu.util.atomic import write_atomic

    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    try:
        write_atomic(root / MANIFEST, text, mode=0o644, backup=False)
    except OutputError as exc:
        raise StoreError(str(exc)) from None
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_unlisted(root: Path, manifest: dict[str, Any]) -> None:
    """Partition files no manifest lists: old versions and a killed ingest's leftovers."""
    listed = {root / f for p in manifest["partitions"] for f in part_files(p)}
    for path in root.glob("cluster=*/month=*/*"):
        if path.is_file() and path not in listed:
            path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ reading


def read_store(
    store: str | os.PathLike[str],
    *,
    options: load_mod.Options,
    clusters: Sequence[str] = (),
) -> load_mod.LoadResult:
    """The store's runs (of `clusters`, default all) as the normalizer's `LoadResult`: the
    frame of the text, derived with the analysis' `options`, and the ingested files' ledger."""
    root = Path(store)
    manifest, parts, files = store_parts(root, options, clusters)
    table = stored_table(root, parts)
    frame = frame_of(table, manifest, options)
    return ledger(frame, manifest, files)


def store_parts(
    root: Path, options: load_mod.Options, clusters: Sequence[str]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The manifest, the partitions of `clusters` (default all) and the files that gave rows
    to them; a store that is missing, empty or read with another usage reading is an error."""
    if not root.exists():
        raise StoreError(f"{root}: no such store (run slurmgpu ingest --store {root} first)")
    manifest = read_manifest(root)
    if not manifest["files"]:
        raise StoreError(f"{root}: the store is empty (nothing ingested yet)")
    sums = {bool(f.get("usage_sums_gpus")) for f in manifest["files"]}
    if sums != {options.usage_sums_gpus}:
        how = "sums over GPUs (Slurm 24.05+)" if True in sums else "one GPU's (Slurm < 24.05)"
        raise StoreError(
            f"{root}: the store's gres/gpuutil was read as {how} at ingest; give the same "
            "Slurm version to the analysis as to the ingest"
        )
    wanted = set(clusters)
    parts = [p for p in manifest["partitions"] if not wanted or p["cluster"] in wanted]
    if wanted and not parts:
        have = sorted({p["cluster"] for p in manifest["partitions"]})
        raise StoreError(f"{root}: no cluster {', '.join(sorted(wanted))} (it has {have})")
    if not parts:
        raise StoreError(f"{root}: no stored runs (every month pruned)")
    files = [f for f in manifest["files"] if not wanted or _has_cluster(f, wanted)]
    return manifest, parts, files


def stored_table(root: Path, parts: Sequence[dict[str, Any]], filters: Any = None) -> Any:
    """The partitions' rows as one Arrow table with the folder's cluster column (`filters`:
    a pyarrow expression rows must match)."""
    import pyarrow as pa

    tables = []
    for part in parts:
        t = _read_part(root, part, filters)
        tables.append(t.append_column("cluster", pa.repeat(pa.scalar(part["cluster"]), len(t))))
    return pa.concat_tables(tables, promote_options="permissive")


def frame_of(table: Any, manifest: dict[str, Any], options: load_mod.Options) -> Any:
    """Stored rows -> the normalizer's frame: back in the text's order (ingested file, then
    line), text columns dictionary-encoded as the normalizer's, derived with `options`."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    order = {f["path"]: i for i, f in enumerate(manifest["files"])}
    rank = pc.index_in(table.column("file"), value_set=pa.array(list(order), pa.string()))
    keys = pa.table({"s": table.column(SEQ), "r": rank, "l": table.column("line")})
    by = [("s", "ascending"), ("r", "ascending"), ("l", "ascending")]
    order = pc.sort_indices(keys, sort_keys=by).to_numpy().astype(np.int64)
    if len(order) > 1 and not (np.diff(order) > 0).all():  # (one ingest: already in order)
        table = table.take(pa.array(order))
    table = table.drop_columns([SEQ]).select(
        [c for c in manifest["columns"] if c in table.column_names]
    )
    if not options.keep_admin_comment and "admin_comment" in table.column_names:
        table = table.drop_columns(["admin_comment"])
    cols = []
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if name in (*normalize_mod.DICTIONARY_COLUMNS, "file"):
            col = pc.dictionary_encode(col)
        elif pa.types.is_timestamp(col.type):
            col = col.cast(pa.timestamp("s"))
        cols.append(col)
    table = pa.table(dict(zip(table.column_names, cols, strict=True)))
    return load_mod.derive_columns(table.to_pandas(types_mapper=pd.ArrowDtype), options)


def ledger(frame: Any, manifest: dict[str, Any], files: Sequence[dict[str, Any]]) -> Any:
    """A `LoadResult` of `frame` with the row ledger of the ingested `files`."""
    from collections import Counter

    result = load_mod.LoadResult(frame=frame, files=[f["path"] for f in files])
    reasons: Counter = Counter()
    for f in files:
        for name in ("rows_read", "rows_rejected", "step_rows", "blank_lines"):
            setattr(result, name, getattr(result, name) + int(f[name]))
        result.latin1_lines += int(f["latin1_lines"])
        result.usage_over_100 += int(f["usage_over_100"])
        result.has_usage |= bool(f["has_usage"])
        reasons.update(f["rejected_reasons"])
        result.rejected += [load_mod.Rejected(str(a), int(b), str(c)) for a, b, c in f["rejected"]]
    result.rejected_reasons = reasons
    result.rejected = sorted(result.rejected, key=lambda r: (r.file, r.line))[
        : normalize_mod.MAX_REJECTED_KEPT
    ]
    result.rows_analyzed = result.rows_read - result.rows_rejected
    # rows read twice: runs superseded by another ingest's row, live sub-window repeats
    result.rows_overlap = int(manifest["runs_superseded"])
    result.rows_overlap += sum(int(f.get("rows_overlap", 0)) for f in files)
    return result


def _has_cluster(entry: dict[str, Any], wanted: set[str]) -> bool:
    """Whether an ingested file gave rows to one of the clusters read (its ledger counts)."""
    return bool(set(entry.get("clusters", ())) & wanted)


def store_usage_sums(store: str | os.PathLike[str]) -> bool:
    """Whether the store's gres/gpuutil was read as a sum over GPUs (True when any file's
    was: `read_store` then says a mixed store is an error)."""
    root = Path(store)
    if not (root / MANIFEST).exists():
        return False  # (read_store says what is wrong)
    return any(bool(f.get("usage_sums_gpus")) for f in read_manifest(root)["files"])


def store_slurm_version(store: str | os.PathLike[str]) -> str | None:
    """The Slurm version the store's files were ingested with, when they all agree."""
    root = Path(store)
    if not root.is_dir():
        return None  # (read_store says what is wrong)
    versions = {f.get("slurm_version") for f in read_manifest(root)["files"]}
    return versions.pop() if len(versions) == 1 else None


def ingest_command(
    store: str | os.PathLike[str],
    files: Sequence[str],
    *,
    since: str | None,
    until: str | None,
    cluster: str = "",
    timezone: str = "UTC",
    slurm_version: str | None = None,
    chunk_hours: float = 24.0,
    env: Mapping[str, str] | None = None,
) -> IngestSummary:
    """`slurmgpu ingest`: dumps, or (with `since`) one live sacct window up to `until`/now,
    whose Slurm version is asked from Slurm unless given."""
    from slurmgpu.accounting.options import USAGE_SUMS_FROM, AnalysisOptions, parse_version
    from slurmgpu.accounting.when import parse_when
    from slurmgpu.errors import SlurmCommandError, UsageError

    AnalysisOptions(timezone=timezone).validated()  # (checks the time zone)
    if bool(files) == bool(since):
        raise UsageError("ingest: give --sacct-file FILE... or --since WHEN (one of them)")
    if until and not since:
        raise UsageError("ingest: --until is for a live query (with --since)")
    version = parse_version(slurm_version) if slurm_version else None
    live = None
    if since:
        now = datetime.now(UTC).replace(microsecond=0)
        t_until = parse_when(until, now=now, option="--until") if until else now
        t_since = parse_when(since, now=t_until, option="--since")
        if t_since >= t_until:
            raise UsageError(f"--since {since} is not before --until {until or 'now'}")
        live = LiveWindow(t_since, t_until, env=env, chunk_hours=chunk_hours)
        if version is None:
            from slurmgpu.sources.slurm import slurm_version as asked

            try:
                version = asked(env)[:2]
            except SlurmCommandError:
                version = None
    return ingest(
        store,
        files,
        live=live,
        cluster=cluster,
        timezone=timezone,
        usage_sums_gpus=version is not None and version >= USAGE_SUMS_FROM,
        slurm_version="{}.{:02d}".format(*version) if version else None,
    )
