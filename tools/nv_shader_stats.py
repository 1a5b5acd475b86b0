"""What NVIDIA's Vulkan driver made of kernelwright's kernels, read from its shader disk
cache (the `shadercache` task of tools/h200_session.sh keeps it): per compiled
pipeline, the instruction mix of its machine code and the highest register an FFMA
names, a lower bound on the registers per invocation (more than 128 with 256
invocations: one workgroup per SM).

    python tools/nv_shader_stats.py DIR [--loop] [--sass OUT]

The cache's entries are zstd frames (the `zstd` command decompresses them). The
machine code is found, not parsed: SM90 instructions are 16 bytes, their opcode in the
low 12 bits, so the alignment that decodes the most FFMA opcodes is taken; FFMA's
register operands sit in bytes 2, 3, 4 and 8, and bits 105-108 are the compiler's
stall count. A heuristic decode, good for counting and comparing variants. --loop prints
the instructions around the FFMA block (the K loop of a matmul) with their stall counts.
--sass OUT writes each pipeline's code as raw SM90 instructions and, where nvdisasm is
found, its full disassembly: `nvdisasm -b SM90` reads raw instructions, so the data
bytes around the code come out as junk and the code itself exactly (nvdisasm is on the
lent H200 in /usr/local/cuda/bin, and `pip install nvidia-cuda-nvdisasm` puts one in a
virtual environment here, under nvidia/cu13/bin)."""

from __future__ import annotations

import argparse
import collections
import os
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


def machine_code(code: bytes) -> bytes:
    """The frame from the alignment that decodes the most FFMA opcodes, cut to whole
    16-byte instructions (data bytes around the code come with it)."""
    def ffma_count(off: int) -> int:
        return sum(1 for j in range(off, len(code) - 15, 16)
                   if int.from_bytes(code[j:j + 2], "little") & 0xFFF == 0x223)
    off = max(range(16), key=ffma_count)
    return code[off:off + (len(code) - off) // 16 * 16]


def instructions(code: bytes) -> list[int]:
    raw = machine_code(code)
    return [int.from_bytes(raw[j:j + 16], "little") for j in range(0, len(raw), 16)]


def write_sass(raw: bytes, stem: Path) -> Path | None:
    """`stem`.sm90.bin (the raw instructions) and, where nvdisasm is found ($NVDISASM,
    PATH, /usr/local/cuda/bin; `pip install nvidia-cuda-nvdisasm` has one), its
    disassembly `stem`.sass; returns the listing's path, or None without nvdisasm."""
    binary = stem.parent / f"{stem.name}.sm90.bin"
    binary.write_bytes(raw)
    tool = (os.environ.get("NVDISASM") or shutil.which("nvdisasm")
            or shutil.which("nvdisasm", path="/usr/local/cuda/bin"))
    if tool is None:
        return None
    listing = subprocess.run([tool, "-b", "SM90", "-c", str(binary)], capture_output=True,
                             text=True)
    out = stem.parent / f"{stem.name}.sass"
    out.write_text(listing.stdout + listing.stderr)
    return out


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
    ap.add_argument("--sass", type=Path, metavar="OUT",
                    help="write each pipeline's machine code to OUT, disassembled where "
                         "nvdisasm is found")
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
            if args.sass:
                args.sass.mkdir(parents=True, exist_ok=True)
                stem = args.sass / f"{path.stem}@{start}"
                listing = write_sass(machine_code(code), stem)
                print(f"  machine code: {stem}.sm90.bin"
                      + (f", disassembly: {listing}" if listing else " (no nvdisasm found)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
