"""What slurmgpu knows about GPU models: names, memory, MIG profiles (a static catalogue).

Facts from NVIDIA's MIG User Guide (profile tables, placements on the 8-memory-slice grid) and
real `nvidia-smi mig -lgip/-lgipp` transcripts; NVML GPU-instance profile enum values from
nvml.h. Memory per profile is what a real MIG device reports (e.g. 1g.10gb on A100-80GB shows
~9.5 GiB), not the nominal name. Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# MIG divides compute into 7 GPU slices (A100/H100/H200 and successors): a `3g` profile is 3/7.
COMPUTE_SLICES_PER_GPU = 7


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile, e.g. `1g.10gb` (1 of 7 compute slices, 1 of 8 memory slices)."""

    name: str
    gi_profile_enum: int
    gpu_slices: int
    memory_slices: int
    max_instances: int
    memory_mib: int
    placements: tuple[int, ...]
    placement_size: int

    @property
    def gpu_fraction(self) -> float:
        """Share of the GPU's compute this profile gets (gpu_slices / 7)."""
        return self.gpu_slices / COMPUTE_SLICES_PER_GPU

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True)
class GpuModel:
    """One GPU model: its NVML names, memory, Slurm GRES type names and MIG profiles."""

    key: str
    nvml_names: tuple[str, ...]
    pci_device_id: str
    memory_mib: int
    short_type: str
    autodetect_type: str
    mig_type_prefix: str
    mig_profiles: tuple[MigProfile, ...] = ()

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    @property
    def supports_mig(self) -> bool:
        return bool(self.mig_profiles)


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        key="a100-sxm4-40gb",
        nvml_names=("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        pci_device_id="0x20b010de",
        memory_mib=40960,
        short_type="a100",
        autodetect_type="nvidia_a100-sxm4-40gb",
        mig_type_prefix="nvidia_a100",
        mig_profiles=(
            MigProfile(
                "1g.5gb",
                gi_profile_enum=0,
                gpu_slices=1,
                memory_slices=1,
                max_instances=7,
                memory_mib=4864,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.5gb+me",
                gi_profile_enum=7,
                gpu_slices=1,
                memory_slices=1,
                max_instances=1,
                memory_mib=4864,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.10gb",
                gi_profile_enum=9,
                gpu_slices=1,
                memory_slices=2,
                max_instances=4,
                memory_mib=9851,
                placements=(0, 2, 4, 6),
                placement_size=2,
            ),
            MigProfile(
                "2g.10gb",
                gi_profile_enum=1,
                gpu_slices=2,
                memory_slices=2,
                max_instances=3,
                memory_mib=9851,
                placements=(0, 2, 4),
                placement_size=2,
            ),
            MigProfile(
                "3g.20gb",
                gi_profile_enum=2,
                gpu_slices=3,
                memory_slices=4,
                max_instances=2,
                memory_mib=19968,
                placements=(0, 4),
                placement_size=4,
            ),
            MigProfile(
                "4g.20gb",
                gi_profile_enum=3,
                gpu_slices=4,
                memory_slices=4,
                max_instances=1,
                memory_mib=19968,
                placements=(0,),
                placement_size=4,
            ),
            MigProfile(
                "7g.40gb",
                gi_profile_enum=4,
                gpu_slices=7,
                memory_slices=8,
                max_instances=1,
                memory_mib=40192,
                placements=(0,),
                placement_size=8,
            ),
        ),
    ),
    GpuModel(
        key="a100-sxm4-80gb",
        nvml_names=("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        pci_device_id="0x20b210de",
        memory_mib=81920,
        short_type="a100_80gb",
        autodetect_type="nvidia_a100-sxm4-80gb",
        mig_type_prefix="nvidia_a100",
        mig_profiles=(
            MigProfile(
                "1g.10gb",
                gi_profile_enum=0,
                gpu_slices=1,
                memory_slices=1,
                max_instances=7,
                memory_mib=9728,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.10gb+me",
                gi_profile_enum=7,
                gpu_slices=1,
                memory_slices=1,
                max_instances=1,
                memory_mib=9728,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.20gb",
                gi_profile_enum=9,
                gpu_slices=1,
                memory_slices=2,
                max_instances=4,
                memory_mib=19968,
                placements=(0, 2, 4, 6),
                placement_size=2,
            ),
            MigProfile(
                "2g.20gb",
                gi_profile_enum=1,
                gpu_slices=2,
                memory_slices=2,
                max_instances=3,
                memory_mib=19968,
                placements=(0, 2, 4),
                placement_size=2,
            ),
            MigProfile(
                "3g.40gb",
                gi_profile_enum=2,
                gpu_slices=3,
                memory_slices=4,
                max_instances=2,
                memory_mib=40192,
                placements=(0, 4),
                placement_size=4,
            ),
            MigProfile(
                "4g.40gb",
                gi_profile_enum=3,
                gpu_slices=4,
                memory_slices=4,
                max_instances=1,
                memory_mib=40192,
                placements=(0,),
                placement_size=4,
            ),
            MigProfile(
                "7g.80gb",
                gi_profile_enum=4,
                gpu_slices=7,
                memory_slices=8,
                max_instances=1,
                memory_mib=80640,
                placements=(0,),
                placement_size=8,
            ),
        ),
    ),
    GpuModel(
        key="h100-sxm5-80gb",
        nvml_names=("NVIDIA H100 80GB HBM3",),
        pci_device_id="0x233010de",
        memory_mib=81559,
        short_type="h100",
        autodetect_type="nvidia_h100_80gb_hbm3",
        mig_type_prefix="nvidia_h100_80gb_hbm3",
        mig_profiles=(
            MigProfile(
                "1g.10gb",
                gi_profile_enum=0,
                gpu_slices=1,
                memory_slices=1,
                max_instances=7,
                memory_mib=9984,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.10gb+me",
                gi_profile_enum=7,
                gpu_slices=1,
                memory_slices=1,
                max_instances=1,
                memory_mib=9984,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.20gb",
                gi_profile_enum=9,
                gpu_slices=1,
                memory_slices=2,
                max_instances=4,
                memory_mib=20091,
                placements=(0, 2, 4, 6),
                placement_size=2,
            ),
            MigProfile(
                "2g.20gb",
                gi_profile_enum=1,
                gpu_slices=2,
                memory_slices=2,
                max_instances=3,
                memory_mib=20091,
                placements=(0, 2, 4),
                placement_size=2,
            ),
            MigProfile(
                "3g.40gb",
                gi_profile_enum=2,
                gpu_slices=3,
                memory_slices=4,
                max_instances=2,
                memory_mib=40448,
                placements=(0, 4),
                placement_size=4,
            ),
            MigProfile(
                "4g.40gb",
                gi_profile_enum=3,
                gpu_slices=4,
                memory_slices=4,
                max_instances=1,
                memory_mib=40448,
                placements=(0,),
                placement_size=4,
            ),
            MigProfile(
                "7g.80gb",
                gi_profile_enum=4,
                gpu_slices=7,
                memory_slices=8,
                max_instances=1,
                memory_mib=81152,
                placements=(0,),
                placement_size=8,
            ),
        ),
    ),
    GpuModel(
        key="h200-sxm5-141gb",
        nvml_names=("NVIDIA H200", "NVIDIA H200 141GB HBM3e"),
        pci_device_id="0x233510de",
        memory_mib=144384,
        short_type="h200",
        autodetect_type="nvidia_h200",
        mig_type_prefix="nvidia_h200",
        mig_profiles=(
            MigProfile(
                "1g.18gb",
                gi_profile_enum=0,
                gpu_slices=1,
                memory_slices=1,
                max_instances=7,
                memory_mib=16384,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.18gb+me",
                gi_profile_enum=7,
                gpu_slices=1,
                memory_slices=1,
                max_instances=1,
                memory_mib=16384,
                placements=(0, 1, 2, 3, 4, 5, 6),
                placement_size=1,
            ),
            MigProfile(
                "1g.35gb",
                gi_profile_enum=9,
                gpu_slices=1,
                memory_slices=2,
                max_instances=4,
                memory_mib=33024,
                placements=(0, 2, 4, 6),
                placement_size=2,
            ),
            MigProfile(
                "2g.35gb",
                gi_profile_enum=1,
                gpu_slices=2,
                memory_slices=2,
                max_instances=3,
                memory_mib=33024,
                placements=(0, 2, 4),
                placement_size=2,
            ),
            MigProfile(
                "3g.71gb",
                gi_profile_enum=2,
                gpu_slices=3,
                memory_slices=4,
                max_instances=2,
                memory_mib=71168,
                placements=(0, 4),
                placement_size=4,
            ),
            MigProfile(
                "4g.71gb",
                gi_profile_enum=3,
                gpu_slices=4,
                memory_slices=4,
                max_instances=1,
                memory_mib=71168,
                placements=(0,),
                placement_size=4,
            ),
            MigProfile(
                "7g.141gb",
                gi_profile_enum=4,
                gpu_slices=7,
                memory_slices=8,
                max_instances=1,
                memory_mib=144384,
                placements=(0,),
                placement_size=8,
            ),
        ),
    ),
    GpuModel(
        key="rtx4090",
        nvml_names=("NVIDIA GeForce RTX 4090",),
        pci_device_id="0x268410de",
        memory_mib=24564,
        short_type="rtx4090",
        autodetect_type="nvidia_geforce_rtx_4090",
        mig_type_prefix="nvidia_geforce_rtx_4090",
    ),
)


def model_for_name(nvml_name: str) -> GpuModel | None:
    """The catalogue entry whose NVML name matches (exact, then case-insensitive)."""
    for model in GPU_MODELS:
        if nvml_name in model.nvml_names:
            return model
    lowered = nvml_name.strip().lower()
    for model in GPU_MODELS:
        if lowered in (n.lower() for n in model.nvml_names):
            return model
    return None


def model_for_type(gres_type: str) -> GpuModel | None:
    """The catalogue entry for a Slurm GPU type (`a100`, `nvidia_h100_80gb_hbm3`)."""
    for model in GPU_MODELS:
        if gres_type in (model.short_type, model.autodetect_type, model.key):
            return model
    return None


def profiles_named(profile_name: str) -> list[tuple[GpuModel, MigProfile]]:
    """Every (model, profile) offering a MIG profile name such as `1g.10gb`."""
    return [(m, p) for m in GPU_MODELS for p in m.mig_profiles if p.name == profile_name]


def resolve(name):  # shim until the catalogue data file (catalog-mig branch) lands
    """Any name of a GPU model (GRES type, AutoDetect type, NVML name) -> its entry or None."""
    return model_for_type(name) or model_for_type(name.lower()) or model_for_name(name)
