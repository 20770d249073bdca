"""The GGUF dtype converter (codedojo.inference.gguf_convert) on a small file written here with the gguf
package: metadata copied, quantised tensors dequantised exactly, BF16 rounding as ggml does it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codedojo.inference.gguf_convert import convert_gguf, peer_files

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType

# Values each format stores exactly: a Q4_1 block of 32 is min + d * q with q in 0..15 (here min -1, max
# 0.875, so d = 1/8); a Q8_0 block is d * q with d = max |x| / 127 (here 63.5 / 127 = 1/2) and integer q;
# both scales are exact in fp16.
Q4_1_ROW = [-1.0 + 0.125 * (j % 16) for j in range(32)]
Q8_0_ROW = [63.5] + [0.5 * (j - 16) for j in range(1, 32)]
# An F32 tensor with bf16 rounding cases: 1 + 2^-9 rounds down to 1; 1 + 3 * 2^-9 is halfway between
# 1 + 2^-8 and 1 + 2^-7 and rounds to the even one, 1 + 2^-7; -2.5 and 3.0 are exact.
F32_ROW = [1.0 + 2**-9, 1.0 + 3 * 2**-9, -2.5, 3.0]
BF16_ROW = [1.0, 1.0 + 2**-7, -2.5, 3.0]


def write_source(path: Path) -> Path:
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_string("tokenizer.chat_template", "{{ messages }}")
    writer.add_token_list(["<a>", "<b>", "c"])
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_1))
    writer.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(np.array([Q4_1_ROW] * 2, np.float32), Q.Q4_1),
                      raw_dtype=Q.Q4_1)
    writer.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(np.array([Q8_0_ROW] * 3, np.float32), Q.Q8_0),
                      raw_dtype=Q.Q8_0)
    writer.add_tensor("token_embd.weight", np.array([F32_ROW, F32_ROW[::-1]], np.float32))
    writer.add_tensor("output_norm.weight", np.array(F32_ROW, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tensors(path: Path) -> dict[str, tuple[object, np.ndarray]]:
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
        out[t.name] = (t.tensor_type, values)
    return out


def test_f32_copy_holds_the_dequantised_values_and_the_metadata(tmp_path: Path) -> None:
    dest = convert_gguf(write_source(tmp_path / "src.gguf"), tmp_path / "f32.gguf", "f32")
    out = tensors(dest)
    assert {name: kind for name, (kind, _) in out.items()} == {
        "blk.0.ffn_up.weight": Q.F32, "blk.0.attn_q.weight": Q.F32, "token_embd.weight": Q.F32,
        "output_norm.weight": Q.F32}
    assert out["blk.0.ffn_up.weight"][1].tolist() == [Q4_1_ROW] * 2
    assert out["blk.0.attn_q.weight"][1].tolist() == [Q8_0_ROW] * 3
    np.testing.assert_array_equal(out["token_embd.weight"][1], np.array([F32_ROW, F32_ROW[::-1]], np.float32))
    fields = gguf.GGUFReader(dest).fields
    assert fields["general.architecture"].contents() == "llama"
    assert fields["llama.context_length"].contents() == 128
    assert fields["llama.attention.layer_norm_rms_epsilon"].contents() == pytest.approx(1e-5)
    assert fields["tokenizer.chat_template"].contents() == "{{ messages }}"
    assert fields["tokenizer.ggml.tokens"].contents() == ["<a>", "<b>", "c"]
    assert fields["general.file_type"].contents() == int(gguf.LlamaFileType.ALL_F32)


def test_bf16_copy_rounds_matrices_and_keeps_vectors_and_named_tensors_f32(tmp_path: Path) -> None:
    source = write_source(tmp_path / "src.gguf")
    out = tensors(convert_gguf(source, tmp_path / "bf16.gguf", "bf16"))
    assert out["blk.0.ffn_up.weight"][0] == out["token_embd.weight"][0] == Q.BF16
    assert out["output_norm.weight"][0] == Q.F32  # 1-D: stays F32
    assert out["blk.0.ffn_up.weight"][1].tolist() == [Q4_1_ROW] * 2  # exact in bf16 too
    assert out["token_embd.weight"][1].tolist() == [BF16_ROW, BF16_ROW[::-1]]
    np.testing.assert_array_equal(out["output_norm.weight"][1], np.array(F32_ROW, np.float32))
    kept = tensors(convert_gguf(source, tmp_path / "bf16-keep.gguf", "bf16", keep_f32={"token_embd.weight"}))
    assert kept["token_embd.weight"][0] == Q.F32 and kept["blk.0.attn_q.weight"][0] == Q.BF16
    assert gguf.GGUFReader(tmp_path / "bf16.gguf").fields["general.file_type"].contents() == int(
        gguf.LlamaFileType.MOSTLY_BF16)


def test_peer_files_are_made_once(tmp_path: Path) -> None:
    source = write_source(tmp_path / "Tiny-Model.Q4_1.gguf")
    files = peer_files(source, tmp_path / "peer")
    assert {k: p.name for k, p in files.items()} == {"f32": "Tiny-Model.F32.gguf", "bf16": "Tiny-Model.BF16.gguf"}
    assert tensors(files["bf16"])["token_embd.weight"][0] == Q.F32  # the embeddings stay F32, as in the engine
    stamp = files["f32"].stat().st_mtime_ns
    assert peer_files(source, tmp_path / "peer")["f32"].stat().st_mtime_ns == stamp
