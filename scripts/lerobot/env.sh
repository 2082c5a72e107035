#!/usr/bin/env bash
# lerobot's own environment for `lrs train` checks: Python 3.12, lerobot[training]==0.6.1 (torch < 2.12,
# accelerate), and this checkout installed the way the README tells users (`pip install /path/to/lrs`).
# diffusers (lerobot's `diffusion` extra) is there for the diffusion policy of train_compare.py.
# It never goes in the project's .venv. Cached between runs under ~/.cache/lrs, keyed by the lerobot pin,
# the Python version and this script; lrs itself is reinstalled from the checkout when its files changed.
# Logs go to stderr and to the venv's setup.log; stdout is only the python path:
#   PY=$(scripts/lerobot/env.sh) && "$PY" scripts/lerobot/train_check.py
# Env: LRS_PYTHON312 (a Python 3.12; default python3.12 on PATH, else pyenv's), LRS_LEROBOT_VENV (the venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
LEROBOT_PIN='lerobot[training,diffusion]==0.6.1'
log() { echo "[lerobot/env.sh] $*" >&2; }

is312() { [ -n "$1" ] && "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; }
PY312=""
# A pyenv shim for python3.12 exists even where it cannot run, so each candidate is tried.
for candidate in "${LRS_PYTHON312:-}" "$(command -v python3.12 || true)" \
    $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python 2>/dev/null | sort -rV); do
  if is312 "$candidate"; then PY312=$candidate; break; fi
done
if [ -z "$PY312" ]; then
  log "no Python 3.12 (lerobot 0.6.1 needs it): install python3.12 or set LRS_PYTHON312=/path/to/python3.12"
  exit 1
fi
# The key: the pin, the Python, and this script's commands (a comment edited does not rebuild 5 GB).
key=$(printf '%s\n' "$LEROBOT_PIN" "$("$PY312" -V 2>&1)" "$(grep -v '^[[:space:]]*#' "$0")" | sha256sum | cut -c1-12)
VENV=${LRS_LEROBOT_VENV:-$HOME/.cache/lrs/lerobot-venv-$key}
works() { "$VENV/bin/python" -c 'import accelerate, lerobot.scripts.lerobot_train' >/dev/null 2>&1; }

# One build at a time: a second job (two test runs, a benchmark beside a test) waits here for the first
# job's build, then finds the venv working, instead of removing it under the first job's pip.
mkdir -p "$(dirname "$VENV")"
exec 8>"$VENV.build-lock"
flock 8
if ! works; then
  if [ -e "$VENV" ]; then  # replace only a broken venv, never an arbitrary directory
    [ -f "$VENV/pyvenv.cfg" ] || { log "$VENV exists and is not a venv; refusing"; exit 1; }
    rm -rf "$VENV"
  fi
  log "creating $VENV with $("$PY312" -V 2>&1) and $LEROBOT_PIN (about 5 GB, minutes; log: $VENV/setup.log)"
  "$PY312" -m venv "$VENV"
  if ! { "$VENV/bin/pip" install -q --upgrade pip && "$VENV/bin/pip" install "$LEROBOT_PIN" .; } >"$VENV/setup.log" 2>&1; then
    tail -n 30 "$VENV/setup.log" >&2; log "pip install failed (log: $VENV/setup.log)"; exit 1
  fi
  works || { log "accelerate or lerobot.scripts.lerobot_train does not import in $VENV"; exit 1; }
fi
flock -u 8
# This checkout, as users install it (not editable), without touching lerobot's pins: reinstalled only
# when its files changed since the last install (a reinstall rewrites the package under any job of this
# venv running at the time, such as another check), one install at a time (flock).
# Empty outside a git checkout: then lrs is reinstalled every time.
source_sha() {
  git rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
  { git ls-files -z --cached --others --exclude-standard | xargs -0 sha256sum 2>/dev/null || true; } \
    | sort | sha256sum | cut -c1-16
}
sha=$(source_sha || true)
exec 9>"$VENV/.lrs-install.lock"
flock 9
if [ -z "$sha" ] || [ "$(cat "$VENV/.lrs-source.sha" 2>/dev/null)" != "$sha" ]; then
  if ! "$VENV/bin/pip" install -q --no-deps --force-reinstall . >>"$VENV/setup.log" 2>&1; then
    tail -n 30 "$VENV/setup.log" >&2; log "installing lrs into $VENV failed"; exit 1
  fi
  echo "$sha" >"$VENV/.lrs-source.sha"
fi
flock -u 9
"$VENV/bin/pip" check >&2 || { log "pip check failed in $VENV"; exit 1; }
log "ok: $("$VENV/bin/python" -c 'import lerobot, torch, accelerate; print("lerobot", lerobot.__version__, "torch", torch.__version__, "accelerate", accelerate.__version__)')"
echo "$VENV/bin/python"
