"""Cutting one episode out of a packed MP4 without re-encoding: which packets hold it, and whether they can
be copied as they are.

An episode can be copied when its packets, in decode order, start on a keyframe and form one run that no
packet outside the episode interleaves (no B-frame references across its boundaries), and when the source
has exactly the frames lerobot's nearest-frame rule picks. `copy_plan` returns the packets with their output
frame index, or why the episode must be re-encoded instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import av

from reshard.video.frames import (
    EPS_S,
    EpisodeSpan,
    VideoFileRef,
    VideoStream,
    demux,
    nearest,
    seek,
    time_base,
)


@dataclass(frozen=True)
class Demuxed:
    """A packet of the source, with its presentation time and its position in decode order."""

    time: float  # pts in seconds
    order: int  # position in decode order
    packet: av.Packet = field(repr=False)


def demux_window(
    container: Any, stream: VideoStream, segment: EpisodeSpan, ref: VideoFileRef
) -> list[Demuxed]:
    """Packets in decode order from the keyframe at or before the episode until none can be in it.

    If the demuxer's seek lands past the episode's start, the packets are read from the file's start.
    """
    packets = _demux_until(container, stream, segment, segment.from_timestamp, ref)
    if segment.from_timestamp > 0 and not (
        packets and min(p.time for p in packets) <= segment.from_timestamp + EPS_S
    ):
        packets = _demux_until(container, stream, segment, None, ref)
    return packets


def _demux_until(
    container: Any,
    stream: VideoStream,
    segment: EpisodeSpan,
    seek_to: float | None,
    ref: VideoFileRef,
) -> list[Demuxed]:
    end = segment.window[1]
    tb = time_base(stream, ref)
    seek(container, stream, seek_to, ref)
    packets: list[Demuxed] = []
    for packet in demux(container, stream, ref):
        if packet.dts is None or packet.pts is None:
            continue
        if float(packet.dts * tb) >= end:
            break  # pts >= dts: neither this packet nor any later one shows in the window
        packets.append(Demuxed(float(packet.pts * tb), len(packets), packet))
    return packets


def copy_plan(
    packets: list[Demuxed], segment: EpisodeSpan, ref: VideoFileRef
) -> list[tuple[Demuxed, int]] | str:
    """The episode's packets in decode order with their output frame index, or why they cannot be copied."""
    start, end = segment.window
    window = [p for p in packets if start <= p.time < end]
    by_time = sorted(window, key=lambda p: p.time)
    picked = [p for _, p in nearest(((p.time, p) for p in by_time), segment, ref)]
    if len(window) != len(picked):
        return (
            f"the source has {len(window)} frames in the episode's time range, {segment.length} "
            "expected at from_timestamp + i / fps; copying would keep the extra frames"
        )
    first = window[0]
    if not first.packet.is_keyframe or first is not by_time[0]:
        before = [p.time for p in packets if p.packet.is_keyframe and p.time <= by_time[0].time + EPS_S]
        previous = f"{before[-1]:.4f} s" if before else "none"
        return (
            f"the episode does not start on a keyframe (first frame at {by_time[0].time:.4f} s, "
            f"previous keyframe at {previous}), so it cannot be cut without re-encoding"
        )
    if window[-1].order - first.order + 1 != len(window):
        return (
            "the episode's frames are interleaved in decode order with frames outside it "
            "(B-frames referencing across the episode boundary), so it cannot be cut losslessly"
        )
    rank = {id(p): i for i, p in enumerate(by_time)}
    return [(p, rank[id(p)]) for p in window]
