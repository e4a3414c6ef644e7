"""Deployment: ONNX files checked in onnxruntime, and ``torch.export`` programs (``.pt2``).

:func:`export_onnx` writes a model (in eval mode) to ONNX with :func:`torch.onnx.export` and then
runs the file in onnxruntime (``CPUExecutionProvider``) on random batches, comparing against
PyTorch; it returns the largest difference and raises :class:`ExportError` when the outputs
disagree, so a wrong graph is never reported as a success. :func:`export_program` does the same
for a ``torch.export`` program saved as ``.pt2`` and reloaded.

Exporters (option ``exporter``):

* ``"dynamo"`` (the default for every visattn block and model): ``torch.export`` captures the
  graph and onnxscript translates it (``torch.onnx.export(..., dynamo=True)``). The batch (and,
  with ``dynamic_size``, height and width) are symbolic dimensions of one graph. It emits opset 18
  or later.
* ``"torchscript"``: the older tracing exporter (``dynamo=False``). ``"auto"`` uses it only where
  the dynamo exporter cannot be used: for an ``opset`` below 18 (the dynamo exporter's operator
  library starts at opset 18; older runtimes need the tracing exporter), and for a model that is
  already a ``torch.jit.ScriptModule`` (``torch.export`` cannot capture TorchScript).

A model that cannot be exported raises :class:`ExportError` naming the attention block at fault
(its registry name, module path and the exporter's reason), found by exporting and checking each
registered block of the model on its own.

Global max pooling: blocks pool with ``amax`` over the spatial dimensions (or, for the ``max``
option of SE, ``adaptive_max_pool2d(x, 1)``, which both exporters write as a global reduction), so
the graph stays correct at input sizes other than the traced one; ``dynamic_size=True`` exports
with symbolic height and width and checks a second size.
"""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ._nets import eval_mode
from ._values import first_line
from .blocks.capture import is_capturing
from .blocks.registry import is_block
from .constants import MAX_IMAGE_SIZE

__all__ = ["ExportError", "ExportReport", "export_onnx", "export_program"]

EXPORTERS = ("auto", "dynamo", "torchscript")
MIN_DYNAMO_OPSET = 18
#: the opsets torch's TorchScript-based exporter writes (torch 2.14: 7 to 20), and the highest the
#: dynamo exporter writes (23); torch keeps these in a private module, so visattn states them and
#: tests/export/test_opset_bounds.py fails, naming the change, when an installed torch differs
TORCHSCRIPT_OPSETS = (7, 20)
MAX_DYNAMO_OPSET = 23
INPUT_NAME = "input"
OUTPUT_NAME = "output"


class ExportError(RuntimeError):
    """An export failed, or the exported graph does not compute what the PyTorch model does."""


@dataclass(frozen=True)
class ExportReport:
    """What :func:`export_onnx` / :func:`export_program` wrote and how it was checked.

    ``max_abs_diff`` is the largest ``|exported - PyTorch|`` over every checked batch (``nan``
    when ``check=False``); ``checked`` lists the input shapes run.
    """

    path: Path
    format: str  # "onnx" | "pt2"
    exporter: str  # "dynamo" | "torchscript" | "torch.export"
    opset: int | None
    input_size: tuple[int, int, int]
    dynamic_batch: bool
    dynamic_size: bool
    max_abs_diff: float
    checked: tuple[tuple[int, ...], ...]
    runtime: str

    def summary(self) -> str:
        size = self.path.stat().st_size / 2**20 if self.path.exists() else float("nan")
        how = self.exporter + (f", opset {self.opset}" if self.opset is not None else "")
        lines = [f"exported {self.path} ({self.format}, {how}, {size:.1f} MiB)"]
        if self.checked:
            shapes = ", ".join("x".join(map(str, s)) for s in self.checked)
            lines.append(
                f"checked in {self.runtime} against PyTorch on inputs {shapes}: "
                f"max |diff| = {self.max_abs_diff:.3g}"
            )
        return "\n".join(lines)


# ---- helpers ---------------------------------------------------------------------------------


def _input_size(model: nn.Module, input_size: Sequence[int] | None) -> tuple[int, int, int]:
    size = input_size if input_size is not None else getattr(model, "default_input_size", None)
    if size is None:
        raise ValueError(
            f"export: {type(model).__name__} has no default_input_size; pass input_size=(C, H, W)"
        )
    size = tuple(int(s) for s in size)
    if len(size) != 3 or min(size) < 1:
        raise ValueError(f"export: input_size must be (C, H, W) of positive ints, got {size}")
    if max(size[1:]) > MAX_IMAGE_SIZE:
        raise ValueError(
            f"export: input_size {size} is over the image-size limit: height and width must be "
            f"in [1, {MAX_IMAGE_SIZE}] (the training limit)"
        )
    return size  # type: ignore[return-value]


def opset_range(exporter: str) -> tuple[int, int]:
    """The ONNX opsets ``exporter`` (``"dynamo"`` or ``"torchscript"``) can write with the
    installed torch and onnx: ``(lowest, highest)``."""
    import onnx  # the export extra; the caller has checked it is there

    newest = onnx.defs.onnx_opset_version()
    if exporter == "torchscript":
        return TORCHSCRIPT_OPSETS[0], min(TORCHSCRIPT_OPSETS[1], newest)
    return MIN_DYNAMO_OPSET, min(MAX_DYNAMO_OPSET, newest)


def _check_opset(opset: int | None, exporter: str) -> None:
    if opset is None:
        return
    lo, hi = opset_range(exporter)
    if isinstance(opset, bool) or not isinstance(opset, int) or not lo <= opset <= hi:
        older = f" (or exporter='torchscript' for opsets below {lo})" * (exporter == "dynamo")
        raise ValueError(
            f"export_onnx: opset {opset!r} is not one the {exporter} exporter can write here; "
            f"choose an opset in [{lo}, {hi}]{older}"
        )


def _check_model(model: nn.Module) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"export: expected an nn.Module, got {type(model).__name__}")
    capturing = [p or type(model).__name__ for p, m in model.named_modules() if is_capturing(m)]
    if capturing:
        raise ExportError(
            f"export: capture_attention is active on {capturing[0]}; close the capture "
            "context before exporting"
        )


def _check_symbolic_size(model: nn.Module) -> None:
    """Refuse, before any work, a ``dynamic_size`` ONNX export of a model holding a block that
    declares it cannot be exported so (``fixed_size_export``: why); onnxruntime's check would
    find the wrong shapes only after exporting, and without the check the file would be wrong."""
    for path, m in model.named_modules():
        why = getattr(type(m), "fixed_size_export", None)
        if why:
            raise ExportError(
                f"export: {_block_label(path, m)} {why}, so a graph with "
                "symbolic height and width would give wrong shapes at other sizes; export for "
                "one spatial size (dynamic_size=False; input_size chooses it)"
            )


def _outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _outputs(o)]
    raise ExportError(f"export: cannot compare a model output of type {type(out).__name__}")


def _check_shapes(
    input_size: tuple[int, int, int], dynamic_batch: bool, dynamic_size: bool, batch: int
) -> list[tuple[int, ...]]:
    """Inputs the check runs: two batch sizes other than the traced one through a dynamic-batch
    graph (the traced one otherwise), and a second spatial size through a dynamic-size graph."""
    c, h, w = input_size
    batches = [1, batch + 1] if dynamic_batch else [batch]
    shapes: list[tuple[int, ...]] = [(b, c, h, w) for b in batches]
    if dynamic_size:
        shapes.append((batches[-1], c, h + h // 2 + 1, w + w // 4 + 1))
    return shapes


def check_tolerances(rtol: float, atol: float) -> None:
    """Refuse tolerances that would make the output check pass anything (NaN compares false,
    an infinite bound holds always) or fail everything (negative)."""
    for name, value in (("rtol", rtol), ("atol", atol)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _compare(
    run: Any, model: nn.Module, shapes: list[tuple[int, ...]], rtol: float, atol: float, what: str
) -> float:
    """Largest ``|run(x) - model(x)|`` over random inputs of ``shapes``; raises on a mismatch,
    and on outputs that are not finite (NaN compares as no difference). The tolerances were
    checked by the caller (:func:`check_tolerances`)."""
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for shape in shapes:
        x = torch.randn(shape, generator=gen)
        with torch.no_grad():
            ref = _outputs(model(x))
        try:
            got = run(x)
        except Exception as e:  # onnxruntime refuses to run the graph at this shape
            raise ExportError(
                f"{what}: the graph fails at input {shape}: {first_line(e, limit=300)}"
            ) from e
        if len(got) != len(ref):
            raise ExportError(f"{what}: {len(got)} outputs, PyTorch gives {len(ref)}")
        for i, (g, r) in enumerate(zip(got, ref)):
            g = torch.as_tensor(g)
            if g.shape != r.shape:
                raise ExportError(
                    f"{what}: output shape {tuple(g.shape)} for input {shape}, PyTorch gives "
                    f"{tuple(r.shape)}"
                )
            for side, t in (("PyTorch", r), ("the exported graph", g)):
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    raise ExportError(
                        f"{what}: {side} gives non-finite outputs (NaN or inf) for input "
                        f"{shape}: nothing to compare; check the network's weights (a "
                        "checkpoint saved after training diverged?)"
                    )
            diff = (g.to(r.dtype) - r).abs()
            worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
            # relative to the output's largest magnitude: float32 rounding of a sum is set by
            # the size of its terms, so an element-wise relative bound fails on small logits
            bound = atol + rtol * float(r.abs().max()) if r.numel() else atol
            if diff.numel() and float(diff.max()) > bound:
                exact = _float64_output(model, x, i)
                said = ""
                if exact is not None:
                    own = float((r.double() - exact).abs().max())
                    near = float((g.double() - exact).abs().max())
                    said = (
                        f"; from a float64 run of the model, the graph is {near:.3g} away and "
                        f"PyTorch's own float32 result {own:.3g}"
                        + (f" ({ROUNDING_NOTE})" if near <= 2 * own + bound else "")
                    )
                raise ExportError(
                    f"{what}: output differs from PyTorch for input {shape}: max |diff| = "
                    f"{float(diff.max()):.3g} > atol {atol:g} + rtol {rtol:g} * max|PyTorch|" + said
                )
    return worst


#: said of a failed check where the graph is no farther from a float64 run than twice PyTorch's
#: own float32 result (two float32 computations with other kernels)
ROUNDING_NOTE = (
    "the network is this sensitive to rounding at this input, as at a random initialisation: "
    "check a trained one"
)


def _float64_output(model: nn.Module, x: torch.Tensor, index: int) -> torch.Tensor | None:
    """Output ``index`` of a float64 copy of ``model`` at ``x`` (``None`` where the model does
    not run in float64), for the message of a failed check: a network at its random
    initialisation can be so sensitive to rounding that PyTorch's own float32 result moves by
    more than any fixed tolerance (mhsa_resnet56_cifar: 45.8 on outputs of 120)."""
    try:
        exact = copy.deepcopy(model).double()
        with torch.no_grad():
            return _outputs(exact(x.double()))[index].double()
    except Exception:  # an op without a float64 kernel: no exact reference
        return None


def _ort_session(path: Path) -> Any:
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError(
            "checking an ONNX export needs onnxruntime: pip install 'visattn[export]' "
            "(or pass check=False)"
        ) from e
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _ort_runner(session: Any) -> Any:
    name = session.get_inputs()[0].name

    def run(x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.from_numpy(o) for o in session.run(None, {name: x.numpy()})]

    return run


def _output_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a ``Path``, its parent folders created."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _require(*modules: str) -> None:
    """Fail early, with the install line, when an optional export dependency is missing (rather
    than blaming a block for it)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"ONNX export needs {', '.join(missing)}: pip install 'visattn[export]'")


def _pick_exporter(model: nn.Module, exporter: str, opset: int | None) -> str:
    if exporter not in EXPORTERS:
        raise ValueError(
            f"export_onnx: exporter must be one of {list(EXPORTERS)}, got {exporter!r}"
        )
    if exporter != "auto":
        if exporter == "dynamo" and isinstance(model, torch.jit.ScriptModule):
            raise ValueError("export_onnx: the dynamo exporter cannot export a ScriptModule")
        return exporter
    if isinstance(model, torch.jit.ScriptModule):
        return "torchscript"
    if opset is not None and opset < MIN_DYNAMO_OPSET:
        return "torchscript"
    return "dynamo"


def _write_onnx(
    model: nn.Module,
    x: torch.Tensor,
    path: Path,
    exporter: str,
    opset: int | None,
    dynamic_batch: bool,
    dynamic_size: bool,
) -> None:
    axes = _dynamic_axes(dynamic_batch, dynamic_size)
    if exporter == "dynamo":
        how: dict[str, Any] = {
            "dynamic_shapes": _dynamic_shapes(axes),
            "external_data": False,
            "verbose": False,
        }
    else:
        how = {
            "dynamic_axes": {
                INPUT_NAME: {a: AXIS_NAMES[a] for a in axes},
                OUTPUT_NAME: {0: AXIS_NAMES[0]},
            }
            if axes
            else None
        }
    torch.onnx.export(
        model,
        (x,),
        str(path),
        dynamo=exporter == "dynamo",
        opset_version=opset,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        **how,
    )


#: the names of an exported graph's symbolic dimensions, by input axis
AXIS_NAMES = {0: "batch", 2: "height", 3: "width"}


def _finish_onnx(
    path: Path,
    axes: list[int],
    model: nn.Module,
    size: tuple[int, int, int],
    metadata: Mapping[str, Any] | None,
) -> None:
    """Name the graph's symbolic dimensions after :data:`AXIS_NAMES` (every value that uses the
    input's symbol for an axis gets the name) and write ``metadata_props``."""
    import onnx  # the export extra, checked by the caller

    proto = onnx.load(str(path))
    graph = proto.graph
    rename = {}
    for axis in axes:
        dim = graph.input[0].type.tensor_type.shape.dim[axis]
        if dim.dim_param:
            rename[dim.dim_param] = AXIS_NAMES[axis]
    for value in [*graph.input, *graph.output, *graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in rename:
                dim.dim_param = rename[dim.dim_param]
    props = {
        "visattn_version": _version(),
        "model_name": str(getattr(model, "model_name", None) or type(model).__name__),
        # the blocks the name alone does not say (resnet20_cifar with CBAM, ...)
        "attention": json.dumps(getattr(model, "attention_placements", None) or []),
        "input_size": ",".join(map(str, size)),
        **normalisation_of(model),  # pretrained_cfg's mean and std, unless metadata has them
        **(metadata or {}),
    }
    del proto.metadata_props[:]
    for key, value in props.items():
        entry = proto.metadata_props.add()
        entry.key = str(key)
        entry.value = value if isinstance(value, str) else json.dumps(value)
    onnx.save(proto, str(path))


def _version() -> str:
    try:
        return importlib.metadata.version("visattn")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown"


def _dynamic_axes(dynamic_batch: bool, dynamic_size: bool) -> list[int]:
    """Input dimensions left symbolic: the batch (0) and/or height and width (2, 3)."""
    return ([0] if dynamic_batch else []) + ([2, 3] if dynamic_size else [])


def _dynamic_shapes(axes: list[int]) -> tuple[dict[int, Any]] | None:
    """``dynamic_shapes`` of :func:`torch.export.export` for a single input with ``axes``."""
    return ({a: torch.export.Dim.DYNAMIC for a in axes},) if axes else None


def _block_inputs(model: nn.Module, x: torch.Tensor) -> list[tuple[str, nn.Module, torch.Size]]:
    """Registered blocks of ``model`` with the input shape each one sees for ``x``."""
    found: dict[int, tuple[str, nn.Module, torch.Size]] = {}
    hooks = []
    for path, m in model.named_modules():
        if is_block(m):

            def hook(mod: nn.Module, args: tuple[Any, ...], p: str = path) -> None:
                if id(mod) not in found and args and isinstance(args[0], torch.Tensor):
                    found[id(mod)] = (p, mod, args[0].shape)

            hooks.append(m.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return list(found.values())


def _culprit(
    model: nn.Module, x: torch.Tensor, exporter: str, opset: int | None, dynamic_size: bool
) -> str | None:
    """Export and check each distinct registered block of ``model`` alone; describe the first
    one that fails (``None`` if every block passes on its own)."""
    try:
        blocks = _block_inputs(model, x)
    except Exception:  # the model does not even run: nothing to blame on a block
        return None
    seen: set[tuple[Any, ...]] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for path, blk, shape in blocks:
            key = (type(blk), blk.extra_repr(), tuple(shape))
            if key in seen:
                continue
            seen.add(key)
            bx = torch.randn(2, *shape[1:])
            f = Path(tmp) / "block.onnx"
            try:
                _write_onnx(blk, bx, f, exporter, opset, True, dynamic_size)
                run = _ort_runner(_ort_session(f))
                size = (shape[1], shape[2], shape[3]) if len(shape) == 4 else None
                if size is not None:
                    _compare(run, blk, _check_shapes(size, True, dynamic_size, 2), 1e-3, 1e-4, "")
            except ImportError:
                raise
            except Exception as e:
                return _blame(path, blk, e)
    return None


def _block_label(path: str, blk: nn.Module) -> str:
    """``block '<name>' at <path> (<class>)``, naming a block in export errors."""
    name = getattr(blk, "block_name", type(blk).__name__)
    where = f" at {path}" if path else ""
    return f"block '{name}'{where} ({type(blk).__name__})"


def _blame(path: str, blk: nn.Module, e: BaseException) -> str:
    """``block '<name>' at <path> (<class>): <first line of e>``, for export errors."""
    return f"{_block_label(path, blk)}: {first_line(e, limit=300)}"


def _fail(
    what: str,
    e: BaseException,
    model: nn.Module,
    x: torch.Tensor,
    exporter: str,
    opset: int | None,
    dynamic_size: bool,
) -> ExportError:
    culprit = _culprit(model, x, exporter, opset, dynamic_size)
    if culprit is not None:
        return ExportError(f"{what} with the {exporter} exporter: {culprit}")
    return ExportError(f"{what} with the {exporter} exporter: {first_line(e, limit=300)}")


# ---- public ----------------------------------------------------------------------------------


def _opset_of(path: Path) -> int | None:
    """The ONNX (default-domain) opset the file at ``path`` was written with."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _check_in_onnxruntime(
    path: Path,
    model: nn.Module,
    shapes: list,
    tolerance: tuple[float, float],
    traced: tuple,
) -> tuple[float, str]:
    """Compare onnxruntime's outputs with PyTorch's at ``shapes``; returns the largest
    difference and the runtime's name. A mismatch raises :class:`ExportError` naming the first
    attention block at fault (``traced``: the example input, exporter, opset, dynamic size)."""
    import onnxruntime as ort

    run = _ort_runner(_ort_session(path))
    try:
        worst = _compare(run, model, shapes, *tolerance, f"{path} in onnxruntime")
    except ExportError as e:
        culprit = _culprit(model, *traced)
        if culprit:
            more = f"; first failing block: {culprit}"
        elif "TopK" in _op_types(path):
            more = f"; {TOPK_NOTE}"
        else:
            more = ""
        raise ExportError(f"{e}{more}") from None
    return worst, f"onnxruntime {ort.__version__} (CPUExecutionProvider)"


#: why a graph with a discrete choice can differ from PyTorch though every block exports right
TOPK_NOTE = (
    "every attention block passes alone, and the graph makes a discrete choice (TopK, such as "
    "BRA's region routing), a likely cause: where two scores lie within float32 rounding of "
    "each other, onnxruntime may choose the other one and the output moves by a step, though "
    "the file computes the model where its scores are apart. Check it on your own inputs "
    "(check=False skips this check)"
)


def _op_types(path: Path) -> set[str]:
    """The operator types of the graph in the ONNX file at ``path``, its functions included."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    return {n.op_type for n in nodes}


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike[str],
    input_size: Sequence[int] | None = None,
    *,
    dynamic_batch: bool = True,
    dynamic_size: bool = False,
    opset: int | None = None,
    exporter: str = "auto",
    check: bool = True,
    batch_size: int = 2,
    rtol: float = 1e-3,
    atol: float = 1e-4,
    metadata: Mapping[str, Any] | None = None,
) -> ExportReport:
    """Export ``model`` (in eval mode) to an ONNX file and check it in onnxruntime.

    The file's symbolic dimensions are named ``batch``, ``height`` and ``width`` (the dynamo
    exporter's own names are symbols such as ``s77``), and its ``metadata_props`` record the
    visattn version, the model's name (``model.model_name`` or its class), the input size
    (``C,H,W``) and ``metadata`` (keys such as ``mean``, ``std`` and ``class_names``; lists are
    written as JSON), for a runtime that must preprocess as training did.

    Args:
        model: the network; it is put in eval mode for the export and restored afterwards.
        path: the ``.onnx`` file to write (parent folders are created; weights are stored inside).
        input_size: ``(C, H, W)`` of one image; default ``model.default_input_size``.
        dynamic_batch: the batch is a symbolic dimension of the graph (checked at two batch
            sizes other than the traced ``batch_size``); otherwise fixed to ``batch_size``.
        dynamic_size: height and width are symbolic too (checked at a second spatial size).
        opset: ONNX opset; ``None`` takes the exporter's default.
        exporter: ``"auto"`` | ``"dynamo"`` | ``"torchscript"`` (see the module docstring).
        check: run the file in onnxruntime (CPUExecutionProvider) on random inputs and compare.
        batch_size: batch of the example input the graph is traced with.
        rtol, atol: the check passes when ``|onnx - torch| <= atol + rtol * max|torch|``
            everywhere (``max`` over the output tensor).
        metadata: more ``metadata_props`` entries (a value that is not a string is written as
            JSON); ``mean``/``std`` default to the model's ``pretrained_cfg``'s.

    Returns:
        An :class:`ExportReport` with the largest absolute difference found.

    Raises:
        ExportError: the export failed (the message names the attention block at fault when one
            is), onnxruntime's outputs differ from PyTorch's, or ``dynamic_size`` was asked of a
            model with a block that pads its maps to a multiple of a block size (halo, bat;
            refused before any work).
        ImportError: onnx (and onnxscript for the dynamo exporter, onnxruntime for the check)
            is not installed.
    """
    check_tolerances(rtol, atol)
    size, exp = _check_onnx_request(
        model, input_size, exporter, opset, check, batch_size, dynamic_batch, dynamic_size
    )
    out = _output_file(path)
    with eval_mode(model):
        x = torch.randn(batch_size, *size)
        try:
            _write_onnx(model, x, out, exp, opset, dynamic_batch, dynamic_size)
        except Exception as e:
            raise _fail("export_onnx failed", e, model, x, exp, opset, dynamic_size) from e
        _finish_onnx(out, _dynamic_axes(dynamic_batch, dynamic_size), model, size, metadata)
        worst, shapes, runtime = float("nan"), [], "not checked"
        if check:
            shapes = _check_shapes(size, dynamic_batch, dynamic_size, batch_size)
            worst, runtime = _check_in_onnxruntime(
                out, model, shapes, (rtol, atol), (x, exp, opset, dynamic_size)
            )
    return ExportReport(
        path=out,
        format="onnx",
        exporter=exp,
        opset=_opset_of(out),
        input_size=size,
        dynamic_batch=dynamic_batch,
        dynamic_size=dynamic_size,
        max_abs_diff=worst,
        checked=tuple(shapes),
        runtime=runtime,
    )


def normalisation_of(model: nn.Module) -> dict[str, list[float]]:
    """``{"mean": [...], "std": [...]}`` from ``model.pretrained_cfg`` (timm's convention, which
    visattn's models follow) where it holds both, else ``{}``."""
    cfg = getattr(model, "pretrained_cfg", None)
    if not isinstance(cfg, Mapping) or cfg.get("mean") is None or cfg.get("std") is None:
        return {}
    return {"mean": [float(m) for m in cfg["mean"]], "std": [float(v) for v in cfg["std"]]}


def _check_onnx_request(
    model: nn.Module,
    input_size: Sequence[int] | None,
    exporter: str,
    opset: int | None,
    check: bool,
    batch_size: int,
    dynamic_batch: bool,
    dynamic_size: bool,
) -> tuple[tuple[int, int, int], str]:
    """The input size and exporter of an :func:`export_onnx` call, every option checked before
    any work (the packages it needs, the opset's range, the batch, a symbolic size that a block
    cannot hold)."""
    _check_model(model)
    if dynamic_size:
        _check_symbolic_size(model)
    size = _input_size(model, input_size)
    exp = _pick_exporter(model, exporter, opset)
    _require(
        "onnx", *(["onnxscript"] if exp == "dynamo" else []), *(["onnxruntime"] if check else [])
    )
    _check_opset(opset, exp)
    if batch_size < 1 or (dynamic_batch and batch_size < 2):
        raise ValueError(
            f"export_onnx: batch_size must be >= 2 for a dynamic batch (1 would be specialised), "
            f"got {batch_size}"
        )
    return size, exp


def export_program(
    model: nn.Module,
    path: str | os.PathLike[str],
    input_size: Sequence[int] | None = None,
    *,
    dynamic_batch: bool = True,
    dynamic_size: bool = False,
    check: bool = True,
    batch_size: int = 2,
    rtol: float = 1e-5,
    atol: float = 1e-5,
) -> ExportReport:
    """Export ``model`` (in eval mode) with :func:`torch.export.export` and save the program as
    ``.pt2`` (:func:`torch.export.save`), for deployment that stays in PyTorch; reload it with
    ``torch.export.load(path).module()``.

    The check reloads the file and compares it with the model on random inputs (two batch sizes
    with ``dynamic_batch``, a second spatial size with ``dynamic_size``). Arguments and errors as
    for :func:`export_onnx`.
    """
    _check_model(model)
    check_tolerances(rtol, atol)
    size = _input_size(model, input_size)
    out = _output_file(path)
    with eval_mode(model):
        x = torch.randn(batch_size, *size)
        dims = _dynamic_shapes(_dynamic_axes(dynamic_batch, dynamic_size))
        try:
            program = torch.export.export(model, (x,), dynamic_shapes=dims)
        except Exception as e:
            culprit = _culprit_program(model, x)
            raise ExportError(
                f"export_program failed: {culprit or first_line(e, limit=300)}"
            ) from e
        torch.export.save(program, str(out))
        worst, shapes = float("nan"), []
        if check:
            loaded = torch.export.load(str(out)).module()
            shapes = _check_shapes(size, dynamic_batch, dynamic_size, batch_size)

            def run(t: torch.Tensor) -> list[torch.Tensor]:
                with torch.no_grad():
                    return _outputs(loaded(t))

            worst = _compare(run, model, shapes, rtol, atol, f"{out} reloaded")
    return ExportReport(
        path=out,
        format="pt2",
        exporter="torch.export",
        opset=None,
        input_size=size,
        dynamic_batch=dynamic_batch,
        dynamic_size=dynamic_size,
        max_abs_diff=worst,
        checked=tuple(shapes),
        runtime=f"torch {torch.__version__}" if check else "not checked",
    )


def _culprit_program(model: nn.Module, x: torch.Tensor) -> str | None:
    try:
        blocks = _block_inputs(model, x)
    except Exception:
        return None
    for path, blk, shape in blocks:
        try:
            torch.export.export(blk, (torch.randn(2, *shape[1:]),))
        except Exception as e:
            return _blame(path, blk, e)
    return None
