"""The profiler's events read as a GPU's profile gives them: the operations the counted step
saw (not the composite ones around them, nor those inside their kernels), each with every
kernel it launched, the block and phase of the host's marks before it, and the kernels no
such operation launched apart."""

from dataclasses import dataclass, field

from pytest import approx
from torch.autograd import DeviceType
from torch.autograd.profiler_util import Kernel

from parbench.advisor.profiling.op_profile.labels import END, MARKER, STEP
from parbench.advisor.profiling.op_profile.trace import traced_steps


@dataclass
class _Range:
    start: float
    end: float

    def elapsed_us(self) -> float:
        return self.end - self.start


@dataclass(eq=False)
class _Event:
    """What trace.py reads of torch.profiler's FunctionEvent (times in microseconds)."""

    name: str
    start: float
    end: float
    kernel_us: tuple[float, ...] = ()
    children: list = field(default_factory=list)
    device_type: DeviceType = DeviceType.CPU
    cpu_parent: object = None
    input_shapes: tuple = ()
    input_dtypes: tuple = ()

    def __post_init__(self):
        self.time_range = _Range(self.start, self.end)
        self.kernels = [Kernel("kernel", 0, us) for us in self.kernel_us]
        self.cpu_children = self.children
        for child in self.children:
            child.cpu_parent = self

    @property
    def device_time_total(self) -> float:  # as FunctionEvent's: its kernels and its children's
        return (sum(kernel.duration for kernel in self.kernels)
                + sum(child.device_time_total for child in self.children))


def _flatten(events):
    return [e for event in events for e in (event, *_flatten(event.children))]


def _step(offset: float) -> list[_Event]:
    convolution = _Event("aten::convolution", offset + 2, offset + 10,
                         children=[_Event("aten::cudnn_convolution", offset + 3, offset + 9,
                                          kernel_us=(30.0, 40.0))],
                         input_shapes=([2, 3, 8, 8], [4, 3, 3, 3]), input_dtypes=("float",) * 2)
    return [
        _Event(STEP, offset, offset),
        _Event(f"{MARKER}stem:forward", offset + 1, offset + 1),
        _Event("aten::conv2d", offset + 1.5, offset + 11, children=[convolution]),
        _Event(f"{MARKER}loss:backward", offset + 20, offset + 20),
        # A mark's twin on the GPU's timeline (its ranges, later): never a mark of the host.
        _Event(f"{MARKER}head:forward", offset + 20.5, offset + 25, device_type=DeviceType.CUDA),
        _Event("aten::add_", offset + 21, offset + 22, kernel_us=(5.0,)),
        _Event("cudaStreamSynchronize-like", offset + 30, offset + 31, kernel_us=(7.0,)),
        _Event(END, offset + 100, offset + 100),
    ]


def test_each_operation_has_its_kernels_its_block_and_phase_and_the_rest_is_other():
    events = _flatten(_step(0.0) + _step(1000.0))
    steps = traced_steps(events, {"aten::convolution", "aten::add_", "aten::cudnn_convolution"},
                         on_device=True)
    assert len(steps) == 2
    for step in steps:
        assert step.wall_s == approx(100e-6)
        convolution, add = step.ops
        assert (convolution.block, convolution.phase, convolution.name) == \
            ("stem", "forward", "aten::convolution")
        assert (convolution.device_s, convolution.host_s) == approx((70e-6, 8e-6))
        assert convolution.input_shapes == ((2, 3, 8, 8), (4, 3, 3, 3))
        assert (add.block, add.phase, add.device_s) == ("loss", "backward", approx(5e-6))
        assert step.other_device_s == approx(7e-6)  # launched by nothing the counted step saw


def test_on_a_cpu_an_operations_time_is_its_own():
    [step] = traced_steps(_flatten(_step(0.0)), {"aten::convolution", "aten::add_"},
                          on_device=False)
    assert [op.device_s for op in step.ops] == [op.host_s for op in step.ops] == \
        approx([8e-6, 1e-6])
    assert step.other_device_s == 0.0
