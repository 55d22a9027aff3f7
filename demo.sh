#!/usr/bin/env bash
# make demo: for now, runs models from the zoo through the kernel and prints what they do.
set -euo pipefail
cd "$(dirname "$0")"
echo "IDunno demo: not yet written"
