#!/usr/bin/env bash
# lerobot's environment (env.sh: Python 3.12, lerobot 0.6.1) plus the peer loader the reader bench compares
# against, lerobot-lancedb 0.3.1 (it only adds packages: lancedb and its clients, no pin of lerobot's
# moves). Kept out of env.sh, whose commands key that 5 GB venv. stdout is only the python path:
#   python scripts/bench/bench_reader.py --lerobot-python "$(scripts/lerobot/peers.sh)" ...
set -euo pipefail
cd "$(dirname "$0")/../.."
PEER_PIN='lerobot-lancedb==0.3.1'
PY=$(scripts/lerobot/env.sh)
VENV=$(dirname "$(dirname "$PY")")
exec 8>"$VENV.build-lock"  # env.sh's lock: one build or install in this venv at a time
flock 8
if ! "$PY" -c 'import lerobot_lancedb' >/dev/null 2>&1; then
  echo "[lerobot/peers.sh] installing $PEER_PIN into $VENV" >&2
  "$VENV/bin/pip" install -q "$PEER_PIN" >&2
fi
echo "$PY"
