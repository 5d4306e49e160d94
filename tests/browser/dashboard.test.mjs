// The dashboard in a real headless Chromium (the system's, driven by playwright-core), against
// the real easel binary: sign up, create a key, use it with the API, see the task and its images
// in the list and on its page, ask for a redelivery, use the playground, reveal the signing
// secret, look at the operators' page, revoke the key and see the API refuse it, sign out and be
// refused the pages. On a second server whose tasks take seconds (procedural_min_duration), a
// task's preview and end, and the list's row, change live with no reload. axe-core runs on every page (serious or critical violations fail the test),
// and so does any error in the browser's console (a script or style refused by the CSP, say).
// Screenshots of the main pages at desktop and phone widths go to $EASEL_SCREENSHOTS (default
// target/screenshots), outside what git tracks.
//
// Run by scripts/test.sh after cargo has built target/debug/easel. Environment: EASEL_BIN (the
// binary), CHROMIUM (the browser; default: chromium on the PATH), EASEL_SCREENSHOTS,
// EASEL_IMAGE_SIZE (of the generated images; default 256), EASEL_EXTRA_TASKS (more tasks on the
// tasks page before its weight is measured; default none).

import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
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
const PASSWORD = "a long browser password";
const EMAIL = "browser@example.com";

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
    console.error("browser test: CI=true but there is no chromium; it may not be skipped");
    process.exit(1);
  }
  console.log("browser test skipped: no chromium on this machine (apt-get install chromium)");
  process.exit(0);
}

/// A webhook receiver that answers 500 to the first delivery and 200 to the rest, so the task
/// page shows a failed attempt and a good one.
function startReceiver() {
  const received = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      received.push(body);
      res.statusCode = received.length === 1 ? 500 : 200;
      res.end("ok");
    });
  });
  return new Promise((ok) =>
    server.listen(0, "127.0.0.1", () => ok({ server, received, port: server.address().port })),
  );
}

/// The real binary on a free port with a fresh data dir (and `extra` in its environment);
/// resolves with its base URL.
function startEasel(dir, extra = {}) {
  const env = {
    ...process.env,
    EASEL_DATA_DIR: join(dir, "data"),
    EASEL_LISTEN: "127.0.0.1:0",
    // Small images keep the test quick; bench/page-weight measures at easel's default size.
    EASEL_IMAGE_SIZE: process.env.EASEL_IMAGE_SIZE || "256",
    EASEL_POLL_INTERVAL: "100ms",
    EASEL_WEBHOOK_ALLOW_HTTP: "true",
    EASEL_WEBHOOK_ALLOW_PRIVATE: "true",
    EASEL_WEBHOOK_RETRY_SCHEDULE: "300ms,600ms",
    EASEL_WEBHOOK_TIMEOUT: "2s",
    RUST_LOG: "warn",
    ...extra,
  };
  // The page-weight bench fills the tasks page past what a new account's 100 credits pay for.
  if (Number(process.env.EASEL_EXTRA_TASKS || 0) > 0) env.EASEL_SIGNUP_CREDITS = "unlimited";
  const child = spawn(bin, ["serve"], { cwd: dir, env, stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
      const m = out.match(/easel listening on (\S+)/);
      if (m) ok({ child, base: m[1], env });
    });
    child.on("exit", (code) => fail(new Error(`easel exited (${code}) before listening`)));
  });
}

const waitFor = async (what, check, ms = 30000) => {
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

/// axe-core on the page as it is; serious and critical violations fail the test.
async function axe(page, name) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(() =>
    window.axe.run(document, { resultTypes: ["violations"] }),
  );
  const bad = result.violations.filter((v) => ["serious", "critical"].includes(v.impact));
  axeResults.push({ name, violations: result.violations.map((v) => `${v.impact}: ${v.id}`) });
  assert.deepEqual(
    bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`),
    [],
    `axe on ${name}`,
  );
}

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

async function check(page, name, width) {
  await axe(page, `${name} (${width})`);
  await shot(page, `${name}-${width}`);
}

/// Errors in the page's console fail the test, but for the 404 of a page the test expects to
/// be refused (`expected404`).
function watchConsole(page, expected404) {
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    if (expected404 && page.url() === expected404 && m.text().includes("404")) return;
    consoleErrors.push(`${page.url()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
}

/// What loading `path` with nothing cached brings over the network, by kind: each page in a
/// fresh context with the session's cookies, until the network is idle.
async function weigh(browser, base, storageState, path, viewport) {
  const context = await browser.newContext({ storageState, viewport });
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

async function api(base, key, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: key, "Content-Type": "application/json" },
    body: body && JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

/// On a server whose tasks take seconds: the tasks list's row and a task's page follow the task
/// live (its place in line or progress, its preview, its end) with no navigation, which a marker
/// left on `window` proves.
async function checkLive(browser) {
  const dir = mkdtempSync(join(tmpdir(), "easel-browser-live-"));
  const slow = await startEasel(dir, { EASEL_PROCEDURAL_MIN_DURATION: "8s" });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  try {
    const page = await context.newPage();
    watchConsole(page);
    await page.goto(slow.base + "/signup");
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign up" }).click();
    await page.waitForURL(/\/keys$/);
    await page.getByLabel("Name").fill("live");
    await page.getByRole("button", { name: "Create key" }).click();
    const key = (await page.getByTestId("new-key").textContent()).trim();

    // The list: the row of a running task turns finished by itself.
    const first = await api(slow.base, key, "POST", "/api/v1/imagine", { prompt: "a slow tide" });
    assert.equal(first.status, 200, JSON.stringify(first.body));
    await page.goto(slow.base + "/tasks");
    await page.evaluate(() => (window.easelStayed = true));
    const status = page.locator(`ul.tasks li[data-task="${first.body.task_id}"] [data-status]`);
    assert.notEqual(await status.textContent(), "finished", "the task runs when the list loads");
    await waitFor("the row to turn finished", async () => (await status.textContent()) === "finished");
    assert.equal(await page.evaluate(() => window.easelStayed), true, "the list was not reloaded");

    // A task's page: the preview appears while it runs, then the result, with no reload.
    const second = await api(slow.base, key, "POST", "/api/v1/imagine", { prompt: "a slow moon" });
    assert.equal(second.status, 200, JSON.stringify(second.body));
    const id = second.body.task_id;
    await page.goto(`${slow.base}/tasks/${id}`);
    await page.evaluate(() => (window.easelStayed = true));
    const section = page.locator(`#progress-${id}`);
    assert.notEqual(await section.locator("[data-status]").textContent(), "finished");
    const cancel = page.getByRole("button", { name: "Cancel task" });
    assert.equal(await cancel.count(), 1, "a running task can be canceled");
    const preview = section.locator("img[data-preview]");
    await waitFor("the preview to appear", () =>
      preview.evaluate((i) => i.complete && i.naturalWidth > 0).catch(() => false),
    );
    assert.match(await preview.getAttribute("src"), new RegExp(`^/tasks/${id}/preview/`));
    await check(page, "task-running", "desktop");
    await waitFor("the task to show finished", async () =>
      (await page.locator(`#progress-${id} [data-status]`).textContent()) === "finished");
    const images = page.locator(`#progress-${id} .images img`);
    await waitFor("the result's images", async () => (await images.count()) === 5);
    assert.equal(await page.locator(`#progress-${id} img[data-preview]`).count(), 0, "no preview once done");
    await waitFor("the cancel button to go once it ended", async () => (await cancel.count()) === 0);
    assert.equal(await page.evaluate(() => window.easelStayed), true, "the page was not reloaded");
  } finally {
    await context.close();
    slow.child.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main() {
  mkdirSync(shots, { recursive: true });
  const dir = mkdtempSync(join(tmpdir(), "easel-browser-"));
  const receiver = await startReceiver();
  const easel = await startEasel(dir);
  const { base } = easel;
  const browser = await chromium.launch({ executablePath, args: ["--no-sandbox"] });
  try {
    const desktop = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const page = await desktop.newPage();
    watchConsole(page);

    // Signed out, `/` is the sign-in page.
    await page.goto(base + "/");
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await check(page, "signin", "desktop");

    // Sign up.
    await page.getByRole("link", { name: "Sign up" }).first().click();
    await page.getByRole("heading", { name: "Sign up" }).waitFor();
    await check(page, "signup", "desktop");
    await page.getByLabel("Email").fill(EMAIL);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign up" }).click();
    await page.waitForURL(/\/keys$/);

    // Create a key: shown once.
    await page.getByLabel("Name").fill("browser test");
    await page.getByRole("button", { name: "Create key" }).click();
    const key = (await page.getByTestId("new-key").textContent()).trim();
    assert.match(key, /^easel_[A-Za-z0-9_-]{32}$/);
    await page.getByRole("button", { name: "Copy key" }).waitFor();
    await check(page, "keys", "desktop");

    // Use it with the API; the task and its images appear in the dashboard.
    const prompt = "a lighthouse at dusk, watercolor";
    const submitted = await api(base, key, "POST", "/api/v1/imagine", {
      prompt,
      webhook_url: `http://127.0.0.1:${receiver.port}/hook`,
    });
    assert.equal(submitted.status, 200, JSON.stringify(submitted.body));
    const taskId = submitted.body.task_id;
    await waitFor("the task to finish", async () => {
      const t = await api(base, key, "GET", `/api/v1/tasks/${taskId}`);
      return t.body.status === "finished";
    });
    await waitFor("the webhook to be delivered", () => receiver.received.length >= 2);

    await page.getByRole("link", { name: "Tasks" }).click();
    const link = page.getByRole("link", { name: prompt });
    await link.waitFor();
    const item = page.locator("ul.tasks li", { has: link });
    assert.match(await item.textContent(), /finished/);
    const thumb = item.locator("img");
    await waitFor("the thumbnail", () => thumb.evaluate((img) => img.complete && img.naturalWidth > 0));
    await check(page, "tasks", "desktop");

    // The task's page: prompt, images, timeline, every webhook attempt, redelivery.
    await link.click();
    await page.waitForURL(new RegExp(`/tasks/${taskId}$`));
    await page.getByRole("heading", { name: `Task: ${prompt}` }).waitFor();
    const images = page.locator(".images img");
    assert.equal(await images.count(), 5, "the grid and its four images");
    for (const img of await images.all()) {
      await img.scrollIntoViewIfNeeded();
      await waitFor("an image", () => img.evaluate((i) => i.complete && i.naturalWidth > 0));
    }
    const attempts = page.locator("table tbody tr");
    assert.equal(await attempts.count(), 2, "a failed attempt, then a delivered one");
    assert.match(await attempts.nth(0).textContent(), /HTTP 500/);
    assert.match(await attempts.nth(1).textContent(), /HTTP 200/);
    await check(page, "task", "desktop");
    const before = receiver.received.length;
    await page.getByRole("button", { name: "Redeliver" }).click();
    await page.getByText("A new delivery of the result is on its way.").waitFor();
    await waitFor("the redelivery", () => receiver.received.length > before);
    await waitFor("the redelivery's attempt on the page", async () => {
      await page.reload();
      return (await page.locator("table tbody tr").count()) === 3;
    });

    // The playground: submit, and see the images arrive without reloading.
    await page.getByRole("link", { name: "Playground" }).click();
    await page.getByRole("heading", { name: "Playground" }).waitFor();
    assert.equal(await page.getByLabel("API key").inputValue(), key, "filled in for this tab");
    await check(page, "playground", "desktop");
    await page.getByLabel("Operation").selectOption("imagine");
    await page.getByLabel("Prompt").fill("a red fox in the snow");
    const url = page.url();
    await page.getByRole("button", { name: "Submit" }).click();
    await page.locator("#result .images img").first().waitFor({ timeout: 30000 });
    assert.equal(page.url(), url, "no navigation");
    assert.equal(await page.locator("#result .images img").count(), 5);
    await waitFor("the playground's images", () =>
      page.locator("#result .images img").first().evaluate((i) => i.complete && i.naturalWidth > 0),
    );
    await check(page, "playground-result", "desktop");

    // The gallery: find the first task by words of its prompt, in any order, and open it.
    await page.getByRole("link", { name: "Gallery" }).click();
    await page.getByRole("heading", { name: "Gallery" }).waitFor();
    await check(page, "gallery", "desktop");
    await page.getByRole("searchbox", { name: "Search prompts" }).fill("Watercolor lighthouse");
    await page.getByRole("button", { name: "Search" }).click();
    await page.waitForURL(/\/gallery\?q=Watercolor(\+|%20)lighthouse/);
    const found = page.getByRole("link", { name: prompt });
    await found.waitFor();
    assert.equal(await page.getByRole("link", { name: "a red fox in the snow" }).count(), 0);
    await waitFor("the gallery's image", () =>
      found.locator("img").evaluate((i) => i.complete && i.naturalWidth > 0),
    );
    await page.getByLabel("Status").selectOption("failed");
    await page.getByRole("button", { name: "Search" }).click();
    await page.getByText("No image's prompt holds every one of those words.").waitFor();
    await page.getByLabel("Status").selectOption("");
    await page.getByRole("button", { name: "Search" }).click();
    await found.click();
    await page.waitForURL(new RegExp(`/tasks/${taskId}$`));

    // The account page: the signing secret on request.
    await page.getByRole("link", { name: "Account" }).click();
    await page.getByRole("heading", { name: "Account", exact: true }).waitFor();
    await page.getByRole("button", { name: "Reveal secret" }).click();
    assert.match(await page.locator("#signing-secret").textContent(), /^whsec_/);
    // The account webhook, set from its form (the API's checks; destinations are relaxed here).
    await page.getByLabel("Webhook URL").fill("http://127.0.0.1:9/hook");
    await page.getByLabel("credits.low").check();
    await page.getByRole("button", { name: "Save webhook" }).click();
    await page.getByText("Webhook saved.").waitFor();
    assert.equal(await page.getByLabel("Webhook URL").inputValue(), "http://127.0.0.1:9/hook");
    assert.ok(await page.getByLabel("credits.low").isChecked());
    assert.ok(!(await page.getByLabel("task.finished").isChecked()));
    await check(page, "account", "desktop");

    // Phone width: the same pages, signed in in a second browser.
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
    const small = await phone.newPage();
    watchConsole(small);
    await small.goto(base + "/signin");
    await check(small, "signin", "phone");
    await small.getByLabel("Email").fill(EMAIL);
    await small.getByLabel("Password").fill(PASSWORD);
    await small.getByRole("button", { name: "Sign in" }).click();
    await small.waitForURL(/\/$/);
    for (const [name, path] of [
      ["tasks", "/tasks"],
      ["task", `/tasks/${taskId}`],
      ["keys", "/keys"],
      ["playground", "/playground"],
      ["account", "/account"],
    ]) {
      await small.goto(base + path);
      await small.waitForLoadState("networkidle");
      const overflow = await small.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(overflow <= 0, `${name} is ${overflow}px wider than a phone`);
      await check(small, name, "phone");
    }

    // The operators' page, as the first account (its password set from the command line).
    const set = spawnSync(bin, ["accounts", "set-password", "admin@localhost"], {
      cwd: dir,
      env: easel.env,
      input: `${PASSWORD}\n`,
      encoding: "utf8",
    });
    assert.equal(set.status, 0, set.stderr);
    const operator = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const admin = await operator.newPage();
    watchConsole(admin, `${base}/tasks/${taskId}`);
    await admin.goto(base + "/signin");
    await admin.getByLabel("Email").fill("admin@localhost");
    await admin.getByLabel("Password").fill(PASSWORD);
    await admin.getByRole("button", { name: "Sign in" }).click();
    await admin.getByRole("link", { name: "Operators" }).click();
    await admin.getByRole("heading", { name: "Operators" }).waitFor();
    assert.match(await admin.locator("main").textContent(), new RegExp(EMAIL));
    await check(admin, "admin", "desktop");
    await admin.setViewportSize({ width: 390, height: 844 });
    await check(admin, "admin", "phone");
    // Another account's task stays out of the operator's own task pages.
    await admin.goto(`${base}/tasks/${taskId}`);
    await admin.getByRole("heading", { name: "Not found" }).waitFor();

    // The weight of each main page, nothing cached, at desktop width; with EASEL_EXTRA_TASKS
    // (bench/page-weight) the tasks page is first filled with that many more tasks.
    const extra = Number(process.env.EASEL_EXTRA_TASKS || 0);
    const more = [];
    for (let i = 0; i < extra; i++) {
      const r = await api(base, key, "POST", "/api/v1/imagine", { prompt: `a quiet harbour, study ${i}` });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      more.push(r.body.task_id);
    }
    for (const id of more) {
      await waitFor("the extra tasks", async () => {
        const t = await api(base, key, "GET", `/api/v1/tasks/${id}`);
        return t.body.status === "finished";
      }, 300000);
    }
    const session = await desktop.storageState();
    const weights = [];
    for (const [name, path, state] of [
      ["sign-in", "/signin", undefined],
      ["tasks", "/tasks", session],
      ["gallery", "/gallery", session],
      ["task", `/tasks/${taskId}`, session],
      ["keys", "/keys", session],
      ["playground", "/playground", session],
      ["account", "/account", session],
      ["operators", "/admin", await operator.storageState()],
    ]) {
      const w = await weigh(browser, base, state, path, { width: 1280, height: 800 });
      weights.push({ name, ...w, total: w.html + w.assets + w.images });
    }

    await checkLive(browser);

    // Revoke the key (with its confirmation step): the API refuses it at once.
    await page.getByRole("link", { name: "API keys" }).click();
    await page.getByRole("row", { name: /browser test/ }).getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("heading", { name: /Revoke the key/ }).waitFor();
    await check(page, "revoke", "desktop");
    await page.getByRole("button", { name: "Revoke" }).click();
    await page.waitForURL(/\/keys$/);
    const refused = await api(base, key, "GET", "/api/v1/account");
    assert.equal(refused.status, 401);

    // Sign out: the pages send back to sign in.
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(/\/signin/);
    for (const path of ["/tasks", `/tasks/${taskId}`, "/keys", "/account", "/playground"]) {
      await page.goto(base + path);
      assert.match(new URL(page.url()).pathname, /^\/signin$/, path);
    }

    assert.deepEqual(consoleErrors, [], "errors in the browser's console");
    console.log("browser test: axe-core results (every violation, any impact):");
    for (const r of axeResults) {
      console.log(`  ${r.name}: ${r.violations.length ? r.violations.join(", ") : "none"}`);
    }
    console.log("page weight, nothing cached (bytes over the network, headers included):");
    console.log("  page        html+assets  of which assets  images   total");
    for (const w of weights) {
      const row = [w.name.padEnd(10), String(w.html + w.assets).padStart(11),
        String(w.assets).padStart(16), String(w.images).padStart(7), String(w.total).padStart(8)];
      console.log(`  ${row.join("  ")}`);
    }
    console.log(`browser test passed; screenshots in ${shots}`);
  } finally {
    await browser.close();
    easel.child.kill("SIGTERM");
    receiver.server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
