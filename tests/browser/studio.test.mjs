// The studio in a real headless Chromium (the system's, driven by playwright-core), against the
// real easel binary, by accessible names: sign up; on Create, a prompt with --ar 16:9, a model,
// Generate, and the new task at the top of the feed drawing its preview, then its grid, with no
// reload; a bad parameter said beside the prompt; an image prompt added by drag-and-drop; on the
// grid's page U2, then on the upscale Vary (Strong), Zoom Out 2x and Pan right, each opening a
// live page that finishes; Vary (Region): a rectangle dragged with the mouse (and one marked from
// the keyboard), Submit region, and the inpaint's images compared with the parent pixel by pixel
// (outside the rectangle unchanged, inside redrawn). axe-core on every page (serious or critical
// violations fail), errors in the console fail, screenshots at desktop and phone widths in
// $EASEL_SCREENSHOTS, and each studio page's weight printed at the end (bench/page-weight).
//
// Run by scripts/browser-test.sh. Environment as tests/browser/dashboard.test.mjs: EASEL_BIN,
// CHROMIUM, EASEL_SCREENSHOTS, EASEL_IMAGE_SIZE.

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const target = resolve(root, process.env.CARGO_TARGET_DIR || "target");
const bin = resolve(process.env.EASEL_BIN || join(target, "debug", "easel"));
const shots = process.env.EASEL_SCREENSHOTS || join(target, "screenshots");
const PASSWORD = "a long studio password";
const EMAIL = "studio@example.com";

function findChromium() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  for (const name of ["chromium", "chromium-browser"]) {
    const found = spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" });
    if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
  }
  return null;
}

const executablePath = findChromium();
if (!executablePath) {
  if (process.env.CI === "true") {
    console.error("studio browser test: CI=true but there is no chromium; it may not be skipped");
    process.exit(1);
  }
  console.log("studio browser test skipped: no chromium on this machine");
  process.exit(0);
}

/// The real binary on a free port with a fresh data dir; tasks take a little while, so that a
/// preview is seen before the result.
function startEasel(dir) {
  const env = {
    ...process.env,
    EASEL_DATA_DIR: join(dir, "data"),
    EASEL_LISTEN: "127.0.0.1:0",
    EASEL_IMAGE_SIZE: process.env.EASEL_IMAGE_SIZE || "256",
    EASEL_POLL_INTERVAL: "100ms",
    EASEL_PROCEDURAL_MIN_DURATION: "3s",
    EASEL_SIGNUP_CREDITS: "unlimited",
    RUST_LOG: "warn",
  };
  const child = spawn(bin, ["serve"], { cwd: dir, env, stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const m = out.match(/easel listening on (\S+)/);
      if (m) ok({ child, base: m[1] });
    });
    child.on("exit", (code) => fail(new Error(`easel exited (${code}) before listening`)));
  });
}

const waitFor = async (what, check, ms = 60000) => {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
};

const axeResults = [];
const consoleErrors = [];

async function axe(page, name) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => ["serious", "critical"].includes(v.impact));
  axeResults.push({ name, violations: result.violations.map((v) => `${v.impact}: ${v.id}`) });
  assert.deepEqual(
    bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`),
    [],
    `axe on ${name}`,
  );
}

async function check(page, name, width) {
  await axe(page, `${name} (${width})`);
  await page.screenshot({ path: join(shots, `studio-${name}-${width}.png`), fullPage: true });
}

function watchConsole(page) {
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(`${page.url()}: ${m.text()} at ${JSON.stringify(m.location())}`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
}

async function api(base, key, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: key, "Content-Type": "application/json" },
    body: body && JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

/// What loading `path` with nothing cached brings over the network (as the dashboard's test
/// measures it): HTML, assets (CSS and scripts) and images.
async function weigh(browser, base, storageState, path) {
  const context = await browser.newContext({ storageState, viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const responses = [];
  page.on("response", (r) => responses.push(r));
  await page.goto(base + path);
  await page.waitForLoadState("networkidle");
  const kinds = { html: 0, assets: 0, images: 0 };
  for (const r of responses) {
    const sizes = await r.request().sizes();
    const bytes = sizes.responseBodySize + sizes.responseHeadersSize;
    const url = new URL(r.url());
    const kind = url.pathname.startsWith("/assets/")
      ? "assets"
      : (r.headers()["content-type"] || "").startsWith("image/")
        ? "images"
        : "html";
    kinds[kind] += bytes;
  }
  await context.close();
  return kinds;
}

/// The task page at `id` until its progress says finished (live, no reload).
async function finished(page, id) {
  await page.waitForURL(new RegExp(`/tasks/${id}$`));
  await waitFor(`task ${id} to finish`, async () =>
    (await page.locator(`#progress-${id} [data-status]`).textContent()) === "finished");
}

/// Press the follow-up `name` on the page and wait for the new task's page to finish: its id.
async function press(page, name) {
  const from = page.url();
  await page.getByRole("button", { name, exact: true }).click();
  await waitFor(`${name} to open a new page`, () => page.url() !== from && /\/tasks\/[0-9a-f-]{36}$/.test(page.url()));
  const id = page.url().split("/").pop();
  await finished(page, id);
  return id;
}

async function main() {
  mkdirSync(shots, { recursive: true });
  const dir = mkdtempSync(join(tmpdir(), "easel-studio-"));
  const easel = await startEasel(dir);
  const { base } = easel;
  const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
  try {
    const desktop = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await desktop.newPage();
    watchConsole(page);
    await page.goto(base + "/signup");
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign up" }).click();
    await page.waitForURL(/\/keys$/);
    // A key for the test's own reads of the API (the studio itself needs none).
    await page.getByLabel("Name").fill("reader");
    await page.getByRole("button", { name: "Create key" }).click();
    const key = (await page.getByTestId("new-key").textContent()).trim();

    // Create: a prompt with --ar 16:9, a model, Generate; the task tops the feed and draws.
    await page.getByRole("link", { name: "Create", exact: true }).click();
    await page.getByRole("heading", { name: "Create" }).waitFor();
    await check(page, "create", "desktop");
    await page.evaluate(() => (window.easelStayed = true));
    const prompt = "a harbour at dawn";
    await page.getByLabel("Prompt", { exact: true }).fill(`${prompt} --ar 16:9`);
    const models = await page.getByLabel("Model", { exact: true }).locator("option").evaluateAll((os) => os.map((o) => o.value));
    const model = models.find((m) => m) || "";
    await page.getByLabel("Model", { exact: true }).selectOption(model);
    if (model) {
      // The model's limits become the hints of its settings.
      const limits = await page.getByLabel("Model", { exact: true }).locator(`option[value="${model}"]`).getAttribute("data-steps");
      assert.equal(await page.getByLabel("Steps").getAttribute("placeholder"), limits);
    }
    await page.getByRole("button", { name: "Generate" }).click();
    const row = page.locator("#feed li").first();
    await waitFor("the new task at the top of the feed", async () =>
      ((await row.textContent()) || "").includes(prompt));
    const grid = await row.getAttribute("data-task");
    const thumb = row.locator("[data-thumb-box] img");
    await waitFor("the preview as it draws", async () =>
      /\/preview\//.test((await thumb.getAttribute("src").catch(() => "")) || ""));
    await waitFor("the grid in the feed", async () =>
      (await row.locator("[data-status]").textContent()) === "finished" &&
      /\/image\/0/.test((await thumb.getAttribute("src")) || "") &&
      (await thumb.evaluate((i) => i.complete && i.naturalWidth > 0)));
    assert.equal(await page.evaluate(() => window.easelStayed), true, "Create was not reloaded");
    assert.equal(await page.getByLabel("Prompt", { exact: true }).inputValue(), "", "a fresh form");
    const record = await api(base, key, "GET", `/api/v1/tasks/${grid}`);
    assert.equal(record.body.aspect_ratio, "16:9", JSON.stringify(record.body));

    // A bad parameter: the parser's words beside the prompt, nothing stored.
    const count = (await api(base, key, "GET", "/api/v1/tasks")).body.tasks.length;
    await page.getByLabel("Prompt", { exact: true }).fill("a fox --bogus 3");
    await page.getByRole("button", { name: "Generate" }).click();
    await page.locator("#c-prompt-error").waitFor();
    assert.match(await page.locator("#c-prompt-error").textContent(), /^prompt: .*bogus/);
    assert.equal((await api(base, key, "GET", "/api/v1/tasks")).body.tasks.length, count);
    await check(page, "create-error", "desktop");

    // An image prompt dropped on the form.
    const drop = await page.evaluateHandle(async () => {
      const c = document.createElement("canvas");
      c.width = c.height = 64;
      const g = c.getContext("2d");
      g.fillStyle = "#3a7";
      g.fillRect(0, 0, 64, 64);
      const blob = await new Promise((ok) => c.toBlob(ok, "image/png"));
      const dt = new DataTransfer();
      dt.items.add(new File([blob], "dropped.png", { type: "image/png" }));
      return dt;
    });
    await page.locator("#create").dispatchEvent("dragover", { dataTransfer: drop });
    await page.locator("#create").dispatchEvent("drop", { dataTransfer: drop });
    assert.equal(await page.getByLabel("Add image").evaluate((i) => i.files.length), 1);
    await page.getByLabel("Prompt", { exact: true }).fill("in the dropped image's colours");
    await page.getByRole("button", { name: "Generate" }).click();
    await waitFor("the image prompt's task", async () =>
      ((await page.locator("#feed li").first().textContent()) || "").includes("dropped image"));
    const dropped = await page.locator("#feed li").first().getAttribute("data-task");
    const withImage = await api(base, key, "GET", `/api/v1/tasks/${dropped}`);
    assert.equal(withImage.body.image_prompts.length, 1, JSON.stringify(withImage.body));

    // The grid's page: its buttons; U2, then the upscale's own.
    await page.goto(`${base}/tasks/${grid}`);
    await finished(page, grid);
    for (const name of ["U1", "U2", "U3", "U4", "Reroll", "V1", "V4", "Copy prompt"]) {
      await page.getByRole("button", { name, exact: true }).waitFor();
    }
    await page.getByRole("link", { name: "Use as image prompt" }).waitFor();
    await page.getByRole("link", { name: "Download" }).waitFor();
    await check(page, "task-buttons", "desktop");
    const upscale = await press(page, "U2");
    // Its buttons arrived with its end, live.
    await page.getByRole("button", { name: "Vary (Region)" }).waitFor();
    await check(page, "upscale", "desktop");
    await press(page, "Vary (Strong)");
    for (const name of ["Zoom Out 2x", "Pan right"]) {
      await page.goto(`${base}/tasks/${upscale}`);
      await press(page, name);
    }

    // Vary (Region): a rectangle dragged with the mouse; only it is redrawn.
    await page.goto(`${base}/tasks/${upscale}`);
    await page.getByRole("button", { name: "Vary (Region)" }).click();
    const editor = page.getByRole("application", { name: "Region editor" });
    await editor.waitFor();
    await page.locator(".editor img").evaluate((i) => i.decode());
    await check(page, "region", "desktop");
    // From the keyboard first: focus, Enter marks the rectangle; then Undo.
    await editor.focus();
    await page.keyboard.press("ArrowRight");
    await page.keyboard.press("Enter");
    assert.match(await page.locator("[data-marks]").textContent(), /^1 mark/);
    await page.getByRole("button", { name: "Undo" }).click();
    assert.match(await page.locator("[data-marks]").textContent(), /Nothing marked/);
    await page.getByRole("button", { name: "Rectangle" }).click();
    const box = await page.locator(".editor canvas").boundingBox();
    const [fx0, fy0, fx1, fy1] = [0.25, 0.3, 0.6, 0.7];
    await page.mouse.move(box.x + box.width * fx0, box.y + box.height * fy0);
    await page.mouse.down();
    await page.mouse.move(box.x + box.width * 0.4, box.y + box.height * 0.5, { steps: 4 });
    await page.mouse.move(box.x + box.width * fx1, box.y + box.height * fy1, { steps: 4 });
    await page.mouse.up();
    assert.match(await page.locator("[data-marks]").textContent(), /^1 mark/);
    await page.getByLabel("Prompt", { exact: true }).fill("a small red boat");
    await page.getByRole("button", { name: "Submit region" }).click();
    await waitFor("the inpaint's page", () => /\/tasks\/[0-9a-f-]{36}$/.test(page.url()));
    const inpaint = page.url().split("/").pop();
    await finished(page, inpaint);
    const parent = await api(base, key, "GET", `/api/v1/tasks/${upscale}`);
    const made = await api(base, key, "GET", `/api/v1/tasks/${inpaint}`);
    assert.equal(made.body.task_type, "inpaint");
    assert.equal(made.body.parent_task_id, upscale);
    // Pixel by pixel in the page (the images are this site's): outside the rectangle (less a
    // 2-pixel edge, where the drag's rounding falls) the parent's, inside some redrawn.
    const compared = await page.evaluate(
      async ({ parentUrl, urls, rect }) => {
        const load = async (u) => {
          const img = new Image();
          img.src = u;
          await img.decode();
          const c = document.createElement("canvas");
          c.width = img.naturalWidth;
          c.height = img.naturalHeight;
          const g = c.getContext("2d");
          g.drawImage(img, 0, 0);
          return g.getImageData(0, 0, c.width, c.height);
        };
        const p = await load(parentUrl);
        const out = [];
        for (const u of urls) {
          const d = await load(u);
          let outside = 0, inside = 0;
          const [x0, y0, x1, y1] = [rect[0] * p.width, rect[1] * p.height, rect[2] * p.width, rect[3] * p.height];
          for (let y = 0; y < p.height; y++) {
            for (let x = 0; x < p.width; x++) {
              const i = (y * p.width + x) * 4;
              const same = d.data[i] === p.data[i] && d.data[i + 1] === p.data[i + 1] && d.data[i + 2] === p.data[i + 2];
              const isIn = x >= x0 + 2 && x < x1 - 2 && y >= y0 + 2 && y < y1 - 2;
              const isOut = x < x0 - 2 || x >= x1 + 2 || y < y0 - 2 || y >= y1 + 2;
              if (isOut && !same) outside++;
              if (isIn && !same) inside++;
            }
          }
          out.push({ outside, inside, size: [d.width, d.height, p.width, p.height] });
        }
        return out;
      },
      { parentUrl: parent.body.image_url, urls: made.body.image_urls, rect: [fx0, fy0, fx1, fy1] },
    );
    for (const c of compared) {
      assert.equal(c.size[0], c.size[2], JSON.stringify(c));
      assert.equal(c.outside, 0, `pixels outside the rectangle changed: ${JSON.stringify(c)}`);
      assert.ok(c.inside > 0, `the rectangle was redrawn: ${JSON.stringify(c)}`);
    }

    // Phone width.
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    await phone.addCookies(await desktop.cookies());
    const small = await phone.newPage();
    watchConsole(small);
    for (const [name, path] of [
      ["create", "/"],
      ["task-buttons", `/tasks/${grid}`],
      ["upscale", `/tasks/${upscale}`],
      ["region", `/tasks/${upscale}/region`],
    ]) {
      await small.goto(base + path);
      await small.waitForLoadState("networkidle");
      const overflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `${name} is ${overflow}px wider than a phone`);
      await check(small, name, "phone");
    }

    const session = await desktop.storageState();
    const weights = [];
    for (const [name, path] of [
      ["create", "/"],
      ["task", `/tasks/${grid}`],
      ["upscale", `/tasks/${upscale}`],
      ["region", `/tasks/${upscale}/region`],
    ]) {
      const w = await weigh(browser, base, session, path);
      weights.push({ name, ...w, total: w.html + w.assets + w.images });
    }

    assert.deepEqual(consoleErrors, [], "errors in the browser's console");
    console.log("studio browser test: axe-core results (every violation, any impact):");
    for (const r of axeResults) {
      console.log(`  ${r.name}: ${r.violations.length ? r.violations.join(", ") : "none"}`);
    }
    console.log("studio page weight, nothing cached (bytes over the network, headers included):");
    console.log("  page        html+assets  of which assets  images   total");
    for (const w of weights) {
      const row = [w.name.padEnd(10), String(w.html + w.assets).padStart(11),
        String(w.assets).padStart(16), String(w.images).padStart(7), String(w.total).padStart(8)];
      console.log(`  ${row.join("  ")}`);
    }
    console.log(`studio browser test passed; screenshots in ${shots}`);
  } finally {
    await browser.close();
    easel.child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
