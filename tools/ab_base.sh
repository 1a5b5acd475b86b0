#!/usr/bin/env bash
# Pack the compiler of commit REV (its src/) as .ab_base.tar.gz for the `ab` task of
# tools/h200_session.sh, which measures it and the working tree in the same device
# call. The file is ignored by git: pass it to the device with carry [".device",
# ".ab_base.tar.gz"].
#
#   tools/ab_base.sh REV        e.g. tools/ab_base.sh HEAD~1
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: tools/ab_base.sh REV}
git rev-parse --verify -q "$rev^{commit}" > /dev/null || { echo "ab_base: no commit $rev" >&2; exit 2; }
full=$(git rev-parse "$rev")
# the commit's id travels inside the archive (as AB_BASE_REV), with its src/
git archive --format=tar --add-virtual-file="AB_BASE_REV:$full" "$full" src \
  | gzip -9 > .ab_base.tar.gz
echo "packed src/ of $full into .ab_base.tar.gz ($(du -h .ab_base.tar.gz | cut -f1))"
