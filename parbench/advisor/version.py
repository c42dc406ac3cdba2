"""The timing models' version, stamped on every prediction: a held-out run is judged only by the
version that was committed before it was measured."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

__all__ = ["FINGERPRINT", "MODEL_FILES", "PREDICTOR_VERSION", "fingerprint", "model_source"]

# Bump on any change to what the models predict, and record the new fingerprint below: the
# held-out runs measured before it can no longer be predicted, and a new one must be drawn.
# 1: as judged on the held-out draw of seed 0. 2: contention measured with every process
# stepping for a whole window (1 computed none for steps of a few milliseconds). 3: the
# blocks a model family declares (parbench.families) instead of a ResNet's, so a ViT is
# profiled and predicted too; on ResNets every prediction is version 2's (the seed-1
# held-out run predicted again gives the same predictions.csv but for the version column).
# 4: parbench's modules grouped into packages (the model's sources import them by their new
# names) and a record's model chosen by its strategy's declared layout, not by its name (hsdp's
# and pipeline-fsdp's two dimensions left out; the ranks of one pipeline a hook of the
# scheduled pipelines); every prediction is version 3's (the published held-out runs
# predicted again: docs/prediction.md).
# 5: memory by what holds it (parbench.advisor.memory): the measured figure now counts DDP's
# buckets, and a record's memory error compares like with like (FSDP's gathered units are
# predicted but not counted on a CPU); hsdp and pipeline-fsdp predicted; a run under a memory
# limit has each configuration called (fits / out of memory). No held-out run was measured
# at version 4; version 5's is the recommend experiment's (docs/recommend.md).
# 6: emulated devices slow each other only while they compute at once (processor sharing in
# the schedule replay, each tick of the tick pipeline slowed by the stages computing in it: the
# cores taken in turn, the measured slowdown beyond that grown with the ranks computing; data
# parallel over pipelines counts its twin pipelines), and each strategy scaled by its measured over
# predicted throughput on version 5's held-out workloads, on a CPU like that one
# (calibration.json): those workloads are version 6's tuning data; its held-out draw is new.
PREDICTOR_VERSION = 6
# The sources whose every byte is the model (from the project's root): the profile and
# contention measurements and where they are kept, the links and the collectives'
# interpolation, the timing models, the schedules and cuts they replay, and which model and
# profile a record gets.
MODEL_FILES = tuple(f"parbench/advisor/{name}" for name in (
    "cache.py", "calibration.json", "calibration.py", "contention.py", "data_parallel.py",
    "links.py", "memory.py", "memory_calls.py", "models.py", "profile.py", "record_profiles.py",
    "records.py", "schedule_replay.py", "sharded_pipelines.py")) + (
    "parbench/measure/collectives.py", "strategies/partition.py",
    "strategies/pipeline_schedules.py")
# sha256 of MODEL_FILES at PREDICTOR_VERSION (fingerprint()); a test checks it, and a run's
# prediction.json keeps it, so a model changed without a new version is caught there too. It
# was taken anew (2026-11-27) when the fingerprint stopped counting where the project's
# imports come from, on the same sources version 6 was committed with.
FINGERPRINT = "37efb3433e2244b3beccea575a7fed68cc8322ddcd2ce2869d7182d05d322b5c"

_ROOT = Path(__file__).resolve().parents[2]


_PROJECT = ("parbench", "strategies")


class _ProjectImports(ast.NodeTransformer):
    """Takes every import of the project's own modules out of a tree, keeping the names."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        if node.level or (node.module or "").split(".")[0] not in _PROJECT:
            return node
        self.names.update(f"{a.name} as {a.asname}" if a.asname else a.name for a in node.names)
        return None


def model_source(text: bytes) -> bytes:
    """What a model file's fingerprint is taken over: its syntax tree (not its layout or
    comments) with the imports of the project's own modules reduced to the set of names they
    import. Where a name comes from, and the imports' order, are not the model (a module moved
    or renamed predicts the same); what is imported, and everything else, is."""
    imports = _ProjectImports()
    tree = imports.visit(ast.parse(text))
    return (ast.dump(tree) + "\n" + ",".join(sorted(imports.names))).encode()


def fingerprint() -> str:
    """sha256 over MODEL_FILES' sources (model_source), in order: what FINGERPRINT must equal."""
    digest = hashlib.sha256()
    for name in MODEL_FILES:
        data = (_ROOT / name).read_bytes()
        digest.update(model_source(data) if name.endswith(".py") else data)
    return digest.hexdigest()
