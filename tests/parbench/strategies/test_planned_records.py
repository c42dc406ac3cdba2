"""What every registered name records of its configuration before it runs (its options
resolved, its settings, its degrees, its devices and ranks), held equal to a file kept beside
this test: a change to how strategies are built (classes, presets, options) that changes a
record fails here. Regenerate the file only for a change meant to change records:
`python tests/parbench/strategies/test_planned_records.py`."""

import json
import sys
from pathlib import Path

import torch

from parbench import strategies
from parbench.drive.runner import planned_fields
from parbench.families.workloads import Workload
from parbench.machine.devices import parse_devices
from parbench.plan.config import Config, options_for

KEPT = Path(__file__).resolve().parent / "data" / "planned_records.json"
# Fields that name this run or this machine, or hold the run's defaults (config_key: the
# warm-up and steps too), not how the strategy is built.
VOLATILE = ("run_id", "config_index", "threads_per_device", "config_key")


def planned() -> dict[str, dict]:
    """Each name's planned fields on 4 CPU devices, batch 16, micro-batches of 2: a ResNet,
    or a ViT for the names that split layers."""
    devices = parse_devices("cpu,cpu,cpu,cpu")
    options = {"split_size": 2, "accumulation_split": 2}
    found = {}
    for name in strategies.names():
        model, size = (("vit_b_16", 16) if strategies.layout_of(name).splits_layers
                       else ("resnet18", 64))
        workload = Workload(model=model, image_size=size, num_classes=10)
        config = Config(name, workload, 16, devices, options=options_for(name, options))
        fields = planned_fields(config)
        found[name] = {k: v for k, v in fields.items() if k not in VOLATILE}
    return json.loads(json.dumps(found, default=str))


def test_every_name_records_what_it_recorded_before():
    kept = json.loads(KEPT.read_text())
    now = planned()
    assert sorted(now) == sorted(kept), "names added or removed: regenerate the kept file"
    changed = {name: {k: (kept[name].get(k), v) for k, v in fields.items()
                      if kept[name].get(k) != v}
               for name, fields in now.items() if fields != kept[name]}
    assert not changed, f"records changed (kept, now): {changed}"


if __name__ == "__main__":
    torch.set_num_threads(1)
    KEPT.write_text(json.dumps(planned(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {KEPT}", file=sys.stderr)
