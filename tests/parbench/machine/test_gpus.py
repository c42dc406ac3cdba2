"""The GPU table: the names the GPU runs recorded find their entries, the MFU peaks the committed
GPU records carry are the table's, and every entry names where its figures were read."""

import json
from pathlib import Path

import pytest

from parbench.machine.gpus import GPUS, gpu_named
from parbench.measure import peak_tflops

RESULTS = Path(__file__).resolve().parents[3] / "results"
GPU_RUNS = sorted(RESULTS.glob("*gpu-reference*"))


def _recorded_names() -> set[str]:
    names = set()
    for path in RESULTS.glob("*gpu-reference*/**/env.json"):
        names.update(json.loads(path.read_text())["gpu_names"].split(", "))
    return names


def test_the_gpu_runs_device_names_find_their_entries():
    assert GPU_RUNS, "no GPU run under results/"
    labels = {name: gpu_named(name).label for name in _recorded_names()}  # type: ignore[union-attr]
    assert labels == {"NVIDIA H200": "H200 SXM 141 GB",
                      "NVIDIA H100 80GB HBM3": "H100 SXM5 80 GB"}
    a10, a100 = gpu_named("NVIDIA A10"), gpu_named("NVIDIA A100-SXM4-80GB")
    assert a10 is not None and a10.label == "A10 24 GB"  # not the A100's, whose name it begins
    assert a100 is not None and a100.memory_bandwidth_gbs == 2039.0
    assert gpu_named("Tesla T4") is None and gpu_named(None) is None


def test_the_committed_gpu_records_mfu_peaks_are_the_tables():
    checked = 0
    for path in RESULTS.glob("*gpu-reference*/**/records.json"):
        for record in json.loads(path.read_text()):
            if record.get("peak_tflops") and record.get("gpu_names"):
                assert peak_tflops(record["gpu_names"], record["precision"]) \
                    == record["peak_tflops"], path
                checked += 1
    assert checked >= 50


@pytest.mark.parametrize("gpu", GPUS, ids=lambda gpu: gpu.label)
def test_every_entry_is_dense_sourced_and_named_once(gpu):
    assert gpu.sources and all(source.url.startswith("https://") for source in gpu.sources)
    assert gpu.note
    others = {name for other in GPUS if other is not gpu for name in other.names}
    assert not others & set(gpu.names)
    # Dense tensor figures are at least the CUDA cores' and 16-bit twice TF32's, where both exist.
    assert all(peak is None or peak >= gpu.fp32_tflops
               for peak in (gpu.tf32_tflops, gpu.bf16_tflops, gpu.fp16_tflops))
    if gpu.tf32_tflops and gpu.bf16_tflops:
        assert gpu.bf16_tflops == pytest.approx(2 * gpu.tf32_tflops, rel=0.01)


def test_the_table_in_the_docs_is_the_tables():
    doc = (RESULTS.parent / "docs" / "prediction.md").read_text()
    rows = {cells[0]: cells for line in doc.splitlines() if line.startswith("| ")
            for cells in [[cell.strip() for cell in line.strip("|").split("|")]]}
    for gpu in GPUS:
        cells = rows[gpu.label]
        figures = [gpu.fp32_tflops, gpu.tf32_tflops, gpu.bf16_tflops, gpu.fp16_tflops,
                   gpu.memory_bandwidth_gbs, gpu.memory_gb, gpu.sm_count]
        assert cells[1] == gpu.names[0]
        assert [None if cell == "-" else float(cell.replace(",", "")) for cell in cells[2:9]] \
            == figures, gpu.label
