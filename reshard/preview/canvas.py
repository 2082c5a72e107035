"""The layout of `lrs show`'s picture, and the PNG written atomically.

Top to bottom: the task string and what the picture is of, a strip of tiles per camera (each tile
`CanvasLayout.tile_width` wide, as tall as the camera's aspect makes it, its frame number and time in the
corner), then a panel of curves per numeric feature. The width depends on the tiles asked for only, so
pictures of one dataset line up whatever the episode's length.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from cache.printable import printable
from cache.store import atomic_write
from reshard.preview.episode_view import CameraFrames, EpisodeView
from reshard.preview.plot import TEXT, Font, draw_panel, fit_text
from reshard.preview.strip import camera_tiles

BACKGROUND, LABEL_BOX = "#ffffff", (0, 0, 0, 160)


@dataclass(frozen=True)
class CanvasLayout:
    """Sizes in pixels."""

    tile_width: int = 192
    gap: int = 6
    margin: int = 16
    title_height: int = 58  # the task string, then the dataset, episode and length
    label_height: int = 22  # a camera's name above its strip
    panel_height: int = 240
    min_width: int = 960
    font_size: int = 13
    title_size: int = 20

    def __post_init__(self) -> None:
        for name in ("tile_width", "title_height", "label_height", "panel_height", "font_size", "title_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"Invalid {name} ({getattr(self, name)}). Expected >= 1.")

    def width(self, tiles: int) -> int:
        """The picture's width for strips of `tiles` tiles."""
        return max(self.min_width, 2 * self.margin + tiles * self.tile_width + (tiles - 1) * self.gap)

    def tile_height(self, height: int, width: int) -> int:
        """A tile's height for a camera of `height` x `width` pixels (its aspect kept)."""
        return max(1, round(self.tile_width * height / width))

    def strip_height(self, camera: CameraFrames) -> int:
        """A camera's label, its tiles and the gap below."""
        height, width = camera.frames[0].shape[1:] if camera.frames else (0, 1)
        return self.label_height + self.tile_height(height, width) + self.gap

    def height(self, view: EpisodeView) -> int:
        strips = sum(self.strip_height(camera) for camera in view.cameras)
        return self.title_height + strips + len(view.curves) * self.panel_height + self.margin


def font(size: int) -> Font:
    """Pillow's bundled font at `size` (its small bitmap font where Pillow has no FreeType)."""
    return ImageFont.load_default(size=size)


def render(view: EpisodeView, *, tiles: int, layout: CanvasLayout = CanvasLayout()) -> Image.Image:
    """The picture of `view`, for strips of `tiles` tiles (as many as were asked for)."""
    image = Image.new("RGB", (layout.width(tiles), layout.height(view)), BACKGROUND)
    draw = ImageDraw.Draw(image, "RGBA")
    small = font(layout.font_size)
    _title(draw, view, layout, width=image.width, small=small)
    y = layout.title_height
    for camera in view.cameras:
        _strip(image, draw, camera, layout, top=y, fps=view.fps, small=small)
        y += layout.strip_height(camera)
    marks = view.cameras[0].frame_indices if view.cameras else ()
    for curve in view.curves:
        box = (layout.margin, y, image.width - layout.margin, y + layout.panel_height - layout.gap)
        draw_panel(draw, box, curve, fps=view.fps, marks=marks, font=small)
        y += layout.panel_height
    return image


def _title(
    draw: ImageDraw.ImageDraw, view: EpisodeView, layout: CanvasLayout, *, width: int, small: Font
) -> None:
    room = width - 2 * layout.margin
    task = " | ".join(view.tasks) or "(no task string)"
    draw.text(
        (layout.margin, 8),
        fit_text(task, room, font(layout.title_size)),
        fill=TEXT,
        font=font(layout.title_size),
    )
    about = (
        f"{view.source}  episode {view.episode}  {view.length} frames at {view.fps:g} fps "
        f"({view.length / view.fps:.1f} s)"
    )
    draw.text((layout.margin, 8 + layout.title_size + 8), fit_text(about, room, small), fill=TEXT, font=small)


def _strip(
    image: Image.Image,
    draw: ImageDraw.ImageDraw,
    camera: CameraFrames,
    layout: CanvasLayout,
    *,
    top: int,
    fps: float,
    small: Font,
) -> None:
    tiles, note = camera_tiles(camera)
    draw.text((layout.margin, top + 4), printable(f"{camera.key}  {note}"), fill=TEXT, font=small)
    y = top + layout.label_height
    for i, (tile, frame) in enumerate(zip(tiles, camera.frame_indices, strict=True)):
        x = layout.margin + i * (layout.tile_width + layout.gap)
        size = (layout.tile_width, layout.tile_height(*tile.shape[:2]))
        image.paste(
            Image.fromarray(np.ascontiguousarray(tile)).resize(size, Image.Resampling.BILINEAR), (x, y)
        )
        label = f"#{frame}  {frame / fps:.2f} s"
        draw.rectangle((x, y + size[1] - 17, x + small.getlength(label) + 8, y + size[1]), fill=LABEL_BOX)
        draw.text((x + 4, y + size[1] - 16), label, fill="#ffffff", font=small)


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def write_png(image: Image.Image, path: Path) -> None:
    """Write `image` as a PNG at `path` atomically (a temp file beside it, then a rename)."""
    atomic_write(str(path.absolute()), png_bytes(image))  # `x.png` is in the working directory
