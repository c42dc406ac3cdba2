"""One-off diagnostic: what a GPU profile's device_overheads counts as transients."""
import gc, json, subprocess, sys, time
import torch
from torch.cuda import memory as cm
from parbench.advisor.models import models
from parbench.advisor.profiling import profile as prof
from parbench.families.workloads import Workload

MiB = 2 ** 20
W = Workload(model="resnet50", image_size=128)
mode = sys.argv[1] if len(sys.argv) > 1 else "sequence"


def peak_table(label, trace):
    live, total, peak, at_peak = {}, 0, 0, {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e; total += e["size"]
            if total > peak:
                peak, at_peak = total, dict(live)
        elif e["action"] == "free_requested":
            x = live.pop(e["addr"], None)
            if x: total -= x["size"]
    print(f"[{label}] peak of allocations made while recording {peak/MiB:.1f} MiB; largest live then:")
    for e in sorted(at_peak.values(), key=lambda e: -e["size"])[:6]:
        fr = [f"{f['filename'].rsplit('/', 2)[-1]}:{f['line']} {f['name']}" for f in e.get("frames", [])]
        fr = [f for f in fr if "memory.py" not in f][:5]
        print(f"   {e['size']/MiB:9.1f} MiB  {' <- '.join(fr) or '(no python frame: autograd engine)'}")


def recorded_overheads(*args, **kwargs):
    torch.cuda.synchronize()
    print(f"  at device_overheads: allocated {torch.cuda.memory_allocated()/MiB:.1f} MiB, "
          f"params x2 {2*kwargs.get('parameter_bytes', args[5] if len(args) > 5 else 0)/MiB:.1f}")
    cm._record_memory_history(max_entries=200000, stacks="python")
    result = original(*args, **kwargs)
    snap = cm._snapshot()
    cm._record_memory_history(enabled=None)
    peak_table("device_overheads", snap["device_traces"][0])
    return result


original = prof.device_overheads
if mode == "sequence":
    prof.device_overheads = recorded_overheads
    for batch in (120, 2, 16):
        gc.collect()
        before = torch.cuda.memory_allocated() / MiB
        p = prof.profile_blocks(W, batch, "cuda:0")
        params = p.parameter_bytes / MiB
        saved = sum(b.saved_bytes for b in p.blocks) / MiB
        print(f"batch {batch}: allocated before {before:.1f} MiB; transient {p.transient_bytes/MiB:.1f}, "
              f"reserved extra {p.reserved_extra_bytes/MiB:.1f}, context {p.context_bytes/MiB:.1f}, "
              f"params {params:.1f}, saved {saved:.1f}, predicted single peak "
              f"{models.single(p, 1).peak_memory_mib[0]:.1f}", flush=True)
        del p
    gc.collect()
    print(f"after all: allocated {torch.cuda.memory_allocated()/MiB:.1f} MiB")
elif mode == "nocudnn":
    torch.backends.cudnn.enabled = False
    p = prof.profile_blocks(W, 16, "cuda:0")
    print(f"cudnn off, batch 16: transient {p.transient_bytes/MiB:.1f}")
elif mode == "test":
    p = prof.profile_blocks(W, 16, "cuda:0")
    predicted = models.single(p, 1)
    gc.collect(); torch.cuda.empty_cache()
    print(f"test: after profile allocated {torch.cuda.memory_allocated()/MiB:.1f}")
    model = W.build_model_on("cuda:0")
    images, labels = W.make_batch(16, "cuda:0")
    opt = W.make_optimizer(model.parameters())
    torch.cuda.reset_peak_memory_stats()
    cm._record_memory_history(max_entries=200000, stacks="python")
    for i in range(3):
        torch.cuda.reset_peak_memory_stats()
        W.loss_fn()(model(images), labels).backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        print(f"  step {i}: peak {torch.cuda.max_memory_allocated()/MiB:.1f} reserved {torch.cuda.max_memory_reserved()/MiB:.1f}")
    snap = cm._snapshot(); cm._record_memory_history(enabled=None)
    peak_table("test steps", snap["device_traces"][0])
    print(f"test: predicted peak {predicted.peak_memory_mib[0]:.1f}, transient {p.transient_bytes/MiB:.1f}, "
          f"params {p.parameter_bytes/MiB:.1f}, saved {sum(b.saved_bytes for b in p.blocks)/MiB:.1f}")
