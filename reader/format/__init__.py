"""The formats, torch-free: the floor every other module stands on.

- `v3`: LeRobot v3 metadata (`meta/info.json`, `meta/episodes/`, tasks) parsed and checked;
- `index`: the lrs/1 index tables under `meta/lrs/` (episodes, files, layout.json);
- `layout`: an lrs/1 dataset's index opened and cross-checked;
- `catalog`: what the reader needs of any dataset (lrs/1 or plain v3): episodes, files, tasks, fingerprint;
- `parquet`: reading a metadata file, and the one byte-range rule for a row group;
- `jsonfile`: reading a JSON metadata file, its size and nesting bounded before it is parsed.
"""
