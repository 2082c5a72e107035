"""The distribution's name: `lrs-lerobot` (`lrs` on PyPI is an unrelated package), for `lrs --version` and
the tool version recorded in `meta/lrs/layout.json`."""

DISTRIBUTION = "lrs-lerobot"
