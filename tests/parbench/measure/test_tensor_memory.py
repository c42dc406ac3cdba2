"""Memory per logical device counted from tensors, by hooks the harness installs around a
strategy's modules."""

import torch
from torch import nn

from parbench.measure.tensors import TensorMemory
from tests.support import one_rank

MIB = 2**20


def _model() -> nn.Module:
    # Linear saves its input; ReLU saves its output: 2 x 256 x 1024 float32 = 2 MiB.
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU())


def test_saved_activations_are_counted_until_backward_consumes_them():
    model = _model()
    memory = TensorMemory([model])
    inputs = torch.randn(256, 1024)
    loss = model(inputs).sum()
    assert memory.saved_peak_bytes() == [2 * 256 * 1024 * 4]
    loss.backward()
    memory.reset()  # the peak restarts from what is alive: nothing, after backward
    assert memory.saved_peak_bytes() == [0]
    memory.close()


def test_state_is_parameters_gradients_and_optimiser_state():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    memory = TensorMemory([model])
    model(torch.randn(256, 1024)).sum().backward()
    optimizer.step()  # momentum buffers: one more copy of the parameters
    parameters = sum(p.nbytes for p in model.parameters())
    [mib] = memory.read_mib(optimizer)
    assert mib * MIB == 3 * parameters + 2 * 256 * 1024 * 4
    memory.close()


def test_closing_removes_the_hooks():
    model = _model()
    memory = TensorMemory([model])
    memory.close()
    model(torch.randn(8, 1024)).sum().backward()
    assert memory.saved_peak_bytes() == [0]
    assert not model._forward_pre_hooks and not model._forward_hooks


def test_the_counting_hooks_keep_no_graph_alive_that_backward_never_reaches():
    # A ReLU saves its own output: held with its grad_fn by the hooks, that output would keep
    # its graph alive in a cycle (the zero-bubble schedules' weight pass skips such nodes).
    import gc
    import weakref

    module = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    memory = TensorMemory([module])
    output = module(torch.randn(2, 4, requires_grad=True))
    alive = weakref.ref(output)
    del output
    gc.collect()
    assert alive() is None
    memory.close()



def test_a_tensor_parallel_layers_saved_tensors_are_counted_by_their_local_shard():
    """Tensor parallelism saves DTensors for backward, whose own storage is not a shard (its
    data pointer raises): each is counted by the shard this process holds, and the layer's
    sharded weight as its state, not as an activation."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    with one_rank():
        layer = parallelize_module(nn.Linear(8, 16), DeviceMesh("cpu", [0]), ColwiseParallel())
        memory = TensorMemory([layer])
        loss = layer(torch.randn(4, 8)).sum()
        assert memory.saved_peak_bytes() == [4 * 8 * 4]  # the input; not the weight
        loss.backward()
        memory.close()
