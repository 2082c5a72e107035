"""Write v3 datasets the way third-party writers do (`reshard.demo.sample.THIRD_PARTY`), one per directory.

    python scripts/third_party.py DIR [--episodes 8] [--only full-range-h264,...]

writes DIR/full-range-h264 (H.264 yuvj420p, color_range=pc, as an MJPEG webcam recorded through FFmpeg
gives), DIR/odd-size-yuv444p (H.264 yuv444p at 101x75) and DIR/audio-track (camera MP4s with an AAC
track). Every frame carries its episode, frame and camera index (`reshard.demo.frame_marks.read_frame_id`), so
a reshard of them can be checked with `lrs verify --against` and against lerobot (`scripts/lerobot/parity.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reshard.demo.sample import THIRD_PARTY, write_sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="Where to write one dataset per kind.")
    parser.add_argument("--episodes", type=int, default=8, help="Episodes per dataset.")
    parser.add_argument("--only", default=",".join(THIRD_PARTY), help="Comma-separated kinds to write.")
    args = parser.parse_args()
    for name in args.only.split(","):
        if name not in THIRD_PARTY:
            parser.error(f"Invalid kind ({name!r}). Expected one of {', '.join(THIRD_PARTY)}.")
        root = write_sample(args.dir / name, episodes=args.episodes, **THIRD_PARTY[name])
        print(f"wrote {root}: {THIRD_PARTY[name]}")


if __name__ == "__main__":
    main()
