"""tools/nv_shader_stats.py: the instruction mix and registers of machine code found in
a shader cache file (zstd frames among other bytes)."""

from __future__ import annotations

import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "nv_shader_stats.py"


def _word(opcode: int, regs=(0, 0, 0, 0), stall: int = 1) -> bytes:
    """A 16-byte SM90-style instruction: opcode in bits 0-11, registers in bytes 2, 3, 4
    and 8, the stall count in bits 105-108."""
    w = opcode | regs[0] << 16 | regs[1] << 24 | regs[2] << 32 | regs[3] << 64 | stall << 105
    return w.to_bytes(16, "little")


@pytest.mark.skipif(shutil.which("zstd") is None, reason="needs the zstd command")
def test_counts_ffma_and_its_highest_register(tmp_path, capsys) -> None:
    ns = runpy.run_path(str(SCRIPT))
    # 3 bytes of header put the code off 16-byte alignment within the frame
    code = b"\x01\x02\x03" + b"".join(
        [_word(0x984)] * 2 + [_word(0x223, (10, 20, 30, 10))] * 300
        + [_word(0x223, (150, 2, 255, 150))] + [_word(0xB1D), _word(0x94D)]) + bytes(40000)
    frame = subprocess.run(["zstd", "-q", "-c"], input=code, capture_output=True,
                           check=True).stdout
    cache = tmp_path / "GLCache" / "x"
    cache.mkdir(parents=True)
    (cache / "a.bin").write_bytes(b"CDVN header" + frame + b"trailer")
    words = ns["instructions"](code)
    stats = ns["stats"](words)
    assert (stats["FFMA"], stats["LDS"], stats["BAR"], stats["EXIT"]) == (301, 2, 1, 1)
    assert stats["max_ffma_register"] == 150  # RZ (255) is not a register
    assert "FFMA" in ns["loop_listing"](words)
    argv, sys.argv = sys.argv, ["nv_shader_stats.py", str(tmp_path)]
    try:
        assert ns["main"]() == 0
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "a.bin@11: FFMA 301, LDS 2" in out and "max_ffma_register 150" in out


def test_sass_writes_whole_instructions_from_the_code(tmp_path, monkeypatch) -> None:
    """--sass: the machine code from its first instruction, cut to whole 16-byte words;
    without nvdisasm no listing (and no error)."""
    ns = runpy.run_path(str(SCRIPT))
    body = b"".join([_word(0x223, (1, 2, 3, 1))] * 50 + [_word(0x94D)])
    code = b"\x01\x02\x03" + body + b"\x09" * 7
    raw = ns["machine_code"](code)
    assert raw == body  # from the first instruction; the 7 trailing bytes are no word
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("NVDISASM", raising=False)
    found = shutil.which("nvdisasm", path="/usr/local/cuda/bin")
    listing = ns["write_sass"](raw, tmp_path / "k@0")
    assert (tmp_path / "k@0.sm90.bin").read_bytes() == body
    assert (listing is None) == (found is None)
