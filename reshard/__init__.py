"""lrs reshard package: the `lrs` command line and the offline jobs (reshard, verify, push, prewarm).

lrs is distributed as `lrs-lerobot` (`lrs` on PyPI is an unrelated package); its import names are
`reader`, `cache` and `reshard`, and its command is `lrs`.
"""

DISTRIBUTION = "lrs-lerobot"
