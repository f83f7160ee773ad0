"""DecisionModel: a Qwen3.5 backbone, a PEFT LoRA adapter, an FP32 scalar head and a temperature.

The backbone is `Qwen3_5TextModel` (no vocabulary projection is ever computed). Each candidate
sequence runs alone (batch 1, no padding), so a request's probabilities do not depend on what
else is queued and the same request twice gives bit-identical results.

Modes:
    raw   unmerged LoRA through PEFT, stock SDPA, eager, PyTorch reference linear-attention
          kernels forced (and asserted) even when FLA / causal-conv1d are installed.
    fast  LoRA merged into the weights, FLA / causal-conv1d when importable (reported),
          optional CUDA Graph replay keyed by exact length (`cuda_graphs` = capacity, 0 = off).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from ..decision import TEMPERATURE_27B as RANDOM_TEMPERATURE  # the published 27B model's spread
from ..errors import BackendError, CheckpointError
from ..hashing import source_digest
from .answers import answer as contract_answer
from .fingerprint import WeightsFingerprint, named_tensors, weights_fingerprint
from .hardware import GpuCeilings
from .kernel_choice import KernelNames, autotune_choices, package_versions
from .kernels import BoundKernels, block_optional_kernels, bound_implementations
from .package import Package, load_head
from .prompts import DEFAULT_PROMPT_FORMAT, Question, RequestInvalid, candidate_texts, chat_prompt

__all__ = [
    "Candidate",
    "DecisionModel",
    "ModelInfo",
    "Settings",
    "resolve_device",
]

METHOD = "scalar_head"
PROMPT_IDS = ("template", "cached", "cached-parallel")   # --prompt-ids
RANDOM_INIT_SCHEME = "openjev-repro/random-init/v2"   # change it whenever the drawn values change
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "out_proj"]


@dataclass(frozen=True)
class Settings:
    mode: str = "raw"             # raw | fast
    device: str = "auto"          # auto | cpu | cuda | cuda:N
    dtype: str = "auto"           # auto | float32 | bfloat16 | float16
    max_length: int = 4096
    cuda_graphs: int = 0          # fast mode, CUDA only: LRU capacity, 0 = eager
    compile: bool = False         # fast mode, CUDA only: fused RMSNorm and SiLU gate (fusion.py, torch.compile)
    prompt_format: str = DEFAULT_PROMPT_FORMAT   # prompts.PROMPT_FORMATS: how requests become prompts
    prompt_ids: str = "template"  # template | cached | cached-parallel (template_ids.py, parallel_tokens.py)
    fusions: tuple[str, ...] = ()  # fast mode: fast_layers.FUSIONS to apply (`--fuse`)
    kernels: str = "auto"         # kernel_choice.KERNEL_CHOICES: checked against what the layers hold once loaded
    measure_hardware: bool = False  # CUDA only: measure the GPU's ceilings once loaded (hardware.py)

    def check(self, device: Any) -> None:
        """The settings fit each other and the device, else BackendError (before anything is loaded)."""
        if self.mode not in ("raw", "fast"):
            raise BackendError(f"Unknown --mode {self.mode!r}; use raw or fast.")
        if self.prompt_ids not in PROMPT_IDS:
            raise BackendError(f"Unknown --prompt-ids {self.prompt_ids!r}; use template, cached or cached-parallel.")
        if self.mode != "fast":
            for asked, problem in (
                    (self.compile, "torch.compile is part of fast mode only; drop --compile for raw mode."),
                    (self.fusions, "--fuse is part of fast mode only; drop it for raw mode."),
                    (self.cuda_graphs, "CUDA Graph replay is part of fast mode only; drop --cuda-graphs for raw mode.")):
                if asked:
                    raise BackendError(problem)
        if device.type != "cuda":
            for asked, problem in (
                    (self.compile, "--compile needs a CUDA device; drop the flag or use --device cuda."),
                    (self.cuda_graphs, ("--cuda-graphs needs a CUDA device (graphs cannot be captured on CPU); "
                                       "drop the flag or use --device cuda."))):
                if asked:
                    raise BackendError(problem)


class WeightsReport(msgspec.Struct, frozen=True, kw_only=True):
    """/health's weights fingerprints (fingerprint.py; `to_json()`, in this order): the unmerged model's
    (backbone with its LoRA, head and temperature) and, in fast mode, the merged model's."""

    weights_fingerprint: str
    weights_fingerprint_scope: str = "unmerged"
    merged_weights_fingerprint: str | UnsetType = UNSET
    weights_fingerprint_seconds: float
    weights_bytes: int

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


class ModelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What loading found, fixed from then on; /health reports it beside the figures that change while
    the model serves (`DecisionModel.describe`). `to_json()` is the whole record."""

    source: str                       # "package", or "random-init CONFIG seed N"
    patched_checks: tuple[str, ...]   # raw mode: the kernel availability checks made to answer False
    weights: WeightsReport
    implementations: BoundKernels
    lora: str                         # "merged" | "unmerged (PEFT)"
    lora_modules: int
    compiled: str | None = None       # --compile: what fusion.py fused
    fusions: str | None = None        # --fuse: what fast_layers applied
    hardware: GpuCeilings | None = None  # --measure-hardware
    non_embedding_parameters: int
    kernels: KernelNames              # --kernels as requested and as bound
    packages: dict[str, str | None]   # kernel_choice.PACKAGES as this interpreter has them
    source_sha256: str                # the project's source files as they ran

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


@dataclass(frozen=True)
class Candidate:
    question: Question
    text: str                     # the user message, before the chat template
    ids: list[int]


def resolve_device(settings: Settings) -> tuple[Any, Any]:
    """(torch.device, torch.dtype) for the settings; CPU defaults to FP32, CUDA to BF16."""
    import torch

    name = settings.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise BackendError("--device cuda was requested but torch sees no CUDA device; use --device cpu.")
    device = torch.device(name)
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if settings.dtype == "auto":
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    elif settings.dtype in dtypes:
        dtype = dtypes[settings.dtype]
    else:
        raise BackendError(f"Unknown --dtype {settings.dtype!r}; use auto, float32, bfloat16 or float16.")
    return device, dtype


def _prepare_imports(mode: str) -> list[str]:
    """Raw mode: block optional kernels before any model class is imported."""
    return block_optional_kernels() if mode == "raw" else []


class DecisionModel:
    def __init__(self, backbone: Any, tokenizer: Any, head: Any, temperature: float, settings: Settings,
                 device: Any, dtype: Any, info: ModelInfo):
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.head = head
        self.temperature = temperature
        self.settings = settings
        self.device = device
        self.dtype = dtype
        self.info = info
        self.implementations = info.implementations.to_json()  # in every answer's metadata: built once
        self.graphs = None
        self._backbone_dtypes: list[str] | None = None
        self.template_ids = None
        if settings.prompt_ids in ("cached", "cached-parallel"):
            from .template_ids import TemplateIds
            self.template_ids = TemplateIds(tokenizer, parallel=settings.prompt_ids == "cached-parallel")
        if settings.cuda_graphs:
            from .graphs import GraphCache
            self.graphs = GraphCache(settings.cuda_graphs, device, compiled=settings.compile)

    # ------------------------------------------------------------ construction

    @classmethod
    def from_package(cls, package: Package, settings: Settings) -> DecisionModel:
        device, dtype = resolve_device(settings)
        settings.check(device)
        patched = _prepare_imports(settings.mode)
        import torch
        from peft import PeftModel
        from transformers import AutoTokenizer, Qwen3_5TextModel

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(package.base), local_files_only=True)
            backbone = Qwen3_5TextModel.from_pretrained(str(package.base), dtype=dtype, local_files_only=True,
                                                        attn_implementation="sdpa")
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"Could not load the base model from {package.base}: {exc}") from exc
        backbone = backbone.to(device).eval()
        try:
            model = PeftModel.from_pretrained(backbone, str(package.adapter), is_trainable=False)
        except (OSError, ValueError, KeyError) as exc:
            raise CheckpointError(f"Could not load the LoRA adapter from {package.adapter}: {exc}") from exc
        head_state = load_head(package.head, package.hidden_size)
        head = torch.nn.Linear(package.hidden_size, 1, bias=True, dtype=torch.float32)
        head.load_state_dict(head_state)
        return cls._finish(model, tokenizer, head.to(device), package.temperature, settings, device, dtype,
                           "package", patched)

    @classmethod
    def from_random(cls, config_path: Path, tokenizer_dir: Path, seed: int, settings: Settings) -> DecisionModel:
        """Random weights built directly on the device (for latency studies without weights).

        Every random tensor (backbone, LoRA A and B, head) is drawn from a generator on the device
        seeded per tensor by `tensor_seed(seed, canonical name)`. Same seed + same device type +
        same torch version gives the same weights in any process on any host; CUDA values may also
        depend on the GPU model (torch sizes its random kernels by the SM count), and CPU and CUDA
        generators give different values. The weights fingerprint in /health shows which case holds.
        """
        device, dtype = resolve_device(settings)
        settings.check(device)
        patched = _prepare_imports(settings.mode)
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoTokenizer, Qwen3_5TextConfig, Qwen3_5TextModel

        try:
            config = Qwen3_5TextConfig.from_pretrained(str(config_path))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"Could not read the model config {config_path}: {exc}") from exc
        config._attn_implementation = "sdpa"
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype if dtype != torch.float16 else torch.float32)
        try:
            with torch.device(device):
                backbone = Qwen3_5TextModel(config)
        finally:
            torch.set_default_dtype(previous)
        generator = torch.Generator(device=device)
        with torch.no_grad():
            for name, param in sorted(backbone.named_parameters()):
                if "norm" in name or name.endswith("dt_bias"):
                    _check_constant(name, param)   # the library's constant init (zeros or ones), not random
                elif name.endswith("A_log"):
                    param.uniform_(0.0, math.log(16.0), generator=_seeded(generator, seed, name))
                else:
                    param.normal_(0.0, config.initializer_range, generator=_seeded(generator, seed, name))
        backbone = backbone.to(dtype).eval()
        lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none", target_modules=list(LORA_TARGETS))
        model = get_peft_model(backbone, lora)
        with torch.no_grad():   # PEFT drew lora_A from the global RNG: overwrite A and B from our seeds
            for name, param in sorted(model.named_parameters()):
                # without PEFT's wrapper prefix and adapter name: layers.0.self_attn.q_proj.lora_A.weight
                canonical = name.removeprefix("base_model.model.").replace(".default.", ".")
                if ".lora_A." in canonical:
                    bound = 1.0 / math.sqrt(param.shape[1])
                    param.uniform_(-bound, bound, generator=_seeded(generator, seed, canonical))
                elif ".lora_B." in canonical:
                    param.normal_(0.0, 0.02, generator=_seeded(generator, seed, canonical))
        head = torch.nn.Linear(config.hidden_size, 1, bias=True, dtype=torch.float32, device=device)
        with torch.no_grad():
            head.weight.normal_(0.0, 1.0 / math.sqrt(config.hidden_size),
                                generator=_seeded(generator, seed, "head.weight"))
            head.bias.zero_()
        return cls._finish(model.eval(), tokenizer, head, RANDOM_TEMPERATURE, settings, device, dtype,
                           f"random-init {config_path} seed {seed}", patched)

    @classmethod
    def _finish(cls, model: Any, tokenizer: Any, head: Any, temperature: float, settings: Settings, device: Any,
                dtype: Any, source: str, patched: list[str]) -> DecisionModel:
        """Fingerprint, merge (fast mode), check the kernels, fuse, measure: the loaded model and its ModelInfo."""
        unmerged = _fingerprint(model, head, temperature)
        merged: str | UnsetType = UNSET
        if settings.mode == "fast":
            model = text_model = model.merge_and_unload()
            merged = _fingerprint(model, head, temperature).fingerprint
            bound, lora = bound_implementations(text_model), "merged"
        else:
            text_model = model.get_base_model()
            bound, lora = bound_implementations(text_model).require_reference(), "unmerged (PEFT)"
        kernels = KernelNames.of(settings.kernels, bound).checked()
        compiled = fusions = None
        if settings.compile:
            from .fusion import fuse_elementwise
            compiled = fuse_elementwise(text_model)
        if settings.fusions:   # after the fingerprints (they describe the unconcatenated weights) and after --compile
            from .fast_layers import apply_fusions
            from .fusion import compile_function
            fusions = apply_fusions(text_model, settings.fusions, compiler=compile_function if settings.compile else None)
        hardware = None
        if settings.measure_hardware:
            from .hardware import measure_hardware
            hardware = measure_hardware(device)
        info = ModelInfo(
            source=source, patched_checks=tuple(patched),
            weights=WeightsReport(weights_fingerprint=unmerged.fingerprint, merged_weights_fingerprint=merged,
                                  weights_fingerprint_seconds=unmerged.seconds, weights_bytes=unmerged.bytes),
            implementations=bound, lora=lora,
            lora_modules=sum(1 for name, _ in model.named_modules() if name.endswith("lora_A")),
            compiled=compiled, fusions=fusions, hardware=hardware,
            non_embedding_parameters=sum(p.numel() for name, p in text_model.named_parameters()
                                         if "embed_tokens" not in name),
            kernels=kernels, packages=package_versions(), source_sha256=source_digest()["sha256"])
        return cls(model.eval(), tokenizer, head.eval(), temperature, settings, device, dtype, info)

    # ------------------------------------------------------------ reporting

    def backbone_dtypes(self) -> list[str]:
        """The backbone's parameter dtypes; fixed once loaded (and merged), so walked once, not per request."""
        if self._backbone_dtypes is None:
            self._backbone_dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in self.backbone.parameters()})
        return list(self._backbone_dtypes)

    def describe(self) -> dict[str, Any]:
        """The model's part of /health: what loading found (`self.info`) among what changes while it serves
        (CUDA Graphs, cached prompt ids, torch's thread counts, FLA's autotuned choices once made)."""
        import torch

        info, graphs, ids = self.info, self.graphs, self.template_ids
        autotune = autotune_choices()
        return {"mode": self.settings.mode, "device": str(self.device), "prompt_format": self.settings.prompt_format,
                "dtype": str(self.dtype).removeprefix("torch."),
                "implementations": self.implementations, "lora": info.lora, "lora_modules": info.lora_modules,
                "cuda_graphs": graphs.stats() if graphs else None,
                "compiled": info.compiled, "fusions": info.fusions,
                "prompt_ids": ids.status if ids else "template",
                "prompt_ids_parallel": ids.parallel_status if ids else None,
                "hardware": info.hardware.to_json() if info.hardware else None,
                "non_embedding_parameters": info.non_embedding_parameters, **info.weights.to_json(),
                "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
                "thread_env": {name: os.environ.get(name) for name in THREAD_ENV},
                "kernels": info.kernels.to_json(), "packages": info.packages, "source_sha256": info.source_sha256,
                **({"autotune": autotune} if autotune else {})}

    # ------------------------------------------------------------ inference

    def candidates(self, state: Any, questions: list[Question]) -> list[Candidate]:
        """Tokenize every candidate; refuse (422) any over max_length before running anything."""
        out = []
        for question in questions:
            for text in candidate_texts(state, question, self.settings.prompt_format):
                ids = self.template_ids.ids(text) if self.template_ids else chat_prompt(self.tokenizer, text)
                if len(ids) > self.settings.max_length:
                    raise RequestInvalid(
                        f"a candidate of question {question.qid!r} has {len(ids)} tokens, over the server's "
                        f"max length {self.settings.max_length}; nothing is truncated.", f"questions.{question.qid}")
                out.append(Candidate(question, text, ids))
        return out

    def _forward(self, ids: Any) -> Any:
        hidden = self.backbone(input_ids=ids, use_cache=False).last_hidden_state[:, -1, :]
        return self.head(hidden.float())[:, 0]

    def score(self, ids: list[int]) -> float:
        """The head's raw score s of one candidate sequence."""
        import torch

        tensor = torch.tensor([ids], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            if self.graphs is not None:
                out = self.graphs.run(self._forward, tensor)
            else:
                out = self._forward(tensor)
        return float(out[0].item())

    def answer(self, state: Any, questions: list[Question], candidates: list[Candidate]) -> dict[str, Any]:
        """Score every candidate and build the answers (probabilities as the facts file defines)."""
        scores = [self.score(c.ids) for c in candidates]
        answers: dict[str, Any] = {}
        for question in questions:
            mine = [s for c, s in zip(candidates, scores, strict=True) if c.question is question]
            answers[question.qid] = contract_answer(question, mine, self.temperature)
        return answers


THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _fingerprint(model: Any, head: Any, temperature: float) -> WeightsFingerprint:
    """The weights fingerprint (fingerprint.py) of backbone (with its LoRA), head and temperature."""
    import torch

    temp = torch.tensor([temperature], dtype=torch.float64)
    return weights_fingerprint(named_tensors("backbone.", model) + named_tensors("head.", head)
                               + [("temperature", temp)])


def tensor_seed(seed: int, name: str) -> int:
    """The seed of one random tensor: SHA-256 of (study seed, canonical tensor name), 63 bits.

    Each tensor has its own seed, so its values depend neither on the order in which tensors are
    drawn nor on which other tensors exist, nor on any library's own init code or global RNG.
    """
    digest = hashlib.sha256(f"{RANDOM_INIT_SCHEME}\0{seed}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _seeded(generator: Any, seed: int, name: str) -> Any:
    return generator.manual_seed(tensor_seed(seed, name))


def _check_constant(name: str, param: Any) -> None:
    """Parameters we do not draw must be the library's constant init; anything random would break seeding."""
    if param.numel() and not bool((param == param.reshape(-1)[0]).all()):
        raise BackendError(f"random init: {name} is not constant after the library's init; seeding would not be "
                           "reproducible (a newer transformers version?).")
