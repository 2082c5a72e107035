"""`lrs show`: a PNG of one episode, read through the reader, on lrs/1 and plain v3 datasets.

The sample's frames carry their (episode, frame, camera) as blocks (`reshard.demo.frame_marks`), so the
tiles of the picture are read back to prove they are the episode's evenly spaced frames in order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from reshard.cli import cli
from reshard.demo.frame_marks import read_frame_id
from reshard.preview.canvas import CanvasLayout, render
from reshard.preview.episode_view import (
    CameraFrames,
    Curve,
    EpisodeView,
    curve_keys,
    dimension_names,
    frame_picks,
)
from reshard.preview.plot import nice_ticks
from reshard.preview.strip import VIRIDIS, colour_map
from tests.support.datasets import resharded, v3_sample

HEIGHT, WIDTH = 64, 96
SMALL = {"episodes": 3, "min_length": 10, "max_length": 30, "height": HEIGHT, "width": WIDTH}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("show")
    one = v3_sample(root / "v3-one-camera", cameras=1, **SMALL)
    three = v3_sample(root / "v3-depth", cameras=2, depth_cameras=1, episodes_per_video_file=3, **SMALL)
    return {"v3-one-camera": one, "v3-depth": three, "lrs1-depth": resharded(three, root / "lrs1-depth")}


def lrs(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output.strip().splitlines()


def episode_length(dataset: Path, episode: int) -> int:
    from reader import DatasetMeta

    return int(DatasetMeta.open(str(dataset)).episodes["length"][episode])


@pytest.mark.parametrize(
    ("name", "colour", "depth"),
    [("v3-one-camera", 1, 0), ("v3-depth", 2, 1), ("lrs1-depth", 2, 1)],
    ids=["v3-one-camera", "v3-two-cameras-and-depth", "lrs1-two-cameras-and-depth"],
)
def test_show_writes_a_strip_per_camera_of_the_episodes_frames(
    datasets: dict[str, Path], tmp_path: Path, name: str, colour: int, depth: int
) -> None:
    out = tmp_path / "episode.png"
    code, lines = lrs("show", str(datasets[name]), "--episode", "1", "--frames", "5", "--out", str(out))
    assert code == 0, lines
    assert lines[-1].startswith(f"wrote {out} (") and len(lines) == 1
    layout = CanvasLayout()
    tile = layout.tile_width * HEIGHT // WIDTH
    cameras = colour + depth
    image = np.asarray(Image.open(out).convert("RGB"))
    expected_height = (
        layout.title_height + cameras * (layout.label_height + tile + layout.gap) + 2 * layout.panel_height
    ) + layout.margin
    assert image.shape == (expected_height, 2 * layout.margin + 5 * layout.tile_width + 4 * layout.gap, 3)
    picks = np.linspace(0, episode_length(datasets[name], 1) - 1, 5).round().astype(int).tolist()
    for camera in range(colour):
        top = layout.title_height + camera * (layout.label_height + tile + layout.gap) + layout.label_height
        for slot, frame in enumerate(picks):
            left = layout.margin + slot * (layout.tile_width + layout.gap)
            shown = Image.fromarray(image[top : top + tile, left : left + layout.tile_width])
            assert read_frame_id(np.asarray(shown.resize((WIDTH, HEIGHT)))) == (1, frame, camera)
    if depth:
        top = layout.title_height + colour * (layout.label_height + tile + layout.gap) + layout.label_height
        depth_tile = image[top : top + tile // 2, layout.margin : layout.margin + layout.tile_width]
        # Colour-mapped, not grey: blue and green differ where viridis is (never on a grey ramp).
        assert np.abs(depth_tile[..., 1].astype(int) - depth_tile[..., 2]).max() > 40


def test_a_relative_out_is_in_the_working_directory(
    datasets: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, lines = lrs("show", str(datasets["v3-one-camera"]), "--frames", "2", "--out", "ep.png")
    assert code == 0 and lines[-1].startswith("wrote ep.png ("), lines
    assert Image.open(tmp_path / "ep.png").size == (CanvasLayout().min_width, Image.open("ep.png").height)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.png"]  # no temporary file left


@pytest.mark.parametrize("name", ["v3-depth", "lrs1-depth"])
def test_an_episode_out_of_range_is_one_line_exit_3(
    datasets: dict[str, Path], tmp_path: Path, name: str
) -> None:
    out = tmp_path / "episode.png"
    code, lines = lrs("show", str(datasets[name]), "--episode", "3", "--out", str(out))
    assert (code, lines) == (
        3,
        [f"Error: {datasets[name]}: Invalid episode (3). Expected 0..2, the dataset's 3 episodes."],
    )
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("out", "why"),
    [
        ("s3://bucket/x.png", "Expected a local file path ending in .png."),
        ("x.jpg", "Expected a local file path ending in .png."),
        ("no-such-dir/x.png", "Expected a file in an existing directory."),
    ],
    ids=["url", "not-png", "no-directory"],
)
def test_out_must_be_a_local_png_usage_error(datasets: dict[str, Path], out: str, why: str) -> None:
    code, lines = lrs("show", str(datasets["v3-depth"]), "--out", out)
    assert (code, lines[-1]) == (2, f"Error: Invalid --out ({out}). {why}")


def test_help_explains_what_is_drawn() -> None:
    code, lines = lrs("show", "--help")
    text = " ".join(lines)
    assert code == 0
    assert all(
        word in text for word in ("DATASET", "--episode", "--frames", "--out", "EpisodeStream", "depth")
    )


def test_frame_picks_are_evenly_spaced_first_and_last_included() -> None:
    assert frame_picks(37, 8) == (0, 5, 10, 15, 21, 26, 31, 36)
    assert frame_picks(3, 8) == (0, 1, 2)
    assert frame_picks(1, 8) == (0,)
    with pytest.raises(ValueError, match=r"Invalid length \(0\)"):
        frame_picks(0, 8)


def test_curves_are_the_numeric_features_state_and_action_first() -> None:
    features = {
        "observation.images.cam0": {"dtype": "video", "shape": [64, 96, 3]},
        "action": {"dtype": "float32", "shape": [2]},
        "next.reward": {"dtype": "float32", "shape": [1]},
        "observation.state": {"dtype": "float32", "shape": [2]},
        "timestamp": {"dtype": "float32", "shape": [1]},
        "task_index": {"dtype": "int64", "shape": [1]},
        "language_instruction": {"dtype": "string", "shape": [1]},
    }
    assert curve_keys(features) == ["observation.state", "action", "next.reward"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["x", "y"], ("x", "y")),
        ({"motors": ["a", "b"]}, ("a", "b")),
        (["only-one"], ("s[0]", "s[1]")),
        (None, ("s[0]", "s[1]")),
    ],
    ids=["list", "lerobot-dict", "wrong-length", "missing"],
)
def test_dimension_names(names: object, expected: tuple[str, ...]) -> None:
    assert dimension_names("s", names, 2) == expected


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 1.2), (-0.93, 1.07), (3.0, 3.5), (0.0, 137.0)])
def test_nice_ticks_are_round_and_inside(lo: float, hi: float) -> None:
    ticks = nice_ticks(lo, hi)
    steps = np.diff(ticks)
    assert 3 <= len(ticks) <= 12 and all(lo - 1e-9 <= t <= hi + 1e-9 for t in ticks)
    assert np.allclose(steps, steps[0])
    mantissa = steps[0] / 10 ** np.floor(np.log10(steps[0]))
    assert any(np.isclose(mantissa, m) for m in (1, 2, 2.5, 5))


def test_colour_map_spans_viridis_and_blacks_out_missing_depth() -> None:
    values = np.array([[0.0, 500.0, 1000.0, np.nan, 2000.0]])
    rgb = colour_map(values, 0.0, 1000.0)
    assert rgb[0, 0].tolist() == VIRIDIS[0].tolist() and rgb[0, 2].tolist() == VIRIDIS[-1].tolist()
    assert rgb[0, 1].tolist() == VIRIDIS[2].tolist()
    assert rgb[0, 3].tolist() == [0, 0, 0] and rgb[0, 4].tolist() == VIRIDIS[-1].tolist()


def test_render_draws_curves_with_gaps_and_constants() -> None:
    """NaN values break a line and a constant curve gets an axis: the picture is drawn, its size fixed."""
    values = np.column_stack([np.linspace(0, 1, 20), np.full(20, 2.0)])
    values[5:8, 0] = np.nan
    frame = np.zeros((3, 48, 64), dtype=np.uint8)
    view = EpisodeView(
        "mem://x",
        0,
        10.0,
        20,
        ("a task",),
        (CameraFrames("cam", (0, 19), (frame, frame)),),
        (Curve("observation.state", ("a", "b"), values),),
    )
    layout = CanvasLayout()
    image = render(view, tiles=2, layout=layout)
    tile = layout.tile_width * 48 // 64
    assert image.size == (
        layout.min_width,
        layout.title_height + layout.label_height + tile + layout.gap + layout.panel_height + layout.margin,
    )
    with pytest.raises(ValueError, match=r"Invalid values shape \(20, 2\) for s\. Expected \(frames, 3\)"):
        Curve("s", ("a", "b", "c"), values)


def test_dimensions_of_very_different_ranges_are_each_scaled_and_their_range_written() -> None:
    """A state dimension near 4,000 beside five near 0 would flatten them on one axis: each is
    drawn over its own range, written in the legend; comparable ones keep one axis."""
    import numpy as np

    from reshard.preview.plot import legend_names, per_dimension

    t = np.linspace(0, 1, 50)
    values = np.stack([np.sin(t * k) for k in range(1, 6)] + [4000 + 10 * t], axis=1)
    scaled, ranges = per_dimension(values)
    assert ranges is not None and scaled.min() == 0.0 and scaled.max() == 1.0
    assert legend_names(("a", "b", "c", "d", "e", "f"), ranges)[5] == "f [4000, 4010]"
    comparable = values[:, :5]
    assert per_dimension(comparable)[1] is None and per_dimension(comparable)[0] is comparable
    constant = np.stack([np.full(50, 7.0), np.sin(t)], axis=1)  # a constant near the others: one axis
    assert per_dimension(constant)[1] is None
