"""The page of `lrs verify DATASET --against SOURCE --report FILE.html`: one self-contained HTML file.

It opens from disk in any browser, with no server and nothing fetched: the frames are PNG `data:` URIs,
the charts inline SVG drawn here, the style inline, no script. Per camera: the PSNR of every episode
video (its worst frame and its mean), the worst frames beside their source frames and their difference
(`report_frames.AMPLIFY` times), the colour fit, bytes per frame and decode CPU per frame of the output
and of the source. The data comes from `VerifyReport.look` (`verify(..., worst_frames=K)`).
"""

from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Callable, Sequence

from cache.store import atomic_write
from reshard.verify.context import VideoQuality
from reshard.verify.report import VerifyReport
from reshard.verify.report_frames import AMPLIFY, CameraLook, WorstFrame
from reshard.video.compare import MAX_GAIN_ERROR, MAX_OFFSET

# The chart's plot area in SVG user units (it scales to the page's width), and its margins.
_WIDTH, _HEIGHT, _LEFT, _RIGHT, _TOP, _BOTTOM = 720, 200, 48, 12, 16, 36
# A kept frame narrower than this is shown enlarged by a whole factor (up to 4).
_MIN_SHOWN = 256
# Above this many episodes the chart draws lines only, no dot per episode.
_MAX_DOTS = 200

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; padding: 0 1em;
  color: #1d1d1f; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
summary { cursor: pointer; color: #555; }
pre { background: #f6f6f6; padding: .8em; overflow-x: auto; font-size: 13px; }
table { border-collapse: collapse; margin: .6em 0; }
td, th { padding: .25em .9em .25em 0; text-align: left; vertical-align: top; }
th { font-weight: 600; color: #555; }
.ok { color: #1a7f37; } .fail { color: #c0392b; }
svg.chart { width: 100%; max-width: 900px; height: auto; display: block; }
.frames { display: flex; gap: .6em; flex-wrap: wrap; margin: .4em 0 1.4em; }
figure { margin: 0; } figcaption { font-size: 13px; color: #555; }
figure img { display: block; image-rendering: pixelated; border: 1px solid #ccc; max-width: 100%; height: auto; }
.legend span { margin-right: 1.2em; font-size: 13px; }
"""


def write_report_page(report: VerifyReport, path: str | os.PathLike[str]) -> None:
    """Write `report_page(report)` to `path` atomically (a temp file beside it, then a rename)."""
    atomic_write(os.path.abspath(path), report_page(report).encode())


def report_page(report: VerifyReport) -> str:
    """The page of `report` (which needs its `look`: `verify(..., worst_frames=K)`)."""
    look = report.look
    verdict = (
        '<span class="ok">every check passed</span>'
        if report.ok
        else f'<span class="fail">failed: {_e(report.failed_check or "")}</span>'
    )
    title = f"lrs verify {report.url}"
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>Against {_e(report.against or '(no source)')}: {verdict}.</p>",
        # verify's own lines, folded where everything passed (the numbers follow per camera).
        f"<details{'' if report.ok else ' open'}><summary>verify's report</summary>"
        f"<pre>{_e(report.describe())}</pre></details>",
    ]
    if look is None or not look.cameras:
        parts.append("<p>No episode video was compared with the source: nothing more to show.</p>")
    else:
        for camera in look.cameras:
            videos = [v for v in report.videos if v.key == camera.key]
            parts += _camera(camera, videos, look.min_psnr)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _camera(camera: CameraLook, videos: Sequence[VideoQuality], min_psnr: float) -> list[str]:
    reencoded = [v for v in videos if v.reencoded and not v.identical]
    finite = [v for v in reencoded if math.isfinite(v.psnr_min_db)]
    rows = [
        ("episode videos", f"{camera.videos} ({len(videos) - len(reencoded)} identical to the source)"),
        ("frames compared", f"{camera.frames:,}"),
    ]
    if finite:
        worst = min(v.psnr_min_db for v in finite)
        rows.append(("worst frame PSNR", f"{worst:.2f} dB (floor {min_psnr:g} dB)"))
        rows.append(("mean PSNR, worst episode", f"{min(v.psnr_mean_db for v in finite):.2f} dB"))
    rows += [
        ("colour fit", _colour(camera)),
        ("bytes per frame", _versus(camera.bytes_per_frame, camera.source_bytes_per_frame, "{:,.0f}")),
        (
            "decode CPU per frame",
            _versus(camera.decode_ms_per_frame, camera.source_decode_ms_per_frame, "{:.3f} ms")
            + "; FFmpeg on one thread, each episode in order from its first frame",
        ),
    ]
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    out = [f"<section><h2>{_e(camera.key)}</h2>", f"<table>{table}</table>"]
    out += ["<h3>PSNR per episode</h3>", psnr_chart(videos, min_psnr)]
    out.append("<h3>Worst frames</h3>")
    if camera.worst:
        out += [_worst(frame) for frame in camera.worst]
    else:
        out.append("<p>Every frame is identical to the source's.</p>")
    out.append("</section>")
    return out


def _colour(camera: CameraLook) -> str:
    fit = camera.colour
    if fit is None:
        return "no re-encoded frame"
    verdict = "colours moved" if fit.moved() else "within tolerance"
    return (
        f"output = {fit.gain:.4f} x source {fit.offset:+.4f} (RGB in [0, 1]; {verdict}: gain 1 "
        f"+- {MAX_GAIN_ERROR:g}, offset +-{MAX_OFFSET:g})"
    )


def _versus(value: float, source: float, form: str) -> str:
    ratio = f", {value / source:.2f}x" if source else ""
    return f"{form.format(value)} (source {form.format(source)}{ratio})"


def _worst(frame: WorstFrame) -> str:
    caption = f"episode {frame.episode}, frame {frame.frame}: PSNR {frame.psnr_db:.2f} dB"
    images = (
        ("source", frame.source_png),
        ("output", frame.output_png),
        (f"difference x{AMPLIFY}", frame.difference_png),
    )
    # A small camera is shown enlarged (whole pixels, `image-rendering: pixelated`) to be judged by eye.
    scale = max(1, min(4, _MIN_SHOWN // max(1, frame.width)))
    size = f'width="{frame.width * scale}" height="{frame.height * scale}"'
    figures = "".join(
        f'<figure><img {size} alt="{_e(name)}, {_e(caption)}" src="{_data_uri(png)}">'
        f"<figcaption>{_e(name)}</figcaption></figure>"
        for name, png in images
    )
    return f'<p>{_e(caption)}</p><div class="frames">{figures}</div>'


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def psnr_chart(videos: Sequence[VideoQuality], min_psnr: float) -> str:
    """An SVG chart of each episode video's worst-frame and mean PSNR (dB) by episode, with the floor
    dashed; an episode identical to its source (infinite PSNR) is a mark on the top edge."""
    videos = sorted(videos, key=lambda v: v.episode)
    finite = [x for v in videos for x in (v.psnr_min_db, v.psnr_mean_db) if math.isfinite(x)]
    low = math.floor(min([min_psnr, *finite]) - 1)
    high = math.ceil(max([min_psnr + 10, *finite]) + 1)
    width, height = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM
    count = max(1, len(videos) - 1)

    def x(position: int) -> float:
        return _LEFT + width * (position / count if len(videos) > 1 else 0.5)

    def y(db: float) -> float:
        return _TOP + height * (1 - (min(db, high) - low) / (high - low))

    svg = [
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {_HEIGHT}" xmlns="http://www.w3.org/2000/svg" '
        'role="img" aria-label="PSNR per episode">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{width}" height="{height}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for db in _ticks(low, high):
        svg.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + width}" y1="{y(db):.1f}" y2="{y(db):.1f}" stroke="#eee"/>'
            f'<text x="{_LEFT - 6}" y="{y(db) + 4:.1f}" font-size="11" text-anchor="end">{db}</text>'
        )
    svg.append(
        f'<line x1="{_LEFT}" x2="{_LEFT + width}" y1="{y(min_psnr):.1f}" y2="{y(min_psnr):.1f}" '
        f'stroke="#c0392b" stroke-dasharray="5 4"><title>floor {min_psnr:g} dB</title></line>'
    )
    for name, colour in (("psnr_mean_db", "#2e86de"), ("psnr_min_db", "#e67e22")):
        svg += _series(videos, name, colour, x, y)
    svg.append(
        f'<text x="{_LEFT + width / 2}" y="{_HEIGHT - 6}" font-size="12" text-anchor="middle">episode '
        f"{videos[0].episode if videos else ''} to {videos[-1].episode if videos else ''}</text>"
        f'<text x="12" y="{_TOP + height / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 12 {_TOP + height / 2})">PSNR dB</text></svg>'
    )
    identical = any(v.identical for v in videos)
    legend = (
        '<p class="legend"><span style="color:#e67e22">&#9679; worst frame</span>'
        '<span style="color:#2e86de">&#9679; mean</span>'
        f'<span style="color:#c0392b">- - floor {min_psnr:g} dB</span>'
        + ("<span>&#9650; on the top edge: identical to the source</span>" if identical else "")
        + "</p>"
    )
    return "".join(svg) + legend


def _series(
    videos: Sequence[VideoQuality],
    name: str,
    colour: str,
    x: Callable[[int], float],
    y: Callable[[float], float],
) -> list[str]:
    """One series (`name`, a `VideoQuality` field) as a line, with a dot per episode (a mark on the top
    edge where identical) when there are few; each dot's title gives its value."""
    points = [(x(i), y(getattr(v, name)), v) for i, v in enumerate(videos)]
    out = []
    finite = [(px, py) for px, py, v in points if math.isfinite(getattr(v, name))]
    if len(finite) > 1:
        coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in finite)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    for px, py, v in points if len(points) <= _MAX_DOTS else ():
        db = getattr(v, name)
        label = f"episode {v.episode}: {'identical' if not math.isfinite(db) else f'{db:.2f} dB'}"
        if math.isfinite(db):
            out.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"><title>{label}</title></circle>'
            )
        else:
            out.append(
                f'<path d="M{px - 4:.1f},{_TOP + 7} L{px:.1f},{_TOP} L{px + 4:.1f},{_TOP + 7} Z" '
                f'fill="{colour}"><title>{label}</title></path>'
            )
    return out


def _ticks(low: int, high: int) -> range:
    """At most about 6 round values (steps of 1, 2 or 5 times a power of 10) from `low` to `high`."""
    span = (high - low) / 6
    power = 10 ** max(0, math.floor(math.log10(max(span, 1))))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= span)
    return range(math.ceil(low / step) * step, high + 1, step)


def _e(text: str) -> str:
    return html.escape(text, quote=True)
