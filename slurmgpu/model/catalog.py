"""What slurmgpu knows about GPU models: names, memory, MIG geometry (from a data file).

The facts live in `slurmgpu/data/gpus.toml` (sources in its header), not in Python: adding a
GPU is a data change. `slurmgpu submit` reads the catalogue on its start-up path (policy
slices, --gpu-mem), so run time reads `gpus.json`, the TOML compiled by `python -m
slurmgpu.model.catalog` (Python's TOML parser takes ~8 ms on this file, json ~0.3 ms), and
only on first use, not at import. Loading validates the file: a broken catalogue is a packaging
bug that must fail loudly (`CatalogError`) rather than plan an impossible MIG layout.

Memory per MIG profile is what a real MIG device reports (1g.10gb on A100-80GB shows
~9.5 GiB), not the nominal name. No I/O besides reading the packaged data file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, overload

from slurmgpu.errors import SlurmgpuError

# os.path, not pathlib: pathlib (with urllib.parse, ipaddress) is ~6 ms of submit's start-up
DATA_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gpus.toml"
)
# what run time reads: gpus.toml compiled to JSON by `python -m slurmgpu.model.catalog`
# (tests/unit/model/test_catalog.py fails when it is stale)
COMPILED_FILE = DATA_FILE.removesuffix(".toml") + ".json"
SCHEMA = 1

# MIG on A100/H100/H200/B200: 7 compute slices. Not every MIG GPU (A30 has 4): prefer
# `GpuModel.compute_slices` / `MigProfile.gpu_fraction`; kept for code that only has a type name.
COMPUTE_SLICES_PER_GPU = 7


class CatalogError(SlurmgpuError):
    """The packaged GPU catalogue (gpus.toml) is inconsistent; the message names model/key."""


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile, e.g. `1g.10gb` (1 of 7 compute slices, 1 of 8 memory slices).

    `placements` are the start slots on the GPU's memory-slice grid where NVML may create
    this profile, each `placement_size` (= `memory_slices`) slots wide (`nvidia-smi mig -lgipp`).
    """

    name: str
    gi_profile_enum: int
    gpu_slices: int
    memory_slices: int
    max_instances: int
    memory_mib: int
    placements: tuple[int, ...]
    placement_size: int
    compute_slices_of_gpu: int = COMPUTE_SLICES_PER_GPU
    memory_slices_of_gpu: int = 8
    nvidia_smi_id: int | None = None
    memory_estimated: bool = False

    @property
    def gpu_fraction(self) -> float:
        """Share of the GPU's compute this profile gets (3g on A100: 3/7; 2g on A30: 2/4)."""
        return self.gpu_slices / self.compute_slices_of_gpu

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: its names (NVML, Slurm types, site aliases), memory and MIG profiles."""

    key: str
    nvml_names: tuple[str, ...]
    pci_device_id: str
    memory_mib: int
    short_type: str
    autodetect_type: str
    mig_type_prefix: str
    mig_profiles: tuple[MigProfile, ...] = ()
    vendor: str = "nvidia"
    aliases: tuple[str, ...] = ()
    memory_source: str = ""
    compute_slices: int = 0  # MIG compute slices (0: no MIG)
    memory_slices: int = 0  # MIG memory slices (the placement grid)
    note: str = ""
    mig_source: str = ""
    fabric: str = ""  # nvlink / xgmi: GPUs on linked baseboards (SXM, OAM)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def all_names(self) -> tuple[str, ...]:
        """Every name this model answers to in `resolve` (key, NVML, Slurm types, aliases)."""
        autodetect = tuple(underscorify(n) for n in self.nvml_names)
        names = (self.key, *self.nvml_names, self.short_type, self.autodetect_type)
        return tuple(dict.fromkeys((*names, *autodetect, *self.aliases)))


def underscorify(name: str) -> str:
    """Slurm AutoDetect's type for an NVML name: lower case, whitespace to `_`."""
    return re.sub(r"\s+", "_", name.strip()).lower()


# -- loading ---------------------------------------------------------------------------------
def _int_list(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise CatalogError(f"{where}: expected a list of integers, got {value!r}")
    return tuple(value)


def _profile(raw: dict[str, Any], compute: int, memory: int, where: str) -> MigProfile:
    try:
        return MigProfile(
            name=raw["name"],
            gi_profile_enum=raw["gi_profile_enum"],
            gpu_slices=raw["gpu_slices"],
            memory_slices=raw["memory_slices"],
            max_instances=raw["max_instances"],
            memory_mib=raw["memory_mib"],
            placements=_int_list(raw["placements"], f"{where}.placements"),
            placement_size=raw["memory_slices"],
            compute_slices_of_gpu=compute,
            memory_slices_of_gpu=memory,
            nvidia_smi_id=raw.get("nvidia_smi_id"),
            memory_estimated=raw.get("memory_source") == "estimate",
        )
    except KeyError as exc:
        raise CatalogError(f"{where}: missing key {exc.args[0]!r}") from None


def _model(raw: dict[str, Any]) -> GpuModel:
    key = raw.get("key", "?")
    where = f"gpus.toml model {key!r}"
    try:
        names = tuple(raw["names"])
        mig = raw.get("mig") or {}
        compute, memory = mig.get("compute_slices", 0), mig.get("memory_slices", 0)
        profiles = tuple(
            _profile(p, compute, memory, f"{where} profile {p.get('name', i)!r}")
            for i, p in enumerate(mig.get("profiles", ()))
        )
        return GpuModel(
            key=raw["key"],
            nvml_names=names,
            pci_device_id=raw.get("pci_device_id", ""),
            memory_mib=raw["memory_mib"],
            short_type=raw["short_type"],
            # Slurm's nvml plugin: type = name lowered, spaces to "_"; the MIG type prefix is
            # that name cut at its first "-" (gpu_nvml.c), so A100-SXM4-40GB -> nvidia_a100
            autodetect_type=raw.get("autodetect_type") or underscorify(names[0]),
            mig_type_prefix=raw.get("mig_type_prefix") or underscorify(names[0].split("-")[0]),
            mig_profiles=profiles,
            vendor=raw.get("vendor", "nvidia"),
            aliases=tuple(raw.get("aliases", ())),
            memory_source=raw.get("memory_source", ""),
            compute_slices=compute,
            memory_slices=memory,
            note=raw.get("note", ""),
            mig_source=mig.get("source", ""),
            fabric=raw.get("fabric", ""),
        )
    except KeyError as exc:
        raise CatalogError(f"{where}: missing key {exc.args[0]!r}") from None


def validate(models: Sequence[GpuModel]) -> None:
    """Raise `CatalogError` unless every name is unique and every MIG profile can be placed."""
    seen: dict[str, str] = {}
    for model in models:
        for name in model.all_names:
            other = seen.setdefault(name.lower(), model.key)
            if other != model.key:
                raise CatalogError(f"gpus.toml: name {name!r} belongs to {other} and {model.key}")
        if model.memory_mib <= 0:
            raise CatalogError(f"gpus.toml model {model.key!r}: memory_mib must be positive")
        if model.mig_profiles and not (0 < model.compute_slices <= model.memory_slices):
            raise CatalogError(
                f"gpus.toml model {model.key!r}: MIG needs 0 < compute_slices <= memory_slices"
            )
        names = [p.name for p in model.mig_profiles]
        if len(set(names)) != len(names):
            raise CatalogError(f"gpus.toml model {model.key!r}: a MIG profile is listed twice")
        for p in model.mig_profiles:
            _validate_profile(model, p)


def _validate_profile(model: GpuModel, p: MigProfile) -> None:
    where = f"gpus.toml model {model.key!r} profile {p.name!r}"
    m = re.fullmatch(r"(\d+)g\.(\d+)gb(\+me)?", p.name)
    if not m or int(m.group(1)) != p.gpu_slices:
        raise CatalogError(f"{where}: the name must be <gpu_slices>g.<GB>gb[+me]")
    if not 0 < p.gpu_slices <= model.compute_slices:
        raise CatalogError(f"{where}: gpu_slices must be 1..{model.compute_slices}")
    if not 0 < p.memory_slices <= model.memory_slices:
        raise CatalogError(f"{where}: memory_slices must be 1..{model.memory_slices}")
    if not p.placements or len(set(p.placements)) != len(p.placements):
        raise CatalogError(f"{where}: placements must be distinct start slots")
    for start in p.placements:
        # a placement is aligned to its size and lies inside the memory-slice grid
        if start < 0 or start % p.placement_size or start + p.placement_size > model.memory_slices:
            raise CatalogError(
                f"{where}: placement {start} (size {p.placement_size}) does not fit the "
                f"{model.memory_slices}-slot grid"
            )
    if not 0 < p.max_instances <= len(p.placements):
        raise CatalogError(f"{where}: max_instances exceeds the number of placements")
    if p.max_instances * p.memory_slices > model.memory_slices:
        raise CatalogError(f"{where}: {p.max_instances} instances do not fit the memory slices")
    if p.max_instances * p.gpu_slices > model.compute_slices:
        raise CatalogError(f"{where}: {p.max_instances} instances exceed the compute slices")
    if not 0 < p.memory_mib <= model.memory_mib:
        raise CatalogError(f"{where}: memory_mib must be within the GPU's memory")


def read_data(path: str) -> dict[str, Any]:
    """The raw catalogue: TOML (the source people edit) or its compiled JSON twin."""
    import json

    try:
        if str(path).endswith(".json"):
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        import tomllib

        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, ValueError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise CatalogError(f"cannot read the GPU catalogue {path}: {exc}") from None


def load(path: str = COMPILED_FILE) -> tuple[GpuModel, ...]:
    """Parse and validate a catalogue file (the packaged, compiled one by default)."""
    data = read_data(path)
    if data.get("schema") != SCHEMA:
        raise CatalogError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA}")
    models = tuple(_model(raw) for raw in data.get("model", ()))
    validate(models)
    return models


def compile_json(source: str = DATA_FILE) -> str:
    """gpus.toml as the JSON `load` reads at run time (C-parsed: ~0.3 ms instead of ~8 ms)."""
    import json

    load(source)  # never compile a catalogue that does not validate
    return json.dumps(read_data(source), indent=0, sort_keys=True) + "\n"


@cache
def _models() -> tuple[GpuModel, ...]:
    return load()


@cache
def _by_name() -> dict[str, GpuModel]:
    return {name.lower(): m for m in _models() for name in m.all_names}


class _LazyModels(Sequence[GpuModel]):
    """`GPU_MODELS`: a read-only sequence that parses the data file on first use."""

    @overload
    def __getitem__(self, index: int) -> GpuModel: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[GpuModel]: ...
    def __getitem__(self, index):
        return _models()[index]

    def __len__(self) -> int:
        return len(_models())

    def __iter__(self) -> Iterator[GpuModel]:
        return iter(_models())

    def __repr__(self) -> str:
        return f"GPU_MODELS({len(self)} models from {os.path.basename(COMPILED_FILE)})"


GPU_MODELS: Sequence[GpuModel] = _LazyModels()


# -- lookups ---------------------------------------------------------------------------------
def resolve(name: str) -> GpuModel | None:
    """The model any name refers to, case-insensitively: NVML name ("Tesla T4"), Slurm type
    (`tesla_t4`, `nvidia_h100_80gb_hbm3`), site name (`t4`, `v100m32`) or catalogue key."""
    return _by_name().get(name.strip().lower())


def model_for_name(nvml_name: str) -> GpuModel | None:
    """The catalogue entry whose NVML name matches (exact, then case-insensitive)."""
    for model in _models():
        if nvml_name in model.nvml_names:
            return model
    lowered = nvml_name.strip().lower()
    return next((m for m in _models() if lowered in (n.lower() for n in m.nvml_names)), None)


def model_for_type(gres_type: str) -> GpuModel | None:
    """The catalogue entry for a Slurm GPU type (`a100`, `nvidia_h100_80gb_hbm3`, `t4`)."""
    for model in _models():
        if gres_type in (model.short_type, model.autodetect_type, model.key):
            return model
    return resolve(gres_type)


def profiles_named(profile_name: str) -> list[tuple[GpuModel, MigProfile]]:
    """Every (model, profile) offering a MIG profile name such as `1g.10gb`."""
    return [(m, p) for m in _models() for p in m.mig_profiles if p.name == profile_name]


_MIG_PROFILE_IN_TYPE = re.compile(r"(?:^|[_:-])(\d+g\.\d+gb(?:\+me)?)$")


def mig_compute_slices(gres_type: str) -> int:
    """Compute slices of the GPU a MIG GRES type (`1g.10gb`, `nvidia_a100_3g.20gb`,
    `a30_1g.6gb`) is carved from, so `Ng` is N / that of a GPU: 7 on A100/H100/H200/B200, 4 on
    A30. The type's prefix names the model where it can; else the profile's name where only
    one slice count offers it; else 7 (COMPUTE_SLICES_PER_GPU)."""
    m = _MIG_PROFILE_IN_TYPE.search(gres_type.strip().lower())
    if m is None:
        return COMPUTE_SLICES_PER_GPU
    profile = m.group(1)
    prefix = gres_type.strip().lower()[: m.start(1)].rstrip("_:-")
    if prefix:
        model = resolve(prefix) or next(
            (x for x in _models() if x.mig_type_prefix.lower() == prefix), None
        )
        if model is not None and model.compute_slices:
            return model.compute_slices
    counts = {x.compute_slices for x, _ in profiles_named(profile) if x.compute_slices}
    return counts.pop() if len(counts) == 1 else COMPUTE_SLICES_PER_GPU


if __name__ == "__main__":  # python -m slurmgpu.model.catalog: recompile gpus.json
    with open(COMPILED_FILE, "w", encoding="utf-8") as out:
        out.write(compile_json())
    print(f"wrote {COMPILED_FILE} ({len(_models())} models)")
