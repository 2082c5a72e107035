#!/usr/bin/env bash
# A headless browser for the tests that open what lrs writes for people (`lrs verify --report` pages):
# Debian's chromium and its chromedriver (apt; Selenium drives them, offline: Playwright's browser download
# needs its CDN). Idempotent; the integration tests call it the first time, `make setup` does not (about
# 300 MB that only those tests need). stdout: two lines, the browser's path then the driver's.
#   scripts/browser.sh
set -euo pipefail
log() { echo "[browser.sh] $*" >&2; }
APT_WAIT="-o DPkg::Lock::Timeout=600"

found() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }
if ! found; then
  command -v apt-get >/dev/null 2>&1 || { log "no apt-get here: install chromium and chromedriver"; exit 1; }
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "not root and no sudo: apt-get install chromium chromium-driver"; exit 1; }
    SUDO="sudo -n"
  fi
  log "installing chromium and chromium-driver (apt; log: /tmp/lrs-browser-apt.log)"
  { $SUDO apt-get $APT_WAIT update -qq \
    && DEBIAN_FRONTEND=noninteractive $SUDO apt-get $APT_WAIT install -y -qq --no-install-recommends \
      chromium chromium-driver; } >/tmp/lrs-browser-apt.log 2>&1 \
    || { tail -n 5 /tmp/lrs-browser-apt.log >&2; log "apt-get failed (log: /tmp/lrs-browser-apt.log)"; exit 1; }
  found || { log "apt-get installed no chromium and chromedriver on PATH"; exit 1; }
fi
command -v chromium
command -v chromedriver
