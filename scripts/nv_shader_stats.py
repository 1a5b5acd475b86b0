"""What NVIDIA's Vulkan driver made of kernelwright's kernels, read from its shader disk
cache (the `shadercache` task of scripts/h200_session.sh keeps it): per compiled
pipeline, the instruction mix of its machine code and the highest register an FFMA
names, a lower bound on the registers per invocation (more than 128 with 256
invocations: one workgroup per SM).

    python scripts/nv_shader_stats.py DIR [--loop]

The cache's entries are zstd frames (the `zstd` command decompresses them). The
machine code is found, not parsed: SM90 instructions are 16 bytes, their opcode in the
low 12 bits, so the alignment that decodes the most FFMA opcodes is taken; FFMA's
register operands sit in bytes 2, 3, 4 and 8, and bits 105-108 are the compiler's
stall count. A heuristic decode, good for counting and comparing variants; for a real
disassembly nvdisasm would need the exact code range. --loop prints the instructions
around the FFMA block (the K loop of a matmul) with their stall counts."""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
OPCODES = {0x223: "FFMA", 0x984: "LDS", 0x388: "STS", 0x981: "LDG", 0x986: "STG",
           0xB1D: "BAR", 0x947: "BRA", 0x94D: "EXIT", 0x202: "MOV", 0x224: "IMAD.MOV"}
MIN_CODE_BYTES = 20000  # smaller frames are metadata


def frames(data: bytes):
    """The decompressed zstd frames of one cache file."""
    start = data.find(ZSTD_MAGIC)
    while start >= 0:
        out = subprocess.run(["zstd", "-d", "-q", "-c"], input=data[start:],
                             capture_output=True).stdout
        if out:
            yield start, out
        start = data.find(ZSTD_MAGIC, start + 4)


def instructions(code: bytes) -> list[int]:
    def ffma_count(off: int) -> int:
        return sum(1 for j in range(off, len(code) - 15, 16)
                   if int.from_bytes(code[j:j + 2], "little") & 0xFFF == 0x223)
    off = max(range(16), key=ffma_count)
    return [int.from_bytes(code[j:j + 16], "little") for j in range(off, len(code) - 15, 16)]


def stats(words: list[int]) -> dict:
    ops = collections.Counter(w & 0xFFF for w in words)
    regs = {(w >> s) & 0xFF for w in words if w & 0xFFF == 0x223 for s in (16, 24, 32, 64)}
    regs.discard(0xFF)  # RZ
    out = {name: ops[code] for code, name in OPCODES.items()}
    out["words"] = len(words)  # 16-byte words of the frame, code and data
    out["max_ffma_register"] = max(regs, default=-1)
    return out


def loop_listing(words: list[int], margin: int = 40) -> str:
    ffma = [i for i, w in enumerate(words) if w & 0xFFF == 0x223]
    if not ffma:
        return "(no FFMA)"
    lines = []
    for i in range(max(0, ffma[0] - margin), min(len(words), ffma[-1] + margin)):
        w = words[i]
        name = OPCODES.get(w & 0xFFF, hex(w & 0xFFF))
        lines.append(f"{i:6d} {name:9s} stall {(w >> 105) & 0xF:2d}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--loop", action="store_true")
    args = ap.parse_args()
    if shutil.which("zstd") is None:
        print("nv_shader_stats: needs the zstd command (apt install zstd)", file=sys.stderr)
        return 2
    files = sorted(args.dir.rglob("*.bin"))
    if not files:
        print(f"nv_shader_stats: no cache files (*.bin) under {args.dir}", file=sys.stderr)
        return 1
    for path in files:
        for start, code in frames(path.read_bytes()):
            if len(code) < MIN_CODE_BYTES:
                continue
            words = instructions(code)
            s = stats(words)
            print(f"{path.relative_to(args.dir)}@{start}: " + ", ".join(
                f"{k} {v}" for k, v in s.items() if v))
            if args.loop:
                print(loop_listing(words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
