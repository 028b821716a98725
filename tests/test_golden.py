"""Golden digests: a fixed collection builds to the same bytes as before the restructure (issue 16).

The digests were taken on the code before its modules moved. A change to any of them is a change
of behaviour: shards, record indexes, labels, report or the manifest's stable fields.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hostile_images import hostile_corpus
from imagegen import make_collection

from beam_tfrecord.beam.pipeline import build
from beam_tfrecord.config import BuildConfig

pytestmark = pytest.mark.slow

CLASSES = {"cat": 12, "dog": 10, "fox": 8}
# Files a build must normalize (CMYK, YCCK, EXIF rotation, 16 bits, transparency, TIFF, GIF,
# a PNG named .jpg) or report (truncated); all filed under one class folder, "odd".
HOSTILE = (
    "cmyk_jpeg",
    "ycck_jpeg",
    "exif_orientation_6_jpeg",
    "exif_orientation_8_png",
    "gray16_png",
    "rgba_png",
    "palette_transparent_png",
    "png_named_jpg",
    "rgb_tiff",
    "animated_gif",
    "truncated_jpeg",
)
# The manifest's fields that change from run to run or machine to machine.
UNSTABLE = ("created", "versions")

# A default build, a resized one and one that checks headers only (the fast header path). The
# resized one plans on the size model (`transformed_sizes: estimate`), as every resized build
# did when the digests were taken; `resize_measured` is the default since issue 31, which plans
# on each record's measured size (other cuts, the same records). The manifests' digests changed
# once, when two settings (transformed_sizes, allow_missing_classes) joined their config, and
# once more when `work.reads` and `bytes_read` came to count the sources the shard writers read
# and refused (the truncated JPEG among them): every other byte the same. The record of the
# build's settings joined them later, a file of its own: every other digest the same.
VARIANTS = {
    "plain": {},
    "resize": {"resize": "40", "transformed_sizes": "estimate"},
    "header": {"validate": "header"},
    "resize_measured": {"resize": "40"},
}
GOLDEN: dict[str, dict[str, str]] = {
    "plain": {
        "build-settings.json": ("69463ef66b6c615247fac0fd890e2fdd7d6d54ddc1b882bce9b6354d28c0f8cd"),
        "golden-test.tfrecord-00000-of-00001": (
            "9316c187744e4259fa3cfeb1e1f5347cb78f8326fc49fcb6b90250a992f22c48"
        ),
        "golden-train.tfrecord-00000-of-00004": (
            "f7f9a5761747cf98cad3732a12fa1fc63f209a563c1ffcb1997ff8f81cfb1e3e"
        ),
        "golden-train.tfrecord-00001-of-00004": (
            "da7ace7ecd6a3640b4021ae84f8a4af32867747812d4fe0ee9131772d5982131"
        ),
        "golden-train.tfrecord-00002-of-00004": (
            "c1e8d4c62dfdac9a61409794087415a49da5e2f57954840ffbe03ad96af87886"
        ),
        "golden-train.tfrecord-00003-of-00004": (
            "b13c2161c65158735c878c51837724241b3c722a63b59ff210f5d1805a97b772"
        ),
        "golden-validation.tfrecord-00000-of-00001": (
            "fede400fa25aea5c1d0fadc8c81fc6283e94f179ac2409ec6c76db03a7ae0b39"
        ),
        "image.class.label.labels.txt": (
            "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535"
        ),
        "index/golden-test.tfrecord-00000-of-00001.index": (
            "b904330e80d422ba1c3dd21153c4040af617b0b8511c874f2c2d0c093a03ff50"
        ),
        "index/golden-train.tfrecord-00000-of-00004.index": (
            "93ec4ca38cfb170884ccb227238f3b5ed64b4df16ab87c765fc0366fc86555f8"
        ),
        "index/golden-train.tfrecord-00001-of-00004.index": (
            "c6b2bfa8ea404fb877b9b2b19c3e9e048d2e8f21e97811cb460f229e8482eb71"
        ),
        "index/golden-train.tfrecord-00002-of-00004.index": (
            "4922489f35fbdff1fe234690f1967cf41e22cc83a72600ebb10347e8e5548518"
        ),
        "index/golden-train.tfrecord-00003-of-00004.index": (
            "a3644590ed9f0db023ba313ce9922f94684506dcc1094094ce30686c3a388b0c"
        ),
        "index/golden-validation.tfrecord-00000-of-00001.index": (
            "095dc032dcd26a6ff815924b11dbfc5fecf9764d1b94b856f803531745c04f20"
        ),
        "labels.txt": "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535",
        "manifest.json": "5ed2451a42b2a4d020cf8b39723ea5e6272d62af567f834294c412edecbbddbb",
        "report.jsonl": "14c949a68fde24c48e51c80fcf2d25d07411aea15ae0fc27fda78a51d47f2510",
    },
    "resize": {
        "build-settings.json": ("639ced4f9186cfc7e1b7677dde4c9ce18532fe2c7bf094238a1752d229e15907"),
        "golden-test.tfrecord-00000-of-00001": (
            "2df81f2c987dbce9e7f0ad69eaa30861a1b4683bc1d0b715ca7c345575b4fde5"
        ),
        "golden-train.tfrecord-00000-of-00001": (
            "602baf635b3ca3275e5ddae4b1128772fbd3b7fa27f66007cc0306569bd66ffa"
        ),
        "golden-validation.tfrecord-00000-of-00001": (
            "65818026d56ca5b99830e76e4a78be0268fc413f57854af81ed096cd1e6f07ca"
        ),
        "image.class.label.labels.txt": (
            "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535"
        ),
        "index/golden-test.tfrecord-00000-of-00001.index": (
            "a55b0d380a1ba61868bf05b4d2582660449f2c13c70c332b4258637aa1fb3db5"
        ),
        "index/golden-train.tfrecord-00000-of-00001.index": (
            "a224aacef9de24620707bdc844524c3ac12aa08da63b816e53649eb740fdac15"
        ),
        "index/golden-validation.tfrecord-00000-of-00001.index": (
            "79b3bb0a1500c58f1ce4d5abe2765536fa081013390c863a1b7e2c5f52e23ec7"
        ),
        "labels.txt": "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535",
        "manifest.json": "04b2d76640923966e8d5fb8ed316dae555c4c0f496f70cb9d7a2a271c1a73bfd",
        "report.jsonl": "15ff7ddb87f61d8403e0bb4e3cba5d6ee582209aed1ee49ff2f58aff8ed8a594",
    },
    "header": {
        "build-settings.json": ("0342f1969f6f53ac7526a52285a833974e9eb51737405b2e0630f66d6e8ae3c2"),
        "golden-test.tfrecord-00000-of-00001": (
            "9316c187744e4259fa3cfeb1e1f5347cb78f8326fc49fcb6b90250a992f22c48"
        ),
        "golden-train.tfrecord-00000-of-00004": (
            "f7f9a5761747cf98cad3732a12fa1fc63f209a563c1ffcb1997ff8f81cfb1e3e"
        ),
        "golden-train.tfrecord-00001-of-00004": (
            "7232be959a51a4187c1660c87564472bae0656c7aa3c5442c1c1a00ce065a60a"
        ),
        "golden-train.tfrecord-00002-of-00004": (
            "c1e8d4c62dfdac9a61409794087415a49da5e2f57954840ffbe03ad96af87886"
        ),
        "golden-train.tfrecord-00003-of-00004": (
            "b13c2161c65158735c878c51837724241b3c722a63b59ff210f5d1805a97b772"
        ),
        "golden-validation.tfrecord-00000-of-00001": (
            "fede400fa25aea5c1d0fadc8c81fc6283e94f179ac2409ec6c76db03a7ae0b39"
        ),
        "image.class.label.labels.txt": (
            "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535"
        ),
        "index/golden-test.tfrecord-00000-of-00001.index": (
            "b904330e80d422ba1c3dd21153c4040af617b0b8511c874f2c2d0c093a03ff50"
        ),
        "index/golden-train.tfrecord-00000-of-00004.index": (
            "93ec4ca38cfb170884ccb227238f3b5ed64b4df16ab87c765fc0366fc86555f8"
        ),
        "index/golden-train.tfrecord-00001-of-00004.index": (
            "71f3e7e6d9f67f9c723e7addceb3cb469b277e8b6124773382c6fcb083469dc4"
        ),
        "index/golden-train.tfrecord-00002-of-00004.index": (
            "4922489f35fbdff1fe234690f1967cf41e22cc83a72600ebb10347e8e5548518"
        ),
        "index/golden-train.tfrecord-00003-of-00004.index": (
            "a3644590ed9f0db023ba313ce9922f94684506dcc1094094ce30686c3a388b0c"
        ),
        "index/golden-validation.tfrecord-00000-of-00001.index": (
            "095dc032dcd26a6ff815924b11dbfc5fecf9764d1b94b856f803531745c04f20"
        ),
        "labels.txt": "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535",
        "manifest.json": "624c31ccd47b37583977b304361eb7af847ad1ab77a7981f5c7c59d1ee86cd10",
        "report.jsonl": "b7b8ff422fe3f4d9059ae6cb5d39f679af9d2fe7ee611fe158e6e159fad9b237",
    },
    "resize_measured": {
        "build-settings.json": ("2a0588540126ca36f822c5a9f82db3588399b68c6cc764c005649a006deb12bd"),
        "golden-test.tfrecord-00000-of-00001": (
            "2df81f2c987dbce9e7f0ad69eaa30861a1b4683bc1d0b715ca7c345575b4fde5"
        ),
        "golden-train.tfrecord-00000-of-00002": (
            "efef633eedaf683269259b71e88b9ef72ed5ba7bc0464245de9a99e69a702b32"
        ),
        "golden-train.tfrecord-00001-of-00002": (
            "6f24b74dcbc34625d99c83daf9076cffcaa7ec8b78042167fc51760eb7bf5a27"
        ),
        "golden-validation.tfrecord-00000-of-00001": (
            "65818026d56ca5b99830e76e4a78be0268fc413f57854af81ed096cd1e6f07ca"
        ),
        "image.class.label.labels.txt": (
            "41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535"
        ),
        "index/golden-test.tfrecord-00000-of-00001.index": (
            "a55b0d380a1ba61868bf05b4d2582660449f2c13c70c332b4258637aa1fb3db5"
        ),
        "index/golden-train.tfrecord-00000-of-00002.index": (
            "2b2a08aefd20e571c7912792fff1873c51b934112ec7ad225050ff92b21fad0b"
        ),
        "index/golden-train.tfrecord-00001-of-00002.index": (
            "4eef3f509af56a2fba426b013451f69cab9577f78c3d67b7805e5a0a5189d9cd"
        ),
        "index/golden-validation.tfrecord-00000-of-00001.index": (
            "79b3bb0a1500c58f1ce4d5abe2765536fa081013390c863a1b7e2c5f52e23ec7"
        ),
        "labels.txt": ("41d62fee5d22acedc594dff373e0f197cd6d0990cb0fa53cad0bf4e891cd8535"),
        "manifest.json": ("85cfa7c45fc43f37872ab5d3032b7ba42f70cdc4e1e4d3a12734de23aaf80a0f"),
        "report.jsonl": ("15ff7ddb87f61d8403e0bb4e3cba5d6ee582209aed1ee49ff2f58aff8ed8a594"),
    },
}


def _collection(root: Path) -> Path:
    src = root / "src"
    images = make_collection(src, CLASSES, seed=11)
    cases = {case.name: case for case in hostile_corpus()}
    odd = src / "odd"
    odd.mkdir()
    for name in HOSTILE:
        case = cases[name]
        suffix = Path(case.filename).suffix
        (odd / f"{name}{suffix}").write_bytes(case.data)
    (src / "dog" / "dog_cut.jpg").write_bytes(images["dog/dog_0003.jpg"][:200])
    (src / "cat" / "notes.txt").write_text("not an image")
    return src


def _digests(out: Path, root: Path) -> dict[str, str]:
    """SHA-256 of every file of the build's output, the manifest without its unstable fields,
    with the test's own folder written as <root> wherever it appears."""
    digests = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        name = path.relative_to(out).as_posix()
        if name.startswith("reports/") or name in ("dataset_info.json", "features.json"):
            continue  # report parts repeat report.jsonl; TFDS files carry versions
        data = path.read_bytes()
        if name == "manifest.json":
            manifest = json.loads(data)
            for key in UNSTABLE:
                manifest.pop(key)
            data = json.dumps(manifest, sort_keys=True).encode()
        data = data.replace(str(root).encode(), b"<root>")
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_build_output_is_byte_identical_to_the_golden_digests(variant, tmp_path):
    src = _collection(tmp_path)
    out = tmp_path / "out" / "golden"
    overrides = VARIANTS[variant]
    config = BuildConfig.from_settings(
        dict(
            inputs=(f"{src}/**",),
            output=str(out),
            min_shard_size=20_000,
            max_shard_size=60_000,
            seed=5,
            **overrides,
        )
    )
    build(config)
    digests = _digests(out, tmp_path)
    assert digests == GOLDEN[variant]
