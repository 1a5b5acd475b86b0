#!/usr/bin/env python3
"""Digest each bundled problem's full-size plan (kernel names, grids, WGSL without its
comments), to tell which problems a compiler change touches (their stored GPU results
must be measured again; the others' plans are the same kernels).

    python tools/plan_digest.py OUT.json [--suite DIR] [--size full] [--only PREFIX,...]
    python tools/plan_digest.py --compare OLD.json NEW.json [--args ARGS.txt]

Runs on the CPU (no GPU work: plans only, tuning off, the H200's waves unless --waves
says otherwise); inputs are zeros of the problem's shapes. Run it with each compiler
(e.g. an old commit through `git worktree` and PYTHONPATH=that/src) and --compare the
two files: it prints the problems whose plans differ, and --args writes them as
`kernelwright bench` arguments (`--only NAME` each) for `BENCH_ARGS="$(cat ARGS.txt)"
tools/h200_session.sh suite`. Comments and blank lines of the WGSL do not count: a
template whose comments change makes the same kernels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import warnings
from pathlib import Path


def code(source: str) -> str:
    """The WGSL without comments, trailing spaces and blank lines."""
    lines = (re.sub(r"//.*", "", line).rstrip() for line in source.splitlines())
    return "\n".join(line for line in lines if line)


def digest_suite(suite: str | None, size: str, only: list[str]) -> dict[str, str]:
    os.environ["KERNELWRIGHT_TUNE"] = "off"
    warnings.filterwarnings("ignore")
    import torch

    from kernelwright.compiler import plan_module
    from kernelwright.harness import problems

    if suite is None:
        from kernelwright import suite as bundled
        suite = bundled.__path__[0]
    out = {}
    for p in problems.discover(suite):
        if only and not any(p.name.startswith(x) for x in only):
            continue
        try:
            loaded = problems.load(p, size)
            model = loaded.build_model(0)
            ex = [torch.zeros(x.shape, dtype=x.dtype) if isinstance(x, torch.Tensor) else x
                  for x in loaded.inputs(0, "meta")]
            plan = plan_module(model, ex, "strict")
            h = hashlib.sha256()
            for k in plan.kernels:
                h.update(f"{k.name}|{k.grid}|{code(k.source)}".encode())
            out[p.name] = h.hexdigest()[:16]
        except Exception as exc:  # noqa: BLE001 - recorded per problem
            out[p.name] = f"error {type(exc).__name__}: {str(exc)[:200]}"
        print(p.name, out[p.name], flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--suite", default=None)
    ap.add_argument("--size", default="full")
    ap.add_argument("--only", default="")
    ap.add_argument("--waves", default="264,132",
                    help="the waves to plan with (KERNELWRIGHT_WAVES: 'WIDE,PLAIN' slots or "
                    "'off'); the default is the H200's, as measured there (tune/waves.py)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--args", default=None, help="with --compare: write the changed "
                    "problems as kernelwright bench arguments to this file")
    args = ap.parse_args()
    if args.compare:
        old, new = (json.loads(Path(f).read_text()) for f in args.compare)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        for name in changed:
            print(name, old.get(name, "-"), "->", new.get(name, "-"))
        if args.args:
            Path(args.args).write_text(" ".join(f"--only {name}" for name in changed) + "\n")
        print(f"{len(changed)} of {len(set(old) | set(new))} plans differ", file=sys.stderr)
        return 0
    if not args.out:
        ap.error("OUT.json is required unless --compare")
    os.environ["KERNELWRIGHT_WAVES"] = args.waves
    digests = digest_suite(args.suite, args.size, [x for x in args.only.split(",") if x])
    Path(args.out).write_text(json.dumps(digests, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
