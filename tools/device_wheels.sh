#!/usr/bin/env bash
# Fills .device/ for tools/h200_session.sh on a fresh checkout (the GPU machine has no
# network): the shared device-prep (wgpu and the Vulkan loader) with wgpudawn (Dawn's
# runtime: the coop, accelerated and runtimes tasks), then transformers and its
# dependencies into .device/tf (generate, models, halfmodels, the training references),
# for that machine's Python 3.12, without numpy and hf_xet (the machine has numpy; no
# downloads there). About 40 MB, under the 64 MiB a call carries.
#
#   bash tools/device_wheels.sh      # then each call: carry [".device"], and begin with
#                                    # source .device/env.sh && bash tools/h200_session.sh ...
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
../shared/tools/device-prep "wgpudawn==0.32.0.4"
rm -rf .device/tf && mkdir -p .device/tf
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .device/tf "transformers>=5.10,<6" 2>&1 \
  | grep -v "^WARNING: Location" || true
rm -f .device/tf/numpy-* .device/tf/hf_xet-*
ls .device/tf/transformers-*.whl >/dev/null  # the download must have brought transformers
du -sh .device
