#!/usr/bin/env bash
# Idempotent development setup: system FFmpeg shared libraries for torchcodec (apt), a .venv, and the
# project installed editable with its dev extras under scripts/constraints.txt.
#   scripts/setup.sh            # what `make setup` runs
#   VENV=/path/to/venv scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
log() { echo "[setup] $*" >&2; }
# Another apt-get (a second setup, lerobot's env script, unattended upgrades) holds the lock: wait for it.
APT_WAIT="-o DPkg::Lock::Timeout=600"

# torchcodec loads FFmpeg's shared libraries from the system (it does not bundle them).
need_ffmpeg_libs() { ! ldconfig -p | grep -q 'libavcodec.so.59'; }
if need_ffmpeg_libs; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  log "installing FFmpeg shared libraries for torchcodec (apt)"
  { $SUDO apt-get $APT_WAIT update -qq \
    && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $APT_WAIT install -y -qq --no-install-recommends \
      libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8 ffmpeg; } \
    >/tmp/lrs-apt.log 2>&1 || { tail -n 30 /tmp/lrs-apt.log >&2; log "apt-get failed (log: /tmp/lrs-apt.log)"; exit 1; }
fi
# The `ffmpeg` command line is the benchmark's yardstick for re-encode speed; tests do not need it.
if ! command -v ffmpeg >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  log "installing the ffmpeg command line (apt)"
  { $SUDO apt-get $APT_WAIT update -qq \
    && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $APT_WAIT install -y -qq --no-install-recommends ffmpeg; } \
    >/tmp/lrs-apt.log 2>&1 || { tail -n 30 /tmp/lrs-apt.log >&2; log "apt-get failed (log: /tmp/lrs-apt.log)"; exit 1; }
fi

stamp="$VENV/.lrs-setup-stamp"
want="$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }

PIP_ARGS=(-q -c scripts/constraints.txt)
# A machine of this kind keeps the CPU torch wheel on disk; elsewhere take torch from PyTorch's CPU index
# so that a CPU-only machine does not download a multi-GB CUDA build.
if [ -d /opt/wheels ] && ls /opt/wheels/torch-2.13.0* >/dev/null 2>&1; then
  PIP_ARGS+=(--find-links /opt/wheels)
elif [ -z "${LRS_TORCH_INDEX_URL+x}" ]; then
  PIP_ARGS+=(--extra-index-url https://download.pytorch.org/whl/cpu)
elif [ -n "$LRS_TORCH_INDEX_URL" ]; then
  PIP_ARGS+=(--extra-index-url "$LRS_TORCH_INDEX_URL")
fi
# editable_mode=compat puts the repository itself on sys.path: setuptools' default editable finder loses
# to a namespace directory of the same name in the working directory (a node cache in ./cache made
# `from reader import EpisodeStream` fail), while a regular package on sys.path always wins over one.
PIP_ARGS+=(--config-settings editable_mode=compat)
# lrs was distributed as `lrs` before (a name PyPI gives to an unrelated package): drop that install.
"$VENV/bin/python" -m pip uninstall -y -q lrs >/dev/null 2>&1 || true
log "installing lrs (editable, dev extras) into $VENV (log: $VENV/setup.log)"
if ! { "$VENV/bin/python" -m pip install -q --upgrade pip \
       && "$VENV/bin/python" -m pip install "${PIP_ARGS[@]}" -e '.[dev]'; } >"$VENV/setup.log" 2>&1; then
  tail -n 40 "$VENV/setup.log" >&2
  log "pip install failed; full log in $VENV/setup.log"
  exit 1
fi
"$VENV/bin/python" -c 'import torch, torchcodec.decoders, av, pyarrow, duckdb, fsspec, huggingface_hub' \
  || { log "import check failed in $VENV"; exit 1; }
echo "$want" > "$stamp"
log "ok: $("$VENV/bin/python" -c 'import torch,torchcodec,av,pyarrow;print("torch",torch.__version__,"torchcodec",torchcodec.__version__,"av",av.__version__,"pyarrow",pyarrow.__version__)')"
