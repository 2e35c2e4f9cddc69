/**
 * The API reference at /docs, in a real headless browser: Debian's chromium driven by
 * playwright-core. Without /usr/bin/chromium the test is skipped, except under CI (`CI`
 * set), where `.ci/run` installs it and a missing browser is a failure (docs/testing.md).
 */
import { existsSync } from 'node:fs';
import t, { type Test } from 'tap';
import { chromium, type Page, type Request } from 'playwright-core';
import { startTestApi } from '../../helpers/atrium.ts';

const CHROMIUM = '/usr/bin/chromium';
const underCi = Boolean(process.env.CI) && process.env.CI !== 'false' && process.env.CI !== '0';
/**
 * How long any one step in the browser may take. On a quiet two-core machine the whole file
 * takes about 30 s; in CI it shares the cores with the rest of the suite and has taken over
 * four times as long, so a page load can pass playwright's default 30 s.
 */
const PATIENCE = 120_000;
// The file's own limit, above the suite's 120 s, for the same reason.
t.setTimeout(600_000);

if (!existsSync(CHROMIUM)) {
  if (underCi) t.fail(`${CHROMIUM} is missing: CI installs Debian's chromium for this test`);
  else t.plan(0, `${CHROMIUM} is missing (apt-get install -y chromium); the browser check runs in CI`);
} else {
  const api = await startTestApi(t);
  const app = api.atrium.app!;
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  const spec = (await app.inject({ method: 'GET', url: '/api/openapi.json' })).json();
  // One browser for the file; each test opens a context of its own, which shares no storage.
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  t.teardown(() => browser.close());

  t.test('the reference page is served from the package, with its policy, reading the one spec URL', async (t) => {
    const page = await app.inject({ method: 'GET', url: '/docs/' });
    t.equal(page.statusCode, 200);
    t.match(page.body, /<title>Atrium API reference<\/title>/);
    t.match(page.body, /"url": "\/api\/openapi.json"/);
    t.match(page.body, /"persistAuth": true/);
    t.match(page.body, /<script src="js\/scalar.js"><\/script>/);
    t.notMatch(page.body, /https?:\/\//, 'no absolute URL: nothing is loaded from elsewhere');
    t.match(String(page.headers['content-security-policy']), /script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
    const redirect = await app.inject({ method: 'GET', url: '/docs' });
    t.strictSame([redirect.statusCode, redirect.headers.location], [301, '/docs/']);
    t.notMatch(String(redirect.headers['content-type'] ?? ''), /octet-stream/, 'the redirect has no body of bytes');
    for (const url of ['/docs/json', '/docs/openapi.json', '/docs/openapi.yaml']) {
      t.equal((await app.inject({ method: 'GET', url })).statusCode, 404, `${url}: no second copy of the spec`);
    }
  });

  t.test('the script is one kept answer, whatever the query, and browsers may keep it', async (t) => {
    const scripts = await Promise.all(['/docs/js/scalar.js', '/docs/js/scalar.js?v=2', '/docs/js/scalar.js'].map((url) => app.inject({ method: 'GET', url })));
    for (const script of scripts) {
      t.equal(script.statusCode, 200);
      t.match(String(script.headers['content-type']), /javascript/);
      t.equal(script.headers['cache-control'], 'public, max-age=3600');
      t.ok(script.rawPayload.equals(scripts[0]!.rawPayload), 'the same bytes');
    }
    t.ok(scripts[0]!.rawPayload.length > 1_000_000, `the whole script (${scripts[0]!.rawPayload.length} bytes)`);
  });

  /**
   * A fresh browser context (no storage shared with another test), recording every request
   * the page makes and every failed answer, console error and page error. Every wait in it
   * has the same patience; see PATIENCE.
   */
  async function openBrowser(t: Test) {
    const context = await browser.newContext();
    context.setDefaultTimeout(PATIENCE);
    context.setDefaultNavigationTimeout(PATIENCE);
    t.teardown(() => context.close());
    const requests: Request[] = [];
    const problems: string[] = [];
    context.on('request', (request) => {
      requests.push(request);
    });
    context.on('response', (response) => {
      if (response.status() >= 400) problems.push(`${response.status()} ${response.url()}`);
    });
    const page = await context.newPage();
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console: ${message.text()}`);
    });
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    const origin = new URL(base).origin;
    /** URLs requested from anywhere but this service (data: and blob: URLs stay in the page). */
    const elsewhere = () =>
      requests.map((request) => request.url()).filter((url) => !url.startsWith(origin) && !url.startsWith('data:') && !url.startsWith('blob:'));
    return { page, requests, problems, elsewhere };
  }

  /** Opens a tag's group in the sidebar: the button whose text holds "Open Group" and the tag's name. */
  async function openGroup(page: Page, tag: string) {
    await page.locator('button', { hasText: 'Open Group' }).filter({ hasText: tag }).first().click();
  }

  t.test('in chromium the page renders every tag, loads nothing from another host and logs no error', async (t) => {
    const { page, requests, problems, elsewhere } = await openBrowser(t);

    await page.goto(`${base}/docs`);
    const tags: string[] = spec.tags.map((tag: { name: string }) => tag.name);
    await page.waitForFunction((names: string[]) => names.every((name) => document.body.innerText.includes(name)), tags);
    t.equal(await page.title(), 'Atrium API reference');
    const text = await page.evaluate(() => document.body.innerText);
    for (const tag of tags) t.ok(text.includes(tag), `tag ${tag} is listed`);

    // The webhook is listed in its tag's group.
    await openGroup(page, 'Automations');
    const webhook: string = spec.webhooks['automation.run'].post.summary;
    await page.waitForFunction((summary: string) => document.body.innerText.includes(summary), webhook);
    t.pass('the automation.run webhook is listed under Automations');

    // The SCIM operations, which the SCIM service serves rather than the binding, are listed in their tag's group.
    await openGroup(page, 'SCIM 2.0');
    const scimOperation: string = spec.paths['/scim/v2/Users'].post.summary;
    await page.waitForFunction((summary: string) => document.body.innerText.includes(summary), scimOperation);
    t.pass('the SCIM operations are listed under SCIM 2.0');

    t.strictSame(elsewhere(), [], 'no request leaves the service');
    t.ok(
      requests.some((request) => request.url() === `${new URL(base).origin}/api/openapi.json`),
      'the spec is read from /api/openapi.json',
    );
    t.strictSame(problems, [], 'no console error');
  });

  t.test('a bearer token entered on the page survives a reload and signs a request sent from the page', async (t) => {
    const tenant = await api.createTenant('reference');
    const { page, requests, problems, elsewhere } = await openBrowser(t);
    await page.goto(`${base}/docs`);
    // The Bearer field of the document's Authentication block (the scheme bearerAuth).
    const token = page.getByPlaceholder('Token').first();
    await token.waitFor();
    t.equal(await token.inputValue(), '', 'a fresh profile holds no token');
    await token.fill(tenant.adminToken);
    // The page stores what was entered in the browser's local storage, after a short delay.
    await page.waitForFunction((value: string) => Object.values(localStorage).some((stored) => stored.includes(value)), tenant.adminToken);

    await page.reload();
    await token.waitFor();
    t.equal(await token.inputValue(), tenant.adminToken, 'the token is still in the Bearer field after the reload');

    // The request client of getCurrentUser sends it.
    const operation = page.locator('[id$="/GET/api/users/current"]').first();
    await openGroup(page, 'Users');
    await operation.scrollIntoViewIfNeeded();
    await operation.locator('button', { hasText: 'Test Request' }).first().click();
    const answered = page.waitForResponse((response) => new URL(response.url()).pathname === '/api/users/current');
    await page.locator('button', { hasText: 'Send get request' }).first().click();
    const response = await answered;
    t.equal(response.request().headers().authorization, `Bearer ${tenant.adminToken}`, 'the request carries the persisted token');
    t.equal(response.status(), 200);
    t.equal((await response.json()).id, tenant.adminUserId, 'answered as the user the token belongs to');

    t.strictSame(elsewhere(), [], 'no request leaves the service');
    t.equal(requests.filter((request) => new URL(request.url()).pathname === '/api/users/current').length, 1, 'one request, sent when asked');
    t.strictSame(problems, [], 'no console error');
  });
}
