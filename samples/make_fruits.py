"""Regenerates samples/fruits: a small labeled image collection for the README's first command.

    python samples/make_fruits.py

Deterministic (seeded), so re-running it rewrites the same files. Each class folder holds simple
drawn images in that class's colours, so a preview shows at a glance whether labels and images
agree; a few files are the kinds of trouble real collections hold.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

ROOT = Path(__file__).resolve().parent / "fruits"
CLASSES = {
    "apple": ((200, 30, 40), (90, 150, 40)),
    "banana": ((240, 210, 60), (120, 90, 30)),
    "cherry": ((150, 10, 40), (40, 110, 30)),
}
PER_CLASS = 14


def _draw(rng: random.Random, fruit: str, size: tuple[int, int]) -> Image.Image:
    body, stem = CLASSES[fruit]
    w, h = size
    image = Image.new("RGB", size, tuple(rng.randint(200, 250) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(1, 3)):
        cx, cy = rng.randint(w // 4, 3 * w // 4), rng.randint(h // 4, 3 * h // 4)
        r = rng.randint(min(w, h) // 6, min(w, h) // 3)
        shade = tuple(max(0, min(255, c + rng.randint(-25, 25))) for c in body)
        if fruit == "banana":
            draw.chord((cx - 2 * r, cy - r, cx + 2 * r, cy + r), 20, 160, fill=shade)
        else:
            draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=shade)
        draw.line((cx, cy - r, cx + r // 3, cy - r - r // 2), fill=stem, width=max(2, r // 6))
    noise = Image.effect_noise(size, 12).convert("RGB")
    return Image.blend(image, noise, 0.08).filter(ImageFilter.SMOOTH)


def _jpeg(image: Image.Image, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=85, **kwargs)
    return out.getvalue()


def main() -> None:
    rng = random.Random(20261122)
    for fruit in CLASSES:
        folder = ROOT / fruit
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(PER_CLASS):
            size = (rng.choice([96, 112, 128]), rng.choice([96, 112, 128]))
            (folder / f"{fruit}{i:02d}.jpg").write_bytes(_jpeg(_draw(rng, fruit, size)))
    # Real collections are dirty. Each of these is normalized by the build, or reported.
    image = _draw(rng, "apple", (120, 96))
    (ROOT / "apple" / "apple_cmyk.jpg").write_bytes(_jpeg(image.convert("CMYK")))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    (ROOT / "banana" / "banana_rotated.jpg").write_bytes(_jpeg(_draw(rng, "banana", (128, 96)), exif=exif))
    rgba = _draw(rng, "cherry", (100, 100)).convert("RGBA")
    alpha = Image.new("L", (100, 100), 0)
    ImageDraw.Draw(alpha).ellipse((10, 10, 90, 90), fill=255)
    rgba.putalpha(alpha)
    png = io.BytesIO()
    rgba.save(png, "PNG")
    (ROOT / "cherry" / "cherry_transparent.png").write_bytes(png.getvalue())
    # A download that was cut short: reported, never written.
    whole = _jpeg(_draw(rng, "cherry", (128, 128)))
    (ROOT / "cherry" / "cherry_truncated.jpg").write_bytes(whole[: len(whole) // 2])


if __name__ == "__main__":
    main()
