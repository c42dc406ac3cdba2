"""What is trained: a torchvision model, its synthetic data, loss, optimiser and precision."""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass

import torch
from torch import nn

from parbench.families import FAMILIES, MODELS, ModelFamily, family_of

__all__ = ["COMPILE_MODES", "COMPILE_SCOPES", "CUDA_GRAPH_MODES", "MIN_IMAGE_SIZE", "MODELS",
           "PRECISIONS", "Workload", "compile_in_place", "compile_text", "is_compiled"]

PRECISIONS = ("fp32", "bf16", "fp16")
# What torch.compile compiles as one: each of the model family's blocks, or the module a
# strategy runs on one device whole (the model, or a stage).
COMPILE_SCOPES = ("block", "model")
# torch.compile's modes (torch._inductor.list_mode_options(), torch 2.8 to 2.14), and those
# that capture CUDA graphs (`triton.cudagraphs`): torch skips them on a CPU.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The smallest image any family trains on (each family checks its own).
MIN_IMAGE_SIZE = min(family.min_image_size for family in FAMILIES)


@dataclass(frozen=True)
class Workload:
    """One training job, identical for every strategy: model, data shape, loss, optimiser."""

    model: str = "resnet50"
    image_size: int = 128
    num_classes: int = 1000
    precision: str = "fp32"
    channels_last: bool = False
    # torch.compile each of the model family's blocks, or each module a strategy runs on a
    # device whole (`compile_scope`), in place (`compiled`), for every strategy, in one of
    # torch's modes; they compile in the first warm-up step. An eager workload keeps the
    # defaults of both, whatever was given: it is one workload.
    compile: bool = False
    compile_scope: str = "block"
    compile_mode: str = "default"
    # cuDNN picks the fastest convolution algorithm for each new input shape by timing them
    # (torch.backends.cudnn.benchmark; timm's benchmark.py turns it on): off by default, as in
    # torch. It applies to CUDA only.
    cudnn_benchmark: bool = False
    seed: int = 0
    learning_rate: float = 0.01
    momentum: float = 0.9
    # An image folder (one subfolder per class) to train on instead of synthetic data.
    data_dir: str | None = None
    # Where fp16's gradient scaler starts (torch's default; verify starts lower).
    initial_loss_scale: float = 2.0**16

    def __post_init__(self) -> None:
        family = family_of(self.model)  # a ValueError for a model no family builds
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"unknown precision {self.precision!r}; choose from {', '.join(PRECISIONS)}"
            )
        problem = family.image_size_problem(self.image_size)
        if problem:
            raise ValueError(f"{self.model} cannot train on images of {self.image_size} px; "
                             f"{problem}")
        if self.num_classes < 1:
            raise ValueError(f"num classes must be at least 1, got {self.num_classes}")
        if self.compile_scope not in COMPILE_SCOPES:
            raise ValueError(f"unknown compile scope {self.compile_scope!r}; choose from "
                             f"{', '.join(COMPILE_SCOPES)}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {self.compile_mode!r}; choose from "
                             f"{', '.join(COMPILE_MODES)}")
        if not self.compile:  # frozen: set as the dataclass sets its fields
            object.__setattr__(self, "compile_scope", Workload.compile_scope)
            object.__setattr__(self, "compile_mode", Workload.compile_mode)

    def describe(self) -> dict:
        described = asdict(self)
        # Settings at their default are left out, as before they existed: run folders
        # resume as they were.
        if not self.compile:
            del described["compile"]
        for name in ("compile_scope", "compile_mode"):  # the defaults, and always when eager
            if described[name] == getattr(Workload, name):
                del described[name]
        if not self.cudnn_benchmark:
            del described["cudnn_benchmark"]
        if self.initial_loss_scale == Workload.initial_loss_scale:
            del described["initial_loss_scale"]
        return described

    @property
    def captures_cuda_graphs(self) -> bool:
        """Whether torch.compile is asked to capture CUDA graphs (on CUDA devices only)."""
        return self.compile and self.compile_mode in CUDA_GRAPH_MODES

    @property
    def family(self) -> ModelFamily:
        """The model's family: its blocks, cuts and normalisation, for the strategies."""
        return family_of(self.model)

    def build_model(self) -> nn.Module:
        """A randomly initialised model; the same weights for the same seed, on the CPU."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return self.family.build(self.model, self.image_size, self.num_classes)

    def build_model_on(self, device: torch.device | str) -> nn.Module:
        """`build_model` placed on `device`, in the workload's memory format, in training mode."""
        return self.prepare_model(self.build_model().to(device)).train()

    def make_batch(self, batch_size: int,
                   device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Synthetic images and labels for `device`, the same for the same seed on any device."""
        generator = torch.Generator(device="cpu").manual_seed(self.seed)
        shape = (batch_size, 3, self.image_size, self.image_size)
        images = torch.randn(shape, generator=generator).to(device)
        labels = torch.randint(0, self.num_classes, (batch_size,), generator=generator).to(device)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, labels

    def input_bytes(self, images: int) -> int:
        """What `images` input images take as float32 pixels, in bytes."""
        return images * 3 * self.image_size**2 * 4

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Apply the memory format the workload asks for (after the model is on its device)."""
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def compiled(self, module: nn.Module) -> nn.Module:
        """`module` compiled in place where the workload asks for it (else untouched), and
        returned: a whole model of the family, or a stage (an nn.Sequential of its blocks, as
        `strategies.partition` cuts one). Scope `model` compiles `module` as one; scope
        `block` each of its model family's blocks.

        Per block, as torchtitan compiles each transformer block (`apply_compile`): every
        strategy runs the same compiled blocks, whole, cut into stages or wrapped, and a
        strategy that wraps a model or a block (DDP, FSDP2's fully_shard) compiles it first,
        as torchtitan does, so the wrapper's hooks and communication run around compiled code.
        `nn.Module.compile` keeps each block the module it was, its parameters, hooks and
        place in the model the same objects. A whole model's forward then runs its blocks in
        order (`ModelFamily.blocks` promises they compute it): a ResNet's stem and head are
        containers made for the cut, which its own forward never calls. Compiling happens on
        a block's first call, which the harness keeps in the warm-up; compiling twice
        compiles nothing more.
        """
        if not self.compile:
            return module
        if self.compile_scope == "model":
            compile_in_place([module], self.compile_mode)
            return module
        if isinstance(module, nn.Sequential):  # a stage: its children are the blocks
            compile_in_place(list(module), self.compile_mode)
            return module
        if isinstance(vars(module).get("forward"), _Blocks):  # compiled already
            return module
        blocks = [block for _, block in self.family.blocks(module)]
        compile_in_place(blocks, self.compile_mode)
        # An attribute, not a module: the model's parameters, state and submodules stay as
        # they are.
        module.forward = _Blocks(_calls(module, blocks))
        return module

    def loss_fn(self) -> nn.Module:
        return nn.CrossEntropyLoss()

    def make_optimizer(self, parameters) -> torch.optim.Optimizer:
        return torch.optim.SGD(parameters, lr=self.learning_rate, momentum=self.momentum)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype autocast computes in (None for fp32)."""
        return _AUTOCAST_DTYPES.get(self.precision)

    def autocast(self, device: torch.device | str):
        """Mixed-precision context for code running on `device` (a no-op for fp32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(device).type, dtype=self.autocast_dtype)

    def make_grad_scaler(self, device: torch.device | str) -> torch.amp.GradScaler:
        """Loss scaling is needed for fp16 only; a disabled scaler passes calls straight through."""
        return torch.amp.GradScaler(torch.device(device).type, init_scale=self.initial_loss_scale,
                                    enabled=self.precision == "fp16")


# Graphs kept per compiled code object before dynamo falls back to eager: its own cap across
# every code object's regions (`accumulated_recompile_limit`, 256 in torch 2.8 to 2.14).
_GRAPHS_PER_CODE = 256


class _Blocks:
    """A model's forward as its family's blocks called in order (a plain callable: set on the
    model as `forward`, it adds no module to it)."""

    def __init__(self, calls: list[nn.Module]) -> None:
        self.calls = tuple(calls)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        for module in self.calls:
            inputs = module(inputs)
        return inputs


def _calls(model: nn.Module, blocks: list[nn.Module]) -> list[nn.Module]:
    """The modules that compute `model`'s forward from its blocks, in order: each block, but
    for a run of them that an nn.Sequential of the model holds and nothing else (a ResNet's
    layer1, a ViT's encoder layers), that Sequential, which calls them in order itself, so
    that whatever wraps it (an FSDP unit of a layer group) still sees its call. The
    outermost such Sequential, where several hold the same run."""
    where = {id(block): index for index, block in enumerate(blocks)}
    runs: dict[int, tuple[int, nn.Module]] = {}  # first block -> (blocks held, Sequential)
    for container in model.modules():
        children = list(container.children())
        if (container is model or not isinstance(container, nn.Sequential) or not children
                or any(id(child) not in where for child in children)):
            continue
        first = where[id(children[0])]
        if ([where[id(child)] for child in children] == list(range(first, first + len(children)))
                and len(children) > runs.get(first, (0, container))[0]):
            runs[first] = (len(children), container)
    calls, index = [], 0
    while index < len(blocks):
        count, module = runs.get(index, (1, blocks[index]))
        calls.append(module)
        index += count
    return calls


def is_compiled(module: nn.Module) -> bool:
    """Whether `module` was compiled in place (`nn.Module.compile`)."""
    return getattr(module, "_compiled_call_impl", None) is not None


def compile_text(scope: str | None = "block", mode: str | None = "default") -> str:
    """How labels name a compiled workload: `compiled` (per block, in torch's default mode),
    `compiled whole` (scope model), followed by any other mode: `compiled reduce-overhead`."""
    text = "compiled" + (" whole" if scope == "model" else "")
    return text + (f" {mode}" if mode and mode != "default" else "")


def compile_in_place(blocks: list[nn.Module], mode: str = "default") -> None:
    """Compile each block (or module) in place with static shapes (a micro-batch of another
    size gets a graph of its own) in torch.compile's `mode`, once: a block compiled already
    is left as it is.

    Dynamo keeps its graphs on the code object, and the blocks of one class share their
    forward's: resnet50's 16 Bottlenecks make 8 graphs (one per shape) at one micro-batch
    size, and at a second size the ninth would reach dynamo's default limit of 8 graphs and
    run every Bottleneck eager from then on, without an error (measured on torch 2.14). The
    graphs a block class needs are its shapes times the micro-batch sizes, however many
    blocks share them, so the limit is raised to dynamo's own cap, and reaching it fails the
    run rather than timing eager blocks as compiled ones. Set in this thread: torch 2.14 keeps
    dynamo's settings per thread (context variables), so a strategy that runs its blocks on
    threads of its own runs them in copies of this thread's context (`Pipeline`)."""
    import torch._dynamo  # only where something compiles

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, _GRAPHS_PER_CODE)
    config.fail_on_recompile_limit_hit = True
    if mode in CUDA_GRAPH_MODES and _on_cuda(blocks):
        _no_silent_cuda_graph_skip()
    for block in blocks:
        if not is_compiled(block):
            block.compile(dynamic=False, mode=mode)


def _on_cuda(modules: list[nn.Module]) -> bool:
    return any(p.is_cuda for module in modules for p in module.parameters())


def _no_silent_cuda_graph_skip() -> None:
    """A graph torch cannot capture as a CUDA graph (mutated inputs, a CPU tensor in it, ...)
    fails with torch's reason instead of running without one, so that a record under a mode
    of CUDA graphs ran them (`triton.cudagraph_or_error`, where this torch has it). Set in
    this thread, as dynamo's settings above."""
    import torch._inductor.config

    triton = torch._inductor.config.triton
    if hasattr(triton, "cudagraph_or_error"):
        triton.cudagraph_or_error = True
