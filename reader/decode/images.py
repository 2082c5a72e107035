"""Cameras stored as images in the parquet files (`dtype: image`, Hugging Face `Image`: PNG or JPEG bytes).

lerobot decodes them with PIL and converts them with torchvision's `ToTensor` (`pil_to_chw_tensor`):
uint8 images become float32 (C, H, W) in [0, 1] (`/ 255`), 16-bit ones (depth) float32 (1, H, W) in
their own units. `decode_image` does the same without torchvision, bit for bit; with `resize`, it
scales each image as torchvision's `Resize` does (bilinear, antialiased: `resized`, which scales video
frames too), so the cameras of a sample come at one size whichever way they are stored.
"""

from __future__ import annotations

import io

import numpy as np
import torch

from reader.errors import DecodeError

# PIL modes of 16-bit images: lerobot returns them as float32 in their own units, not scaled.
_UINT16_MODES = ("I;16", "I;16B", "I;16L", "I;16N")


def decode_image(
    data: bytes | None,
    *,
    return_uint8: bool = False,
    where: str = "",
    resize: tuple[int, int] | None = None,
) -> torch.Tensor:
    """One encoded image as a (C, H, W) tensor: float32 in [0, 1], or uint8 with `return_uint8`; scaled to
    `resize` (height, width) when given (8-bit images in uint8, before the float conversion, as a resized
    video frame is).

    Raises:
        DecodeError: the bytes are missing or not an image PIL can read (`where` names the sample).
    """
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise DecodeError(f"Invalid image {where}: no bytes. Expected an encoded image.")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            mode = image.mode
            if mode in _UINT16_MODES:
                return resized(torch.from_numpy(np.array(image, dtype=np.float32))[None, ...], resize)
            pixels = np.array(image)  # ToTensor's own conversion: P and L give one channel, RGBA four
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DecodeError(f"Invalid image {where}: cannot decode it ({exc}).") from exc
    if pixels.dtype != np.uint8:
        raise DecodeError(f"Invalid image {where}: mode {mode}. Expected 8-bit or 16-bit pixels.")
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    tensor = resized(torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1).contiguous(), resize)
    if return_uint8:
        return tensor
    return tensor.to(torch.float32).div(255)


def resized(image: torch.Tensor, size: tuple[int, int] | None) -> torch.Tensor:
    """A (C, H, W) image or (N, C, H, W) frames (uint8 or float32) scaled to `size` (height, width),
    bilinear with antialiasing (torchvision's `Resize` on tensors); as they are when `size` is None or
    already their size."""
    if size is None or tuple(image.shape[-2:]) == size:
        return image
    batch = image if image.dim() == 4 else image[None]
    scaled = torch.nn.functional.interpolate(batch, size=size, mode="bilinear", antialias=True)
    return scaled if image.dim() == 4 else scaled[0].contiguous()
