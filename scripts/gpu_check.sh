#!/usr/bin/env bash
# One command that proves every GPU path of fastload (see scripts/gpu_check.py):
#
#   bash scripts/gpu_check.sh --fetch WHEELDIR          where the registry is reachable
#   bash scripts/gpu_check.sh [--wheels WHEELDIR] OUTDIR on the GPU machine (every part: over 30
#                                                        minutes; --only "gpu path" --budget 570
#                                                        --pack FILE fits one call, see docs/gpu-check.md)
#   bash scripts/gpu_check.sh --dry-run OUTDIR          anywhere: GPU parts skipped, the rest run
#
# DALI (199 MB) travels in parts of 56 MB, one device call each (see scripts/dali_parts.py):
#   bash scripts/gpu_check.sh --fetch-dali DIR           where the registry is reachable
#   bash scripts/gpu_check.sh --dali-part DIR/dali.partNNN    on the GPU machine, once per part
#   bash scripts/gpu_check.sh --wheels WHEELDIR --dali-finish OUTDIR   then DALI's tests and rows
#
# It uses the Python that has torch (PYTHON, else .venv/bin/python, else python3) and prints
# one line per part: passed, failed or skipped with the reason; OUTDIR gets each part's output,
# summary.txt and summary.json. Exit status: 0 when nothing failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
exec "$python" scripts/gpu_check.py "$@"
