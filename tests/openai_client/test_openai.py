"""The real `openai` Python client (PyPI, the version scripts/openai-client-test.sh pins) against
a running easel, through `base_url`: images.generate with url and b64_json, images.edit with a
mask, images.create_variation, models.list, a 401 raised as AuthenticationError, a 400 as
BadRequestError naming its param, and stream=True yielding partial and completed events. Every
image decodes and is the image of the task easel's own API records.

Run by scripts/openai-client-test.sh: EASEL_BASE (http://host:port) and EASEL_KEY in the
environment. Exits non-zero on the first failure.
"""
import base64
import json
import os
import struct
import sys
import urllib.request
import warnings
import zlib

import openai
from openai import OpenAI

# OpenAI deprecates variations (dall-e-2's route); easel keeps answering it.
warnings.filterwarnings("ignore", message="deprecated", category=DeprecationWarning)

BASE = os.environ["EASEL_BASE"]
KEY = os.environ["EASEL_KEY"]


def easel(path):
    """GET one of easel's own routes (its raw key, as its API takes it)."""
    req = urllib.request.Request(BASE + path, headers={"Authorization": KEY})
    with urllib.request.urlopen(req, timeout=30) as res:
        return json.load(res)


def fetch(url):
    with urllib.request.urlopen(url, timeout=30) as res:
        return res.read()


def png(width, height, alpha):
    """An RGBA PNG (no Pillow needed): pixel (x, y) has alpha `alpha(x, y)`."""
    rows = b"".join(
        b"\x00" + b"".join(bytes([x * 3 % 256, y * 5 % 256, 90, alpha(x, y)]) for x in range(width))
        for y in range(height)
    )

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def size_of(data):
    """The size of a PNG or JPEG file, read from its header: the file decodes that far."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return struct.unpack(">II", data[16:24])
    if data.startswith(b"\xff\xd8"):
        i = 2
        while i < len(data):
            marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
            if marker in (0xC0, 0xC1, 0xC2):
                h, w = struct.unpack(">HH", data[i + 5 : i + 9])
                return w, h
            i += 2 + length
    raise AssertionError("not a PNG or JPEG: %r" % data[:16])


def tasks():
    return easel("/api/v1/tasks?limit=100")["tasks"]


def check(name, ok, detail=""):
    if not ok:
        print("FAIL:", name, detail)
        sys.exit(1)
    print("ok:", name)


client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
print("openai", openai.__version__)

# images.generate, url: two images of one imagine task, fetchable, the task's own.
res = client.images.generate(prompt="a red fox in the snow", n=2, size="1024x1024", response_format="url")
check("generate url: two images", len(res.data) == 2, res)
task = next(t for t in tasks() if t["prompt"] == "a red fox in the snow")
check("generate url: an imagine task, finished", task["task_type"] == "imagine" and task["status"] == "finished", task)
for image in res.data:
    check("generate url: the task's image", image.url in task["image_urls"], image.url)
    w, h = size_of(fetch(image.url))
    check("generate url: size", res.size == "%dx%d" % (w, h), (res.size, w, h))

# images.generate, b64_json: the bytes are the task's first image.
res = client.images.generate(prompt="a blue heron", response_format="b64_json", quality="high")
data = base64.b64decode(res.data[0].b64_json)
task = next(t for t in tasks() if t["prompt"] == "a blue heron")
check("generate b64_json: the task's first image", data == fetch(task["image_urls"][0]))
check("generate b64_json: a PNG", size_of(data) and res.output_format == "png", res.output_format)

# images.generate in JPEG.
res = client.images.generate(prompt="a grey wolf", response_format="b64_json", output_format="jpeg", output_compression=80)
data = base64.b64decode(res.data[0].b64_json)
check("generate jpeg: decodes", data.startswith(b"\xff\xd8") and "%dx%d" % size_of(data) == res.size, res.size)

# images.edit with OpenAI's mask (transparent = redraw): an upscale, then an inpaint task.
image = png(48, 32, lambda x, y: 255)
mask = png(48, 32, lambda x, y: 0 if x < 24 else 255)
res = client.images.edit(
    image=("photo.png", image, "image/png"),
    mask=("mask.png", mask, "image/png"),
    prompt="a lake at dusk",
    response_format="b64_json",
)
data = base64.b64decode(res.data[0].b64_json)
inpaint = next(t for t in tasks() if t["task_type"] == "inpaint" and t["prompt"] == "a lake at dusk")
check("edit with mask: the inpaint task's first image", data == fetch(inpaint["image_urls"][0]))

# images.edit without a mask: the image as an image prompt.
res = client.images.edit(image=("photo.png", image, "image/png"), prompt="a meadow", response_format="url")
task = next(t for t in tasks() if t["prompt"] == "a meadow")
check("edit without mask: an imagine with the image as image prompt",
      task["task_type"] == "imagine" and len(task.get("image_prompts", [])) == 1, task)
check("edit without mask: the task's image", res.data[0].url == task["image_urls"][0])

# images.create_variation: an upscale, then a variations task.
res = client.images.create_variation(image=("photo.png", image, "image/png"), n=1, response_format="url")
variations = [t for t in tasks() if t["task_type"] == "variations"]
check("variation: a variations task's image", len(variations) == 1 and res.data[0].url in variations[0]["image_urls"], variations)
size_of(fetch(res.data[0].url))

# models.list: the account's models.
ids = [m.id for m in client.models.list()]
names = [m["name"] for m in easel("/api/v1/models")["models"]]
check("models.list: easel's models", ids == names, (ids, names))

# 401 as AuthenticationError.
try:
    OpenAI(base_url=BASE + "/v1", api_key="easel_" + "A" * 32, max_retries=0).images.generate(prompt="x")
    check("401", False, "no error")
except openai.AuthenticationError as e:
    check("401: AuthenticationError", e.status_code == 401 and e.code == "invalid_api_key", e)

# 400 as BadRequestError naming its param.
for kwargs, param in [({"n": 11}, "n"), ({"size": "huge"}, "size"), ({"output_format": "gif"}, "output_format")]:
    try:
        client.images.generate(prompt="x", **kwargs)
        check("400 " + param, False, "no error")
    except openai.BadRequestError as e:
        check("400: BadRequestError param=" + param, e.status_code == 400 and e.param == param, (e.param, e))

# stream=True: partial images from the previews, then the completed image.
before = len(tasks())
events = list(client.images.generate(prompt="a slow sunrise", stream=True, partial_images=2, response_format="b64_json"))
kinds = [e.type for e in events]
check("stream: partial events", 1 <= kinds.count("image_generation.partial_image") <= 2, kinds)
check("stream: one completed event, last", kinds[-1] == "image_generation.completed" and kinds.count("image_generation.completed") == 1, kinds)
for e in events:
    size_of(base64.b64decode(e.b64_json))
task = next(t for t in tasks() if t["prompt"] == "a slow sunrise")
check("stream: the completed image is the task's", base64.b64decode(events[-1].b64_json) == fetch(task["image_urls"][0]))
check("stream: one task", len(tasks()) == before + 1)
print("all passed")
