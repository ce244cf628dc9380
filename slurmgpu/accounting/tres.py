"""TRES strings (`billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1`), parsed vectorized.

A whole column is split once with pyarrow compute into a long table of (row, key, value); the
keys that matter are then folded back per row with numpy. No Python loop runs per row.

Rules (see docs/accounting.md and the Slurm TRES docs, `tres.shtml`):

- `gres/gpu=N` (generic) is Slurm's GPU count. A typed entry (`gres/gpu:a100=2`) only appears
  when listed in AccountingStorageTRES and normally sits next to the generic one: the generic
  count wins; typed counts are summed only when the generic entry is absent.
- A typed entry whose type ends in a MIG profile (`1g.10gb`, `nvidia_a100_3g.40gb`) is a slice:
  Slurm counts it as one GPU, slurmgpu counts `gpu_slices / 7` of a physical GPU (`/ 4` on A30).
- `gres/shard=N` is an access token, not a GPU; its GPU share needs the node's shards per GPU
  and is resolved later (`shards` is returned as is).
- `gres/npu=N` (Ascend NPUs, a GRES without a plugin) is counted apart (`npu_count`, the
  first typed `gres/npu:910b` in `npu_type`), never as GPUs; typed AMD GPUs
  (`gres/gpu:mi300x`) are GPUs like any typed entry; an MI300 partition type
  (`gres/gpu:mi300x_cpx=1`) is Slurm's one GPU and slurmgpu's 1/8 (CPX; DPX 1/2, QPX 1/4).
- `gres/gpumem` and `gres/gpuutil` share the `gres/gpu` prefix: keys are compared exactly, so
  they never count as GPUs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slurmgpu.accounting.fields import fill_struct
from slurmgpu.model.catalog import COMPUTE_SLICES_PER_GPU, mig_compute_slices

_ITEM = r"^(?P<key>[A-Za-z][A-Za-z0-9_./:+-]*)=(?P<val>.*)$"
_COUNT = r"^\d+$"
_SIZE = r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMGTPE]?)$"
# A MIG profile at the end of a GRES type: `1g.10gb`, `3g.40gb`, `1g.10gb+me`, `a100_1g.10gb`.
MIG_TYPE = r"(?:^|[_:-])(?P<slices>[1-7])g\.(?P<mem>\d+)gb(?:\+me)?$"
# An AMD compute partition at the end of a GRES type (`mi300x_cpx`): N logical GPUs per package
PARTITION_TYPE = r"_(?P<mode>dpx|tpx|qpx|cpx)$"
_PARTITIONS_PER_PACKAGE = {"dpx": 2, "tpx": 3, "qpx": 4, "cpx": 8}
_MIB_PER_UNIT = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}
# keys whose value must be a plain count; anything else under these keys rejects the row
_COUNT_KEYS = ("billing", "cpu", "node", "gres/gpu", "gres/shard", "gres/npu")


@dataclass
class AllocTres:
    """Per-row result of `parse_alloc_tres` (numpy arrays of the column's length)."""

    gpu_count: np.ndarray  # Slurm's GPU count (MIG slices count 1 each); NaN when no GPU TRES
    gpu_equiv: np.ndarray  # physical-GPU equivalents: MIG slices as fractions; shards excluded
    mig_slices: np.ndarray  # number of MIG-slice GPUs in the row (0 when none)
    shards: np.ndarray  # gres/shard count (NaN when absent)
    billing: np.ndarray
    cpus: np.ndarray
    nodes: np.ndarray
    mem_mib: np.ndarray
    gpu_type: np.ndarray  # object array: first non-MIG typed GPU name, or None
    mig_profile: np.ndarray  # object array: MIG profile name (`1g.10gb`), or None
    errors: dict[int, str]  # row -> reason for rows with an unparsable element
    npu_count: np.ndarray = None  # gres/npu count (NaN when absent)
    npu_type: np.ndarray = None  # object array: first typed NPU name (`910b`), or None


@dataclass
class UsageTres:
    """Per-row `gres/gpuutil` (percent) and `gres/gpumem` (MiB) from TRESUsageIn*; NaN = absent."""

    gpu_util_pct: np.ndarray
    gpu_mem_mib: np.ndarray
    errors: dict[int, str]


def _long_table(values: pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array, np.ndarray, int]:
    """Split a TRES column into (parent row, key, value, bad-element mask, n)."""
    n = len(values)
    arr = pc.fill_null(values.cast(pa.string()), "")
    lists = pc.split_pattern(arr, ",")
    parents = pc.list_parent_indices(lists).to_numpy()
    items = pc.utf8_trim_whitespace(pc.list_flatten(lists))
    nonempty = pc.not_equal(items, "").to_numpy(zero_copy_only=False)
    parents = parents[nonempty]
    items = items.filter(pa.array(nonempty))
    kv = pc.extract_regex(items, _ITEM)
    bad = kv.is_null().to_numpy(zero_copy_only=False)
    kv = fill_struct(kv, {"key": "", "val": ""})
    keys = pc.struct_field(kv, "key")
    vals = pc.struct_field(kv, "val")
    return parents, keys, vals, bad, n


def _first_error(errors: dict[int, str], rows: np.ndarray, texts: list[str], what: str) -> None:
    for row, text in zip(rows.tolist(), texts, strict=True):
        errors.setdefault(row, f"bad {what} element {text!r}")


def _sizes_mib(vals: pa.Array, bare_unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Memory sizes -> MiB; `bare_unit` is the unit of a number without one ("B" = bytes)."""
    m = pc.extract_regex(vals, _SIZE)
    ok = m.is_valid().to_numpy(zero_copy_only=False)
    m = fill_struct(m, {"num": "0", "unit": ""})
    num = pc.cast(pc.struct_field(m, "num"), pa.float64()).to_numpy(zero_copy_only=False)
    unit = pc.struct_field(m, "unit").to_numpy(zero_copy_only=False)
    factor = np.ones(len(num))
    for u, f in _MIB_PER_UNIT.items():
        factor[unit == u] = f
    factor[unit == ""] = 1 / (1024 * 1024) if bare_unit == "B" else _MIB_PER_UNIT[bare_unit]
    return num * factor, ok


def parse_alloc_tres(values: pa.Array) -> AllocTres:
    """Parse an AllocTRES/ReqTRES column (pyarrow string array; null/"" = no TRES).

    A site has few distinct AllocTRES strings (CPU, memory and GPU counts repeat), so each
    distinct string is parsed once and the results are spread to the rows by index.
    """
    enc = pc.dictionary_encode(pc.fill_null(values.cast(pa.string()), ""))
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    if 2 * len(enc.dictionary) > len(values):
        return _parse_alloc_tres(values)
    idx = enc.indices.to_numpy(zero_copy_only=False)
    uniq = _parse_alloc_tres(enc.dictionary)
    errors: dict[int, str] = {}
    for u, reason in uniq.errors.items():
        for row in np.flatnonzero(idx == u).tolist():
            errors[row] = reason
    return AllocTres(
        **{
            f.name: getattr(uniq, f.name)[idx]
            for f in dataclasses.fields(AllocTres)
            if f.name != "errors"
        },
        errors=errors,
    )


def _parse_alloc_tres(values: pa.Array) -> AllocTres:
    """AllocTRES strings -> per-row GPU counts, MIG slices, shards, types, CPUs, memory.

    Why it is long: one vectorized pass over the long (row, key, value) table; every block
    reads the same per-entry arrays (`parents`, `keys_np`, `is_count`, `count`) and fills one
    field of the result, so split functions would pass those arrays around unchanged and the
    rules for one key would be apart from the arrays they read.
    """
    parents, keys, vals, bad, n = _long_table(values)
    errors: dict[int, str] = {}
    if bad.any():
        texts = pc.list_flatten(pc.split_pattern(pc.fill_null(values, ""), ","))
        texts = pc.utf8_trim_whitespace(texts)
        texts = texts.filter(pc.not_equal(texts, ""))
        idx = np.flatnonzero(bad)
        _first_error(errors, parents[idx], texts.take(pa.array(idx)).to_pylist(), "TRES")
    keys_np = keys.to_numpy(zero_copy_only=False)
    is_count = pc.match_substring_regex(vals, _COUNT).to_numpy(zero_copy_only=False)
    count = np.zeros(len(keys_np))
    count[is_count] = pc.cast(vals.filter(pa.array(is_count)), pa.float64()).to_numpy()

    typed_gpu = pc.starts_with(keys, "gres/gpu:").to_numpy(zero_copy_only=False)
    typed_shard = pc.starts_with(keys, "gres/shard:").to_numpy(zero_copy_only=False)
    typed_npu = pc.starts_with(keys, "gres/npu:").to_numpy(zero_copy_only=False)
    needs_count = np.isin(keys_np, _COUNT_KEYS) | typed_gpu | typed_shard | typed_npu
    bad_count = needs_count & ~is_count
    if bad_count.any():
        idx = np.flatnonzero(bad_count)
        texts = [
            f"{k}={v}"
            for k, v in zip(keys_np[idx], vals.take(pa.array(idx)).to_pylist(), strict=True)
        ]
        _first_error(errors, parents[idx], texts, "TRES")

    def per_row(mask: np.ndarray, reduce: str = "set") -> np.ndarray:
        out = np.full(n, np.nan)
        sel = mask & is_count
        if reduce == "sum":
            present = np.bincount(parents[sel], minlength=n) > 0
            sums = np.bincount(parents[sel], weights=count[sel], minlength=n)
            out[present] = sums[present]
        else:
            out[parents[sel]] = count[sel]
        return out

    generic = per_row(keys_np == "gres/gpu")
    gpu_types = pc.utf8_slice_codeunits(keys, 9).to_numpy(zero_copy_only=False)
    mig = pc.extract_regex(pa.array(gpu_types, pa.string()), MIG_TYPE)
    is_mig = typed_gpu & mig.is_valid().to_numpy(zero_copy_only=False)
    slices = np.zeros(len(keys_np))
    if is_mig.any():
        mig_f = fill_struct(mig, {"slices": "0", "mem": "0"})
        slices = pc.cast(pc.struct_field(mig_f, "slices"), pa.float64()).to_numpy()
    typed_plain = typed_gpu & ~is_mig
    typed_sum = per_row(typed_gpu, "sum")
    mig_count = np.nan_to_num(per_row(is_mig, "sum"))
    sel = is_mig & is_count
    # `Ng` is N of the GPU's compute slices: 7 on A100/H100, 4 on A30 (one look-up per type)
    per_gpu = np.full(len(keys_np), float(COMPUTE_SLICES_PER_GPU))
    for name in set(gpu_types[sel].tolist()):
        per_gpu[sel & (gpu_types == name)] = mig_compute_slices(name)
    mig_equiv = np.bincount(
        parents[sel], weights=count[sel] * slices[sel] / per_gpu[sel], minlength=n
    )
    gpu_count = np.where(np.isnan(generic), typed_sum, generic)
    # an AMD MI300 partition (`mi300x_cpx`: 1 of 8 logical GPUs) is 1/N of its package
    part = pc.extract_regex(pa.array(gpu_types, pa.string()), PARTITION_TYPE)
    is_part = typed_gpu & ~is_mig & part.is_valid().to_numpy(zero_copy_only=False)
    part_count = np.nan_to_num(per_row(is_part, "sum"))
    per_package = np.ones(len(keys_np))
    if is_part.any():
        modes = pc.struct_field(fill_struct(part, {"mode": "spx"}), "mode")
        modes = modes.to_numpy(zero_copy_only=False)
        for mode, n_parts in _PARTITIONS_PER_PACKAGE.items():
            per_package[is_part & (modes == mode)] = n_parts
    sel_part = is_part & is_count
    part_equiv = np.bincount(
        parents[sel_part], weights=count[sel_part] / per_package[sel_part], minlength=n
    )
    # Slurm counts each MIG slice (and AMD partition) as one GPU; the rest are whole GPUs.
    whole = np.maximum(gpu_count - mig_count - part_count, 0.0)
    whole = np.where(np.isnan(gpu_count), np.nan, whole)
    gpu_equiv = np.where(np.isnan(gpu_count), np.nan, whole + mig_equiv + part_equiv)

    gpu_type = np.full(n, None, dtype=object)
    idx = np.flatnonzero(typed_plain)[::-1]  # reversed so the first typed entry wins
    gpu_type[parents[idx]] = gpu_types[idx]
    mig_profile = np.full(n, None, dtype=object)
    idx = np.flatnonzero(is_mig)[::-1]
    if len(idx):
        names = pc.extract_regex(pa.array(gpu_types[idx]), r"(?P<p>[1-7]g\.\d+gb(?:\+me)?)$").field(
            "p"
        )
        mig_profile[parents[idx]] = names.to_numpy(zero_copy_only=False)

    shards = np.where(
        np.isnan(per_row(keys_np == "gres/shard")),
        per_row(typed_shard, "sum"),
        per_row(keys_np == "gres/shard"),
    )
    npu_generic = per_row(keys_np == "gres/npu")
    npu_count = np.where(np.isnan(npu_generic), per_row(typed_npu, "sum"), npu_generic)
    npu_type = np.full(n, None, dtype=object)
    idx = np.flatnonzero(typed_npu)[::-1]
    npu_type[parents[idx]] = pc.utf8_slice_codeunits(keys, 9).to_numpy(zero_copy_only=False)[idx]
    mem_mib = np.full(n, np.nan)
    is_mem = keys_np == "mem"
    if is_mem.any():
        mib, ok = _sizes_mib(vals.filter(pa.array(is_mem)), "M")
        rows = parents[is_mem]
        mem_mib[rows[ok]] = mib[ok]
        if (~ok).any():
            texts = [f"mem={v}" for v in vals.filter(pa.array(is_mem)).to_pylist()]
            bad_rows = rows[~ok]
            _first_error(
                errors, bad_rows, [t for t, o in zip(texts, ok, strict=True) if not o], "TRES"
            )
    return AllocTres(
        gpu_count=gpu_count,
        gpu_equiv=gpu_equiv,
        mig_slices=mig_count,
        shards=shards,
        billing=per_row(keys_np == "billing"),
        cpus=per_row(keys_np == "cpu"),
        nodes=per_row(keys_np == "node"),
        mem_mib=mem_mib,
        gpu_type=gpu_type,
        mig_profile=mig_profile,
        errors=errors,
        npu_count=npu_count,
        npu_type=npu_type,
    )


def parse_usage_tres(values: pa.Array, *, bare_mem_unit: str = "B") -> UsageTres:
    """Parse a TRESUsageIn{Ave,Max,Tot} column for `gres/gpuutil` and `gres/gpumem`.

    Only those two keys are read (others such as `cpu=00:56:24` are left alone). Absent keys
    give NaN, never 0. sacct prints gpumem as `38888M`, or in bytes with `--noconvert`: a bare
    number is taken in `bare_mem_unit` (bytes by default).
    """
    parents, keys, vals, _bad, n = _long_table(values)
    errors: dict[int, str] = {}
    keys_np = keys.to_numpy(zero_copy_only=False)
    util = np.full(n, np.nan)
    is_util = keys_np == "gres/gpuutil"
    if is_util.any():
        uv = vals.filter(pa.array(is_util))
        ok = pc.match_substring_regex(uv, r"^\d+(?:\.\d+)?$").to_numpy(zero_copy_only=False)
        rows = parents[is_util]
        util[rows[ok]] = pc.cast(uv.filter(pa.array(ok)), pa.float64()).to_numpy()
        texts = uv.filter(pa.array(~ok)).to_pylist()
        _first_error(errors, rows[~ok], [f"gres/gpuutil={t}" for t in texts], "TRESUsage")
    mem = np.full(n, np.nan)
    is_mem = keys_np == "gres/gpumem"
    if is_mem.any():
        mv = vals.filter(pa.array(is_mem))
        mib, ok = _sizes_mib(mv, bare_mem_unit)
        rows = parents[is_mem]
        mem[rows[ok]] = mib[ok]
        texts = mv.filter(pa.array(~ok)).to_pylist()
        _first_error(errors, rows[~ok], [f"gres/gpumem={t}" for t in texts], "TRESUsage")
    return UsageTres(gpu_util_pct=util, gpu_mem_mib=mem, errors=errors)
